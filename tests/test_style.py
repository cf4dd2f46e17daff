"""The code fits the page: ruff's formatting and checks hold everywhere, and no line of chapter code that the
book shows is wider than its code column, which is ruff's line-length (88): the book sizes its column from that
same number (book/_ext/page_fixes.py), and tests/test_book_browser.py checks that it holds at 1,280 px."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 88  # pyproject.toml's [tool.ruff] line-length
HIDDEN = {
    "remove-cell",
    "remove-input",
    "hide-input",
    "hide-cell",
}  # code a reader does not see unless asked


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_format_finds_nothing_to_change():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, (
        "run `ruff format .` (or pre-commit):\n" + result.stdout + result.stderr
    )


def test_ruff_check_finds_nothing():
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "notebook", sorted(ROOT.glob("notebooks/*.ipynb")), ids=lambda p: p.stem
)
def test_no_visible_chapter_code_line_is_wider_than_the_books_code_column(notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    wide = [
        f"cell {c.get('id')}, line {i}: {len(line)} characters"
        for c in cells
        if c["cell_type"] == "code" and not HIDDEN & set(c["metadata"].get("tags", []))
        for i, line in enumerate("".join(c["source"]).splitlines(), 1)
        if len(line) > WIDTH
    ]
    assert not wide, (
        f"{notebook.name}: code lines over {WIDTH} characters (the book scrolls sideways): {wide}"
    )
