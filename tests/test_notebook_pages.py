"""The chapters' pages keep their plumbing out of sight, and a chapter opened on its own says what to run.

tools/notebook_pages.py measures and makes both: no `glue(...)` call in the code a page shows (myst-nb's
glue feeds a number to the prose; `hide-glue` moves the calls into hidden cells with their stored
outputs), and a first code cell that names the packages the chapter imports and, where one is missing,
stops with the command that installs them (`add-setup`). The chapters not converted yet are listed:
each list may only shrink.
"""

import json
from pathlib import Path

import pytest
from helpers import load_tool

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb"))
pages = load_tool("notebook_pages")

# The chapters (by number) that still show glue calls: `python tools/notebook_pages.py hide-glue
# notebooks/NB.ipynb`, then `ruff format` it (its stored outputs move with the calls). A cell tagged
# nbval-ignore-output (a timing, a training run) keeps its glue calls and does not count.
GLUE_SHOWN_YET: set[str] = set()
# The chapters without the set-up cell: `python tools/notebook_pages.py add-setup notebooks/NB.ipynb`.
WITHOUT_SETUP_YET: set[str] = set()


def glue_shown(path: Path) -> int:
    cells = pages.shown_code_cells(pages.read(path))
    return sum(pages.shown_glue_calls(c) for c in cells)


def has_setup(path: Path) -> bool:
    nb = pages.read(path)
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    return first.get("id") == pages.SETUP_ID and pages.source(
        first
    ) == pages.setup_source(nb)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_page_shows_a_glue_call(notebook):
    shown = glue_shown(notebook)
    if notebook.stem[:2] in GLUE_SHOWN_YET:
        assert shown, (
            f"{notebook.name} shows no glue call now: take it out of GLUE_SHOWN_YET"
        )
    else:
        assert not shown, (
            f"{notebook.name} shows {shown} glue calls: "
            f"python tools/notebook_pages.py hide-glue {notebook.relative_to(ROOT)}"
        )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chapter_starts_with_the_cell_that_says_what_to_run(notebook):
    if notebook.stem[:2] in WITHOUT_SETUP_YET:
        assert not has_setup(notebook), (
            f"{notebook.name} has its set-up cell: take it out of WITHOUT_SETUP_YET"
        )
    else:
        assert has_setup(notebook), (
            f"{notebook.name}: its first code cell is not the set-up cell for what it imports: "
            f"python tools/notebook_pages.py add-setup {notebook.relative_to(ROOT)}"
        )


def test_the_set_up_cell_stops_with_the_command_to_run_when_a_package_is_missing():
    # an import in a `try` may be optional (chapter 92's tomli): it is not named
    text = "import torch\nimport no_such_pkg_\ntry:\n    import tomli\nexcept ImportError:\n    pass"
    nb = {"cells": [{"cell_type": "code", "source": [text]}]}
    cell = pages.setup_source(nb)
    assert 'needs = ("no_such_pkg_", "torch")' in cell
    with pytest.raises(ModuleNotFoundError) as caught:
        exec(cell, {})
    message = str(caught.value)
    assert "no_such_pkg_" in message and "torch" not in message.split(":")[0]
    assert "pip install -r requirements.txt" in message and "http" not in message
    exec(pages.setup_source({"cells": []}), {})  # nothing missing: nothing said


def code(text: str, outputs=(), **metadata) -> dict:
    return {
        "cell_type": "code",
        "execution_count": 3,
        "id": "c1",
        "metadata": metadata,
        "outputs": list(outputs),
        "source": text.splitlines(keepends=True),
    }


def glued(name: str) -> dict:
    return {
        "output_type": "display_data",
        "data": {"application/papermill.record/text/plain": "'1'"},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": "x"}},
    }


