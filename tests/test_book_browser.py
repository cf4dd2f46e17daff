"""The rendered book, read as a learner reads it: every page opened in headless Chromium, offline.

Builds the book into a temporary folder (the same command as `.ci/run`, warnings as errors), serves it on
localhost, blocks every request that leaves this machine, and checks each page: every formula became
MathJax output, every image loaded, every internal link and anchor resolves, no nbdev `#|` directive is
visible, no console error. Also checks that the book's search answers offline.

And what a reader sees, on every page, on a laptop (1280x800) and on a phone (390x844, touch): the code
column holds the chapters' line length (pyproject.toml's ruff line-length, which the pages' CSS reads
too), so at 1280 px no code line whose length is within it wraps and no code or output box scrolls
sideways; on a phone at most 2 % of code lines scroll; the page is never wider than the phone; a display
equation that scrolls shows that it does; every figure opens at full size, and at 1280 px its smallest
text is at least 8 px (its size in points and the dpi, recorded in the PNG by notebooks/course_figures.py,
scaled by the width the page shows it at; in an SVG diagram, inline or an <img>, the font size of its
smallest text times the scale the page draws it at). The chapter menu and the
contents button open their panels on the phone, and printing a chapter keeps every line on the page.
With `TRANSFORMER_SCREENSHOTS=1`, screenshots of every page at both widths go to `_build/screenshots/`,
with a printed chapter.

Needs Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it) and the `playwright` package
(in requirements.txt); skips with that instruction where either is missing.
"""

import importlib.util
import os
import re
import time
import tomllib
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from helpers import open_page

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "_build" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PRINTED = "notebooks/13_results.html"  # the chapter with the most long outputs


