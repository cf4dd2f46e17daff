"""The rendered book shows chapter 14's explorer from its saved widget state, offline, and its controls work.

The test builds the book into a temporary directory (`jupyter-book build . --path-output TMP`: it renders
the stored outputs, about 15 s), serves it on localhost, and opens chapter 14 in headless Chromium with
every request to another host refused, so the widget manager must come from `book/assets`.

Needs Debian's Chromium (`apt-get install chromium`) and the PyPI package `playwright` (no browser
download: it drives /usr/bin/chromium); skips with a message where either is missing.
"""
import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHAPTER = "notebooks/14_seeing_attention"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _open(page, url: str, base: str) -> tuple[list[str], list[str]]:
    """Load url with every request to another host refused; return (console errors, refused URLs)."""
    errors, refused = [], []

    def only_localhost(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", only_localhost)
    page.goto(url, wait_until="load")
    return errors, refused


@pytest.fixture(scope="module")
def served_book(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("install chromium: apt-get install chromium")
    pytest.importorskip("playwright", reason="pip install playwright (see requirements.txt)")
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    build = subprocess.run([str(jupyter_book), "build", str(ROOT), "--path-output", str(out)],
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    html = out / "_build" / "html"
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", html
    server.shutdown()


def test_the_built_page_carries_the_saved_widget_state_and_the_local_manager(served_book):
    _, html = served_book
    page = (html / f"{CHAPTER}.html").read_text(encoding="utf-8")
    assert 'type="application/vnd.jupyter.widget-state+json"' in page, "no saved widget state: run the chapter with " \
        "`jupyter execute --inplace`, which stores it in the notebook's metadata"
    assert "_static/ipywidgets/embed.js" in page and "cdn.jsdelivr.net" not in page and "require.min.js" not in page


def test_the_explorer_renders_offline_and_its_controls_switch_the_map(served_book):
    from playwright.sync_api import sync_playwright

    base, _ = served_book
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            # The theme logs two errors on every page of a Jupyter Book 1 site (sphinx-thebe's settings
            # script is included twice; an empty stored theme mode): read them off the intro page, which
            # has no widget, so that only errors this chapter adds fail the test.
            intro = browser.new_page()
            every_page, _ = _open(intro, f"{base}/book/intro.html", base)
            intro.wait_for_timeout(500)
            page = browser.new_page()
            errors, refused = _open(page, f"{base}/{CHAPTER}.html", base)
            page.wait_for_selector(".widget-dropdown select", timeout=30_000)
            selects = page.locator(".widget-dropdown select")
            assert selects.count() == 4  # sentence, kind, layer, head
            image = page.locator("img.widget-image:visible")
            image.first.wait_for(timeout=10_000)
            assert image.count() == 1
            first = image.first.get_attribute("src")
            assert image.first.evaluate("img => img.naturalWidth") > 100
            assert page.locator(".widget-html:visible").first.inner_text().strip()  # the sentence and its translation
            selects.nth(3).select_option(index=2)  # head 2: a browser-side link, no kernel
            page.wait_for_function("src => { const i = [...document.querySelectorAll('img.widget-image')]"
                                   ".filter(i => i.offsetParent !== null); return i.length === 1 && i[0].src !== src }",
                                   arg=first, timeout=10_000)
            selects.nth(1).select_option(index=2)  # cross-attention
            selects.nth(0).select_option(index=1)  # the second sentence
            assert page.locator("img.widget-image:visible").count() == 1
        finally:
            browser.close()
    assert not refused, f"the page asked for other hosts (it must work offline): {refused}"
    added = [e for e in errors if e not in every_page]
    assert not added, f"console errors on the chapter's page: {added} (on every page, also without widgets: {every_page})"
