"""Sphinx extension: fixes to the pages as the themes render them.

Two fixes so that a first visit to the book logs no console error:

- sphinx-thebe registers its inline configuration script each time the environment is read, and
  Jupyter Book 1 reads it twice, so every page declared `const THEBE_JS_URL` twice ("Identifier has
  already been declared"; one copy has filename None, the other ''). Identical scripts are kept once.
- pydata-sphinx-theme starts a page with `dataset.mode = localStorage.mode || ""`, then rejects the empty
  mode with a console error on a reader's first visit. An empty mode is set to "auto" (the theme's own
  default) before the theme's script reads it.

And the page as a reader sees it:
- every page loads `course.js` (book/assets/): the chapter menu and the contents button open their panels
  on a phone, and a figure opens at full size;
- every chapter's title carries its number, the one in its file name that the prose cites ("chapter 12",
  "appendix 93"): "12 · Evaluation", "Appendix 93: checkpoints and metrics". It is added to the title as the
  page is read, so the page, the sidebar, prev/next, the window's title and search all show it;
- every page states the code column, ruff's line length from pyproject.toml, as the CSS variable
  `--course-code-columns` that course.css sizes the article with: the number is written once, where the
  formatter reads it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from docutils import nodes

EMPTY_MODE_IS_AUTO = 'if (!document.documentElement.dataset.mode) { document.documentElement.dataset.mode = "auto"; }'


def keep_scripts_once(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {})
        key = (
            getattr(script, "filename", script) or "",
            tuple(sorted(attributes.items())),
        )  # None and '' alike
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def code_columns(root: Path) -> int:
    """The line length the chapters are formatted to: pyproject.toml's [tool.ruff] line-length (ruff's
    default, 88, where it is not set)."""
    settings = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return int(settings.get("tool", {}).get("ruff", {}).get("line-length", 88))


def state_code_columns(app, pagename, templatename, context, doctree) -> None:
    columns = code_columns(Path(app.srcdir))
    context["metatags"] = (
        context.get("metatags", "")
        + f"\n<style>:root {{ --course-code-columns: {columns}; }}</style>"
    )


CHAPTER = re.compile(r"notebooks/(\d\d)_")


def number_title(app, doctree) -> None:
    """Put the chapter's number (from its file name) in front of its title; appendices are 91-97."""
    found = CHAPTER.match(app.env.docname)
    title = next(iter(doctree.findall(nodes.title)), None)
    if not found or title is None:
        return
    number, text = found.group(1), title.astext()
    if text.startswith("Appendix: "):
        title.replace(
            title[0], nodes.Text(title[0].astext().replace("Appendix: ", "", 1))
        )
        title.insert(0, nodes.Text(f"Appendix {number}: "))
    else:
        title.insert(0, nodes.Text(f"{number} · "))


def setup(app):
    app.connect(
        "doctree-read", number_title, priority=400
    )  # before Sphinx records the titles
    app.add_js_file(None, body=EMPTY_MODE_IS_AUTO, priority=1)
    app.add_js_file("course.js")
    app.connect("html-page-context", state_code_columns)
    app.connect("html-page-context", keep_scripts_once)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
