"""The intro's map of the course agrees with the chapters: every chapter of the table of contents is in it
once, in order, under its number and its title, with the reading time its own opener states; each part's
time and the total are the sums. Nothing is run: the intro and the notebooks are read as text.
"""

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
INTRO = ROOT / "book" / "intro.md"
ROW = re.compile(
    r"^\| (\d\d) \| \[([^\]]+)\]\(\.\./(notebooks/[^)]+\.ipynb)\) \| [^|]+ \| (\d+) min \|$"
)
PART = re.compile(
    r"^\| \*\*Part [IVX]+\*\* \| \*\*[^|]+\*\* \| \| \*\*(\d+) min\*\* \|$"
)
TOTAL = re.compile(
    r"^\| \| \*\*All of it\*\* \| \| \*\*(\d+) min, about (\d+) hours\*\* \|$"
)
OPENER_TIME = re.compile(r"\*\*Time:\*\*\s*(\d+)\s*min")


def toc_chapters() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [
        chapter["file"] + ".ipynb"
        for part in toc["parts"]
        for chapter in part["chapters"]
        if chapter["file"].startswith("notebooks/")
    ]


def opener(path: Path) -> tuple[str, int]:
    """A chapter's title and the minutes to read that its opening cell states."""
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    title = re.search(r"^# (.+)$", first, re.M).group(1)
    return title, int(OPENER_TIME.search(first).group(1))


def read_map() -> tuple[list[tuple], list[tuple[int, list[int]]], tuple[int, int]]:
    rows, parts, total = [], [], None
    for line in INTRO.read_text(encoding="utf-8").splitlines():
        if m := PART.match(line):
            parts.append((int(m.group(1)), []))
        elif m := ROW.match(line):
            number, title, path, minutes = m.groups()
            rows.append((number, title, path, int(minutes)))
            parts[-1][1].append(int(minutes))
        elif m := TOTAL.match(line):
            total = (int(m.group(1)), int(m.group(2)))
    return rows, parts, total


def test_the_map_lists_every_chapter_in_order_with_its_number_and_title():
    rows, _, _ = read_map()
    assert [path for _, _, path, _ in rows] == toc_chapters()
    for number, title, path, _ in rows:
        assert Path(path).name.startswith(number), f"{path} listed as {number}"
        own = opener(ROOT / path)[0].removeprefix("Appendix: ")
        assert own.lower().startswith(title.lower()), (
            f"{path}: '{title}' but the chapter is '{own}'"
        )


def test_the_maps_times_are_the_chapters_own_and_add_up():
    rows, parts, total = read_map()
    wrong = [
        (path, minutes, opener(ROOT / path)[1])
        for _, _, path, minutes in rows
        if minutes != opener(ROOT / path)[1]
    ]
    assert not wrong, f"(chapter, map, opener): {wrong}"
    assert len(parts) == 4
    for stated, minutes in parts:
        assert stated == sum(minutes), (
            f"a part states {stated} min, its chapters add to {sum(minutes)}"
        )
    assert total is not None, "the map's total row is missing"
    assert total[0] == sum(m for _, _, _, m in rows)
    assert total[1] == round(total[0] / 60)
