"""The door from the published book to its code: the book is built as the publishing workflow builds it,
with the repository's name in BOOK_REPOSITORY (here a made-up one), and every page built links to that
repository, and each chapter says how to run it. The name is never typed into the book.

A real `jupyter-book build` of the intro and one chapter (about 10 s), with the book's own configuration.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MADE_UP = "example-owner/example-course"
URL = f"https://github.com/{MADE_UP}"
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def test_the_workflow_passes_its_own_repository_to_the_build():
    text = WORKFLOW.read_text(encoding="utf-8")
    assert re.search(r"BOOK_REPOSITORY:\s*\$\{\{\s*github\.repository\s*\}\}", text)


def test_the_configuration_names_no_repository():
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert "repository_url" not in config and "\n  url:" not in config, (
        "the repository comes from BOOK_REPOSITORY, not from _config.yml"
    )


def test_a_book_built_for_a_repository_links_every_page_to_it(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/01_notation\n"
    )
    env = {**os.environ, "BOOK_REPOSITORY": MADE_UP, "BOOK_BRANCH": "trunk"}
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run(
        [
            str(jupyter_book),
            "build",
            str(ROOT),
            "--toc",
            str(toc),
            "--path-output",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    html = tmp_path / "_build" / "html"
    chapter = (html / "notebooks" / "01_notation.html").read_text(encoding="utf-8")
    intro = (html / "book" / "intro.html").read_text(encoding="utf-8")
    for page in (chapter, intro):
        assert f'href="{URL}"' in page, "no repository button"
        assert f'href="{URL}#readme"' in page, "no link to the README's set-up"
    text = re.sub(r"<[^>]+>", "", chapter)
    assert "Run this chapter" in text
    assert "jupyter lab notebooks/01_notation.ipynb" in text
    assert f'href="{URL}/blob/trunk/notebooks/01_notation.ipynb"' in chapter
    assert "executablebooks" not in chapter + intro, (
        "a link to the theme's default repository"
    )


def test_a_book_built_without_a_repository_names_none(monkeypatch):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import repository_door
    finally:
        sys.path.pop(0)
    monkeypatch.delenv("BOOK_REPOSITORY", raising=False)
    assert repository_door.repository() is None
    monkeypatch.setenv("BOOK_REPOSITORY", MADE_UP)
    assert repository_door.repository() == (URL, "main")
    options = repository_door.theme_options({"search_bar_text": "x"}, URL, "main")
    assert options["use_repository_button"] and options["repository_url"] == URL