def test_hide_glue_moves_the_calls_and_their_stored_outputs_and_keeps_the_rest(
    tmp_path,
):
    printed = {"output_type": "stream", "name": "stdout", "text": ["2\n"]}
    cell = code(
        "x = 1\nprint(x + 1)\n# the prose's number\n"
        'glue("a", x, display=False)\n'
        'glue("b", y, display=False)\n'  # y is assigned below: it stays
        'glue("c", x)\n'  # shown: it stays
        "y = 2\n",
        [printed, glued("a"), glued("b"), glued("c")],
        execution={"shell.execute_reply": "T"},
    )
    only_glue = code('glue("d", 4, display=False)\n', [glued("d")])
    timed = code(
        '# Output not compared: a timing\nms = 3\nglue("e", ms, display=False)\n',
        [glued("e")],
        tags=["nbval-ignore-output"],
    )
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell, only_glue, timed], "metadata": {}}))
    moved, left = pages.hide_glue(path)
    cells = json.loads(path.read_text())["cells"]
    assert moved == 2 and len(left) == 2
    assert pages.source(cells[0]) == (
        'x = 1\nprint(x + 1)\nglue("b", y, display=False)\nglue("c", x)\ny = 2'
    )
    assert [
        o.get("metadata", {}).get("scrapbook", {}).get("name")
        for o in cells[0]["outputs"]
    ] == [None, "b", "c"]
    hidden = cells[1]
    assert pages.source(hidden) == '# the prose\'s number\nglue("a", x, display=False)'
    assert hidden["metadata"]["tags"] == ["remove-cell"]
    assert [o["metadata"]["scrapbook"]["name"] for o in hidden["outputs"]] == ["a"]
    assert hidden["execution_count"] == 3
    assert hidden["metadata"]["execution"]["shell.execute_reply"] == "T"
    assert cells[2]["metadata"]["tags"] == ["remove-cell"]  # a cell of glue only
    # a cell whose output nbval ignores keeps its glue calls (no second ignored cell),
    # and they do not count as shown
    assert cells[3] == timed and len(cells) == 4
    assert pages.shown_glue_calls(timed) == 0 and pages.glue_calls(timed) == 1


def test_split_exports_cuts_a_long_export_cell_at_its_functions_and_keeps_the_code(
    tmp_path,
):
    body = "".join(
        f"# helper {n}\n@decorate\ndef f{n}():\n" + "    x = 1\n" * 8 + "\n\n"
        for n in range(3)
    )
    cell = code("#| export\nimport os\n\n\n" + body, tags=["t"])
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}}))
    split, left = pages.split_exports(path, lines=30)  # f0 and f1 fit together
    cells = json.loads(path.read_text())["cells"]
    assert (split, left, len(cells)) == (1, [], 2)
    assert all(pages.source(c).startswith("#| export\n") for c in cells)
    assert pages.source(cells[1]).startswith("#| export\n# helper 2\n@decorate\ndef f2")
    assert cells[1]["metadata"]["tags"] == ["t"]
    lines = [
        line
        for c in cells
        for line in pages.source(c).splitlines()
        if line.strip() and not line.startswith("#|")
    ]
    assert lines == ["import os", *[line for line in body.splitlines() if line.strip()]]


def test_add_setup_puts_the_cell_first_among_the_code_cells_as_a_stored_run(tmp_path):
    title = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# 99 · X"]}
    first = code("import torch\n", execution={"iopub.execute_input": "T0"})
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [title, first], "metadata": {}}))
    assert pages.add_setup(path) and not pages.add_setup(path)  # once
    cells = json.loads(path.read_text())["cells"]
    setup = cells[1]
    assert setup["id"] == pages.SETUP_ID and 'needs = ("torch",)' in pages.source(setup)
    assert setup["metadata"]["tags"] == ["remove-cell"]
    assert setup["execution_count"] == 3  # the next cell's: it counts as run
    assert setup["metadata"]["execution"]["shell.execute_reply"] == "T0"


def test_a_chapter_that_reads_the_courses_files_says_so_when_opened_elsewhere(
    tmp_path, monkeypatch
):
    """The sixteenth trial: chapters 10, 17 and 96, copied out of notebooks/ with the
    package installed, stopped at their first results/ file with a traceback."""
    nb = pages.read(ROOT / "notebooks" / "10_training.ipynb")
    assert pages.course_files(nb) == ["../configs", "results"]
    cell = pages.setup_source(nb)
    monkeypatch.chdir(tmp_path)  # a copy opened on its own
    with pytest.raises(FileNotFoundError) as caught:
        exec(cell, {})
    assert str(caught.value).startswith(
        "this chapter reads ../configs, results of the course's repository: open it "
        "from the notebooks/ folder of a clone"
    )
    monkeypatch.chdir(ROOT / "notebooks")
    exec(cell, {})  # where it belongs: nothing said