def code_columns() -> int:
    """The chapters' line length: ruff's line-length in pyproject.toml (88, ruff's default, if unset)."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return int(settings.get("tool", {}).get("ruff", {}).get("line-length", 88))


# A formula left as TeX: a backslash command outside code, or $$ display delimiters.
RAW_TEX = re.compile(
    r"\\(frac|sqrt|mathrm|mathbf|mathcal|text|sum|cdot|times|begin|left|right)\b|\$\$"
)

PAGE_REPORT = """() => {
  const outside = el => !el.closest('pre, code, mjx-container, script, style, .highlight');
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) { if (outside(walker.currentNode.parentElement)) texts.push(walker.currentNode.textContent); }
  return {
    text: texts.join(' '),
    visible: document.body.innerText,
    math: document.querySelectorAll('.math').length,
    unrendered: [...document.querySelectorAll('.math')].filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    brokenImages: [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    title: (document.querySelector('article h1') || {textContent: ''}).textContent.replace(/#$/, '').trim(),
    navigation: [...document.querySelectorAll('.bd-sidebar-primary a.reference, a.left-prev, a.right-next')]
      .map(a => [a.getAttribute('href'), a.textContent.replace(/\\s+/g, ' ').trim()]),
  };
}"""


# What a reader sees of the page's width. For every visible `pre` (a folded cell has no box): its lines
# (measured in the box's own font), those wider than the room of the box's first line (`wider`: they
# wrap, or they scroll), those in a box that scrolls sideways (`scroll`), the characters of each wider line,
# and whether a line of `columns` characters fits the box. Code is a `pre` outside an output.
READER_VIEW = """(columns) => {
  const visible = el => el.checkVisibility();  // not in a folded cell (a closed <details>)
  const canvas = document.createElement('canvas').getContext('2d');
  const measure = pre => {
    const style = getComputedStyle(pre);
    canvas.font = style.font;
    const room = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
      - Math.min(0, parseFloat(style.textIndent) || 0);
    const scrolls = pre.scrollWidth > pre.clientWidth + 1;
    const lines = pre.textContent.replace(/\\n$/, '').split('\\n').map(l => l.replace(/\\t/g, '        '));
    const wider = lines.filter(l => canvas.measureText(l).width > room + 0.5);
    return {lines: lines.length, wider: wider.map(l => l.length), scroll: scrolls ? wider.length : 0,
            columnFits: canvas.measureText('0'.repeat(columns)).width <= room + 0.5};
  };
  const pres = [...document.querySelectorAll('article pre')].filter(visible);
  const output = pre => Boolean(pre.closest('.cell_output, .output'));
  const sum = list => list.map(measure).reduce((a, m) => ({
    lines: a.lines + m.lines, wider: a.wider.concat(m.wider), scroll: a.scroll + m.scroll,
    boxes: a.boxes + 1, columnFits: a.columnFits + (m.columnFits ? 1 : 0)}),
    {lines: 0, wider: [], scroll: 0, boxes: 0, columnFits: 0});
  const equations = [...document.querySelectorAll('mjx-container[display="true"]')].filter(visible);
  const cut = equations.filter(m => m.scrollWidth > m.clientWidth + 1);
  const images = [...document.querySelectorAll('.cell_output img, figure img')]
    .filter(i => visible(i) && !i.closest('.jupyter-widgets'));
  return {
    pageWidth: document.documentElement.scrollWidth,
    columns: getComputedStyle(document.documentElement).getPropertyValue('--course-code-columns').trim(),
    code: sum(pres.filter(p => !output(p))),
    output: sum(pres.filter(output)),
    equations: equations.length,
    equationsCut: cut.length,
    equationsCutWithoutCue: cut.filter(m => !getComputedStyle(m).backgroundImage.includes('gradient')).length,
    images: images.length,
    imagesWithoutFullSize: images.filter(i => !i.closest('a[href]')).length,
    figures: images.filter(i => i.currentSrc.startsWith(location.origin)).map(i => ({
      path: new URL(i.currentSrc).pathname, natural: i.naturalWidth, shown: i.getBoundingClientRect().width})),
  };
}"""


# The smallest text of each SVG a page shows (its diagrams), in CSS pixels as drawn -> [{path, natural,
# shown, px, text}]. Milliseconds a page: an <img>'s SVG is fetched from the local server once.
SVG_TEXT = """async () => {
  // The smallest text of each SVG a page shows, in CSS px as drawn: a text's font size times the scale
  // from its own units to the screen (viewBox to shown width, transforms). An SVG shown by an <img> is
  // fetched and laid out, out of sight, at the size the <img> shows it.
  const smallest = svg => {
    let px = null, text = '';
    for (const t of svg.querySelectorAll('text, tspan')) {
      const m = t.getScreenCTM();
      if (!m || !t.textContent.trim()) continue;
      const size = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
      if (px === null || size < px) { px = size; text = t.textContent.trim().slice(0, 40); }
    }
    return {px, text};
  };
  const rows = [];
  for (const svg of document.querySelectorAll('article svg')) {
    if (!svg.checkVisibility() || !svg.querySelector('text')) continue;  // not an icon
    const box = svg.getBoundingClientRect();
    rows.push({path: 'inline', natural: svg.viewBox.baseVal ? svg.viewBox.baseVal.width : 0,
               shown: box.width, ...smallest(svg)});
  }
  for (const img of document.querySelectorAll('article img')) {
    if (!img.checkVisibility() || !new URL(img.currentSrc).pathname.endsWith('.svg')) continue;
    const source = await (await fetch(img.currentSrc)).text();
    const svg = document.importNode(
      new DOMParser().parseFromString(source, 'image/svg+xml').documentElement, true);
    const box = img.getBoundingClientRect();
    svg.setAttribute('width', box.width);
    svg.setAttribute('height', box.height);
    const holder = document.createElement('div');
    holder.style.cssText = 'position: absolute; left: -20000px; top: 0';
    holder.append(svg);
    document.body.append(holder);
    rows.push({path: new URL(img.currentSrc).pathname, natural: img.naturalWidth, shown: box.width,
               ...smallest(svg)});
    holder.remove();
  }
  return rows;
}"""


@pytest.fixture(scope="module")
def laptop(chromium):
    context = chromium.new_context(viewport=LAPTOP)
    yield context
    context.close()


@pytest.fixture(scope="module")
def phone(chromium):
    context = chromium.new_context(
        viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2
    )
    yield context
    context.close()


def screenshot(page, rel: str, width: int) -> None:
    """With TRANSFORMER_SCREENSHOTS=1, what the page looks like, kept for a person to see (about
    0.1-0.2 s a page, so not in every run)."""
    if not os.environ.get("TRANSFORMER_SCREENSHOTS"):
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{Path(rel).stem}-{width}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 5_000, f"{path} looks empty"


CHAPTER_FILE = re.compile(r"(?:^|/)(\d\d)_[^/]*\.html")


def numbered(number: str, text: str) -> bool:
    """A chapter's title as the book shows it: '12 · Evaluation', 'Appendix 93: checkpoints and metrics'."""
    return text.startswith(f"{number} · ") or text.startswith(f"Appendix {number}: ")


def chapter_numbers(rel: str, report: dict) -> list[str]:
    """The chapter's number (its file's, which the prose cites) in its title, and in every sidebar and
    prev/next link to a chapter."""
    problems = []
    if (own := CHAPTER_FILE.search(rel)) and not numbered(
        own.group(1), report["title"]
    ):
        problems.append(
            f"{rel}: title {report['title']!r} without its number {own.group(1)}"
        )
    for href, text in report["navigation"]:
        if (target := CHAPTER_FILE.search(href or "")) and not numbered(
            target.group(1), text.removeprefix("previous ").removeprefix("next ")
        ):
            problems.append(
                f"{rel}: a link to {href} reads {text!r}, without its number"
            )
    return problems


def pages(book: Path) -> list[str]:
    skip = ("_static", "_sources", "_images", "_panels_static")
    return sorted(
        p.relative_to(book).as_posix()
        for p in book.rglob("*.html")
        if p.parts[len(book.parts)] not in skip
    )


def figure_records():
    """notebooks/course_figures.py, where the PNG's record of its smallest text is named."""
    spec = importlib.util.spec_from_file_location(
        "course_figures", ROOT / "notebooks" / "course_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMALLEST_PX = 8  # the smallest text of a figure, as shown at 1280 px
# The chapters (by number) whose stored figures were drawn before notebooks/matplotlibrc (each draws at 72-80 dpi and
# records nothing, or sets a font too small for its shown size; see the failures this test prints):
# this list may only shrink. A chapter leaves it once it is re-executed with its explicit dpi removed
# and every figure's smallest text at 8 px or more.
FIGURES_NOT_YET: set[str] = set()


def figure_text(built_book: Path, views: dict) -> list[tuple[str, float | None, str]]:
    """Each figure's smallest text in CSS pixels as the page shows it: its size in points (recorded in
    the PNG by notebooks/course_figures.py) x dpi / 72 x shown width / pixel width; for an SVG, its
    smallest font size as drawn (SVG_TEXT). -> one row per figure: (page, pixels or None where a PNG
    records nothing, a description)."""
    from PIL import Image

    record = figure_records()
    rows = []
    for rel, view in views.items():
        pngs = [f for f in view["figures"] if f["path"].endswith(".png")]  # not SVGs
        for n, figure in enumerate(pngs, 1):
            with Image.open(built_book / unquote(figure["path"]).lstrip("/")) as png:
                text = png.text
            scale = figure["shown"] / figure["natural"]
            if record.SMALLEST not in text:
                rows.append(
                    (
                        rel,
                        None,
                        f"figure {n}: not measured (drawn without "
                        f"notebooks/matplotlibrc; shown at {scale:.2f} of its pixels)",
                    )
                )
                continue
            points, dpi = float(text[record.SMALLEST]), float(text[record.DPI])
            px = points * dpi / 72 * scale
            rows.append(
                (
                    rel,
                    px,
                    f"figure {n}: {px:.1f} px ({text[record.SMALLEST_TEXT]!r}: "
                    f"{points:g} pt at {dpi:g} dpi, shown at {scale:.2f} of its pixels)",
                )
            )
        for svg in view.get("svgs", []):
            if svg["px"] is None:  # no text in it
                continue
            where = "inline" if svg["path"] == "inline" else Path(svg["path"]).name
            rows.append(
                (
                    rel,
                    svg["px"],
                    f"SVG {where}: {svg['px']:.1f} px ({svg['text']!r}, shown "
                    f"{svg['shown']:.0f} px wide of its {svg['natural']:.0f})",
                )
            )
    return rows


def test_every_page_renders_offline_with_math_images_links_and_no_directives(
    built_book, book_site, laptop
):
    reports, problems, views = {}, [], {}
    for rel in pages(built_book):
        page, errors, _ = open_page(laptop, book_site + rel, idle=False)
        report = page.evaluate(PAGE_REPORT)
        views[rel] = page.evaluate(READER_VIEW, code_columns())
        views[rel]["svgs"] = page.evaluate(SVG_TEXT)
        screenshot(page, rel, LAPTOP["width"])
        page.close()
        reports[rel] = report
        if errors:
            problems.append(f"{rel}: console errors {errors[:3]}")
        if report["unrendered"]:
            problems.append(
                f"{rel}: {len(report['unrendered'])} formulas not rendered by MathJax, e.g. {report['unrendered'][0]!r}"
            )
        if RAW_TEX.search(report["text"]):
            problems.append(
                f"{rel}: raw TeX in the text: {RAW_TEX.search(report['text']).group(0)!r}"
            )
        if report["brokenImages"]:
            problems.append(
                f"{rel}: images that did not load: {report['brokenImages'][:3]}"
            )
        if "#|" in report["visible"]:
            problems.append(f"{rel}: an nbdev directive (#|) is visible")
        problems += chapter_numbers(rel, report)
    assert len(reports) >= 15, f"only {len(reports)} pages built: {sorted(reports)}"
    assert sum(r["math"] for r in reports.values()) > 50, (
        "the book should show many formulas"
    )

    ids = {rel: set(r["ids"]) for rel, r in reports.items()}
    for rel, report in reports.items():
        for href in report["links"]:
            url = urlsplit(href)
            if url.hostname != "127.0.0.1":
                continue
            target = unquote(url.path).lstrip("/") or "index.html"
            if target.endswith("/"):
                target += "index.html"
            if not (built_book / target).is_file():
                problems.append(f"{rel}: link to a missing page {target}")
            elif (
                url.fragment
                and target in ids
                and unquote(url.fragment) not in ids[target]
            ):
                problems.append(
                    f"{rel}: link to a missing anchor {target}#{url.fragment}"
                )
    assert not problems, "\n".join(problems)
    check_laptop_column(views)
    check_figure_text(built_book, views)


def check_figure_text(built_book: Path, views: dict) -> None:
    """At 1280x800 the smallest text of every figure is at least SMALLEST_PX, but in the chapters of
    FIGURES_NOT_YET (which may only shrink); every figure is printed with its measure."""
    rows = figure_text(built_book, views)
    failing = {rel for rel, px, _ in rows if px is None or px < SMALLEST_PX}
    print(
        f"\nthe smallest text of each figure at {LAPTOP['width']} px "
        f"({len(failing)} pages under {SMALLEST_PX} px or not measured):",
        *(
            f"{'  ' if px is not None and px >= SMALLEST_PX else '! '}{rel}, {what}"
            for rel, px, what in rows
        ),
        sep="\n  ",
    )
    chapter = lambda rel: Path(rel).stem[:2]
    passing = sorted(
        {chapter(rel) for rel, _, _ in rows if rel not in failing} & FIGURES_NOT_YET
    )
    assert not passing, (
        f"every figure of chapters {passing} is legible now: take them out of FIGURES_NOT_YET"
    )
    due = [
        f"{rel}, {what}"
        for rel, px, what in rows
        if rel in failing
        and (px is None or px < SMALLEST_PX)
        and chapter(rel) not in FIGURES_NOT_YET
    ]
    assert not due, "\n".join(due)


def totals(views: dict) -> dict:
    code_lines = sum(v["code"]["lines"] for v in views.values())
    return {
        "code lines": code_lines,
        "code lines wider than their box": sum(
            len(v["code"]["wider"]) for v in views.values()
        ),
        "code lines scrolling": sum(v["code"]["scroll"] for v in views.values()),
        "output lines": sum(v["output"]["lines"] for v in views.values()),
        "output lines wrapped": sum(len(v["output"]["wider"]) for v in views.values()),
        "output lines cut": sum(v["output"]["scroll"] for v in views.values()),
        "display equations scrolling": sum(v["equationsCut"] for v in views.values()),
        "pages wider than the window": sum(
            v["pageWidth"] > v["width"] for v in views.values()
        ),
    }


def check_laptop_column(views: dict) -> None:
    """At 1280x800: every code box holds the chapters' line length, so no code line within it wraps; no code
    or output box scrolls sideways; the page is as wide as the window; every figure opens at full size."""
    columns = code_columns()
    problems = []
    for rel, view in views.items():
        view["width"] = LAPTOP["width"]
        code, output = view["code"], view["output"]
        if view["columns"] and int(view["columns"]) != columns:
            problems.append(
                f"{rel}: the page's CSS states {view['columns']} columns, ruff {columns}"
            )
        if code["columnFits"] < code["boxes"]:
            problems.append(
                f"{rel}: {code['boxes'] - code['columnFits']} code boxes narrower than {columns} columns"
            )
        if short := [n for n in code["wider"] if n <= columns]:
            problems.append(
                f"{rel}: {len(short)} code lines of <= {columns} characters wrap"
            )
        if code["scroll"] or output["scroll"]:
            problems.append(
                f"{rel}: {code['scroll']} code and {output['scroll']} output lines scroll sideways"
            )
        if view["pageWidth"] > LAPTOP["width"]:
            problems.append(f"{rel}: {view['pageWidth']} px wide")
        if view["imagesWithoutFullSize"]:
            problems.append(
                f"{rel}: {view['imagesWithoutFullSize']} figures do not open at full size"
            )
    print(f"\nat {LAPTOP['width']} px:", totals(views))
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(
    os.environ.get("TRANSFORMER_PHONE") != "1",
    reason="opt-in, about a minute: TRANSFORMER_PHONE=1 pytest tests/test_book_browser.py "
    "-k fits_a_phone (.ci/run runs it)",
)
def test_every_page_fits_a_phone(built_book, book_site, phone):
    """At 390x844 (touch): no page wider than the window, at most 2 % of code lines scroll sideways and no
    output line is cut (long lines wrap, with a hanging indent), every display equation that scrolls shows
    that it does.

    A second walk of every page (about a minute of one core): the README's `pytest`, which must finish in
    ten minutes on two cores, leaves it out, and `.ci/run` runs it on every submission with
    TRANSFORMER_PHONE=1. The phone's menus (below) stay in every run."""
    start, views, problems = time.monotonic(), {}, []
    for rel in pages(built_book):
        page, errors, refused = open_page(phone, book_site + rel, idle=False)
        view = views[rel] = page.evaluate(READER_VIEW, code_columns())
        view["svgs"] = page.evaluate(SVG_TEXT)
        view["width"] = PHONE["width"]
        screenshot(page, rel, PHONE["width"])
        page.close()
        if view["pageWidth"] > PHONE["width"]:
            problems.append(
                f"{rel}: the page is {view['pageWidth']} px wide: it pans sideways"
            )
        if view["output"]["scroll"]:
            problems.append(f"{rel}: {view['output']['scroll']} output lines cut")
        if view["equationsCutWithoutCue"]:
            problems.append(
                f"{rel}: {view['equationsCutWithoutCue']} equations cut with no cue"
            )
        if errors or refused:
            problems.append(
                f"{rel}: console errors {errors[:3]}, requests out {refused[:3]}"
            )
    total = totals(views)
    print(f"\nat {PHONE['width']} px ({time.monotonic() - start:.0f} s):", total)
    measured = sorted(
        (px, rel, what) for rel, px, what in figure_text(built_book, views) if px
    )  # the phone's figures are reported, not held to SMALLEST_PX (the issue asks it of 1280 px)
    small = [f"{rel}, {what}" for px, rel, what in measured if px < SMALLEST_PX]
    print(
        f"figures measured at {PHONE['width']} px: {len(measured)}, under {SMALLEST_PX} px:"
        f" {len(small)}",
        *small,
        sep="\n  ",
    )
    assert total["code lines scrolling"] <= 0.02 * total["code lines"], total
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "kind, dialog",
    [
        ("primary", "#pst-primary-sidebar-modal"),
        ("secondary", "#pst-secondary-sidebar-modal"),
    ],
)
def test_the_menu_and_the_contents_open_on_a_phone(book_site, phone, kind, dialog):
    """A tap on the chapter menu (the primary toggle) or the contents button (the secondary one) opens its
    panel, with the chapters' or the page's links in it."""
    page, errors, _ = open_page(phone, book_site + "notebooks/06_encoder.html")
    button = page.locator(f".{kind}-toggle:visible")
    assert button.count() == 1, f"{button.count()} visible .{kind}-toggle buttons"
    assert not page.locator(f"{dialog}[open]").count()
    button.tap()
    page.wait_for_selector(f"{dialog}[open]", state="visible", timeout=5_000)
    links = page.locator(f"{dialog} a:visible").count()
    if kind == "primary":
        screenshot(page, "menu-open", PHONE["width"])
    page.close()
    assert links >= 5, f"the {kind} panel opened with {links} links"
    assert not errors, errors


def test_printing_a_chapter_keeps_every_line_on_the_page(book_site, laptop):
    """Chromium's print of a chapter: every code and output line inside an A4 page (print media, at the
    width page.pdf lays an A4 page out with 1 cm margins)."""
    page, _, _ = open_page(laptop, book_site + PRINTED)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    pdf = SCREENSHOTS / (Path(PRINTED).stem + ".pdf")
    page.pdf(
        path=str(pdf),
        format="A4",
        margin={k: "1cm" for k in ("top", "bottom", "left", "right")},
    )
    assert pdf.stat().st_size > 50_000
    page.emulate_media(media="print")
    page.set_viewport_size(
        {"width": 718, "height": 1047}
    )  # A4 less 2 cm, in CSS pixels
    clipped = page.evaluate("""() => [...document.querySelectorAll('article pre')]
        .filter(p => p.getClientRects().length)
        .filter(p => p.scrollWidth > p.clientWidth + 1 || p.getBoundingClientRect().right > window.innerWidth)
        .map(p => p.textContent.slice(0, 60))""")
    boxes = page.locator("article pre").count()
    page.close()
    assert boxes > 50
    assert not clipped, (
        f"{len(clipped)} of {boxes} printed boxes lose their right edge, e.g. {clipped[0]!r}"
    )


def test_search_works_offline(book_site, open_offline):
    page, errors, _ = open_offline(book_site + "search.html?q=attention")
    page.wait_for_selector("#search-results li", timeout=20_000)
    found = page.locator("#search-results li").count()
    page.close()
    assert found >= 5, f"search for 'attention' found {found} pages"
    assert not errors, errors


def test_a_page_loads_no_icon_script_and_its_icons_still_show(
    built_book, book_site, chromium
):
    """pydata-sphinx-theme loads fontawesome.js (1.49 MB) on every page to turn its few `<i class="fa-…">`
    icons into SVG; its stylesheet already draws them from the Font Awesome web fonts.
    book/_templates/static/webpack-macros.html drops the script. Prints a first visit's bytes per page."""
    context = chromium.new_context(
        viewport=LAPTOP
    )  # its own cache: a reader's first visit
    try:
        sizes: dict[str, int] = {}
        context.on(
            "requestfinished",
            lambda r: sizes.__setitem__(
                r.url.split("?")[0], r.sizes()["responseBodySize"]
            ),
        )
        page, errors, _ = open_page(context, book_site + "book/intro.html")
        icons = page.evaluate(
            """() => [...document.querySelectorAll('i[class*="fa-"]')].filter(i => i.offsetParent !== null)
                 .map(i => [i.className, getComputedStyle(i, '::before').content, i.getBoundingClientRect().width])"""
        )
        page.wait_for_function("document.fonts.status === 'loaded'")
        fonts = page.evaluate(
            "[...document.fonts].filter(f => f.family.includes('Font Awesome') && f.status === 'loaded').map(f => f.family)"
        )
    finally:
        context.close()
    heavy = sorted(((n, u.rsplit("/", 1)[1]) for u, n in sizes.items()), reverse=True)[
        :4
    ]
    print(
        f"\nbook/intro.html, first visit: {sum(sizes.values()) / 1e6:.2f} MB in {len(sizes)} files; "
        "largest: " + ", ".join(f"{name} {n / 1e6:.2f} MB" for n, name in heavy)
    )
    assert not [u for u in sizes if u.endswith("fontawesome.js")], (
        "the page loaded fontawesome.js"
    )
    assert icons, "no icon shown in the page's header"
    blank = [
        c
        for c, content, width in icons
        if content in ("none", "normal", '""') or width < 4
    ]
    assert not blank, f"icons drawn as nothing: {blank}"
    assert fonts, "no Font Awesome web font was loaded to draw the icons"
    assert not errors, errors
