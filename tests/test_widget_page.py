"""The rendered book shows chapter 14's explorer from its saved widget state, offline, and its controls work.

The book is built into a temporary directory and served on localhost (fixtures in `tests/conftest.py`,
shared with `test_book_browser.py`); chapter 14 is opened in headless Chromium with every request to
another host refused, so the widget manager must come from `book/assets`.

Needs Debian's Chromium (`apt-get install chromium`) and the PyPI package `playwright` (no browser
download: it drives /usr/bin/chromium); skips with a message where either is missing.
"""

from helpers import open_page

CHAPTER = "notebooks/14_seeing_attention"


def test_the_built_page_carries_the_saved_widget_state_and_the_local_manager(
    built_book,
):
    page = (built_book / f"{CHAPTER}.html").read_text(encoding="utf-8")
    assert 'type="application/vnd.jupyter.widget-state+json"' in page, (
        "no saved widget state: run the chapter with "
        "`jupyter execute --inplace`, which stores it in the notebook's metadata"
    )
    assert (
        "_static/ipywidgets/embed.js" in page
        and "cdn.jsdelivr.net" not in page
        and "require.min.js" not in page
    )


def test_the_explorer_renders_offline_and_its_controls_switch_the_map(
    book_site, open_offline
):
    # Errors that every page logs, read off the intro page (no widget), are the theme's, not this chapter's
    # (book/_ext/page_fixes.py mends the two known ones): only errors the chapter adds fail the test.
    intro, every_page, _ = open_offline(f"{book_site}book/intro.html")
    intro.close()
    page, errors, refused = open_offline(f"{book_site}{CHAPTER}.html")
    try:
        page.wait_for_selector(".widget-dropdown select", timeout=30_000)
        selects = page.locator(".widget-dropdown select")
        assert selects.count() == 4  # sentence, kind, layer, head
        image = page.locator("img.widget-image:visible")
        image.first.wait_for(timeout=30_000)
        assert image.count() == 1
        first = image.first.get_attribute("src")
        assert image.first.evaluate("img => img.naturalWidth") > 100
        assert (
            page.locator(".widget-html:visible").first.inner_text().strip()
        )  # the sentence and its translation
        selects.nth(3).select_option(index=2)  # head 2: a browser-side link, no kernel
        page.wait_for_function(
            "src => { const i = [...document.querySelectorAll('img.widget-image')]"
            ".filter(i => i.offsetParent !== null); return i.length === 1 && i[0].src !== src }",
            arg=first,
            timeout=30_000,
        )
        selects.nth(1).select_option(index=2)  # cross-attention
        selects.nth(0).select_option(index=1)  # the second sentence
        assert page.locator("img.widget-image:visible").count() == 1
    finally:
        page.close()
    assert not refused, (
        f"the page asked for other hosts (it must work offline): {refused}"
    )
    added = [e for e in errors if e not in every_page]
    assert not added, (
        f"console errors on the chapter's page: {added} (on every page, also without widgets: {every_page})"
    )


def test_the_explorer_fits_a_phone(book_site, chromium):
    """At 390x844 (touch) every control of the explorer is inside the window, the page does not pan
    sideways and the map is no wider than its column."""
    context = chromium.new_context(
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
        device_scale_factor=2,
    )
    try:
        page, errors, _ = open_page(context, f"{book_site}{CHAPTER}.html")
        page.wait_for_selector("img.widget-image", state="visible", timeout=30_000)
        view = page.evaluate(
            """() => ({
              page: document.documentElement.scrollWidth,
              controls: [...document.querySelectorAll('.widget-dropdown select, .widget-text input, .widget-button')]
                .map(e => e.getBoundingClientRect()).map(r => [Math.round(r.left), Math.round(r.right)]),
              map: (() => { const i = [...document.querySelectorAll('img.widget-image')].find(i => i.offsetParent);
                            return [i.getBoundingClientRect().right, i.closest('article').getBoundingClientRect().right]; })(),
            })"""
        )
    finally:
        context.close()
    assert view["page"] <= 390, f"the page is {view['page']} px wide"
    outside = [c for c in view["controls"] if c[0] < 0 or c[1] > 390]
    assert len(view["controls"]) >= 6 and not outside, view["controls"]
    assert view["map"][0] <= view["map"][1] + 1, view["map"]
