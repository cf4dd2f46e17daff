"""The rendered book, read as a learner reads it: every page opened in headless Chromium, offline.

Builds the book into a temporary folder (the same command as `.ci/run`, warnings as errors), serves it on
localhost, blocks every request that leaves this machine, and checks each page: every formula became
MathJax output, every image loaded, every internal link and anchor resolves, no nbdev `#|` directive is
visible, no console error. Also checks that the book's search answers offline, and saves screenshots of
three pages to `_build/screenshots/`.

Needs Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it) and the `playwright` package
(in requirements.txt); skips with that instruction where either is missing.
"""

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]

SCREENSHOTS = [
    "notebooks/02_attention.html",
    "notebooks/08_transformer.html",
    "notebooks/13_results.html",
]

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
  };
}"""


def pages(book: Path) -> list[str]:
    skip = ("_static", "_sources", "_images", "_panels_static")
    return sorted(
        p.relative_to(book).as_posix()
        for p in book.rglob("*.html")
        if p.parts[len(book.parts)] not in skip
    )


def test_every_page_renders_offline_with_math_images_links_and_no_directives(
    built_book, book_site, open_offline
):
    reports, problems = {}, []
    for rel in pages(built_book):
        page, errors, _ = open_offline(book_site + rel)
        report = page.evaluate(PAGE_REPORT)
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


def test_search_works_offline(book_site, open_offline):
    page, errors, _ = open_offline(book_site + "search.html?q=attention")
    page.wait_for_selector("#search-results li", timeout=20_000)
    found = page.locator("#search-results li").count()
    page.close()
    assert found >= 5, f"search for 'attention' found {found} pages"
    assert not errors, errors


def test_screenshots_of_three_pages(book_site, open_offline):
    folder = ROOT / "_build" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    for rel in SCREENSHOTS:
        page, _, _ = open_offline(book_site + rel)
        path = folder / (Path(rel).stem + ".png")
        page.screenshot(path=str(path), full_page=False)
        page.close()
        assert path.stat().st_size > 10_000, f"{path} looks empty"
