"""What a reader sees speaks of the course, not of how it is made: no page mentions issues or trackers.

Every page of the book (the notebooks' markdown, code and outputs, the prose pages in book/), the README
and the model cards are read as text; nothing is run.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = re.compile(
    r"\b(issues?|issue tracker|tracker|pull requests?|PRs?|tickets?)\b", re.IGNORECASE
)
PAGES = sorted(
    [
        *ROOT.glob("notebooks/*.ipynb"),
        *ROOT.glob("book/*.md"),
        ROOT / "README.md",
        *ROOT.glob("models/*/README.md"),
    ]
)


def page_text(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    parts = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        parts.append("".join(cell["source"]))
        for out in cell.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def test_the_pages_exist():
    assert len(PAGES) > 25


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_speaks_of_issues_or_trackers(path):
    found = [m.group(0) for m in WORKFLOW.finditer(page_text(path))]
    assert not found, (
        f"{path.name} mentions {found}: the book speaks of the course's targets, not of its making"
    )


def test_the_check_catches_what_it_is_for():
    for sentence in (
        "The issue that opened this chapter",
        "the course's issue tracker quotes 36.5",
        "see the pull request",
    ):
        assert WORKFLOW.search(sentence)


EXERCISE_LABEL = re.compile(r":label: (ex\S*)")


@pytest.mark.parametrize(
    "path",
    sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")),
    ids=lambda p: p.name,
)
def test_exercise_labels_name_their_chapter(path):
    """A chapter's exercises are labelled ex-NN-*, NN its number, so that a label says
    where the exercise is and two chapters cannot collide."""
    labels = EXERCISE_LABEL.findall(page_text(path))
    wrong = [label for label in labels if not label.startswith(f"ex-{path.name[:2]}-")]
    assert not wrong, (
        f"{path.name}: labels {wrong} should start with ex-{path.name[:2]}-"
    )
