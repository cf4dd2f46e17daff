"""Each chapter runs in about the time its opener says, and none runs long.

The time a chapter takes is read from the notebook itself: nbclient stores, for every code cell it
executes, when the cell started (`execution.iopub.execute_input`) and when it finished
(`execution.shell.execute_reply`); the chapter's time is the sum over its code cells (kernel start-up
not included). The opener (the first cell) states it in its header line,

    · **Time:** 25 min to read, about 15 s to run

as `[about ]N s` or `[about ]N min` (N may carry a ½), before "to run". The rules:

- the stored time and the stated one may not disagree by more than half: stated / 2 <= stored <=
  1.5 x stated, widened by SLACK_S either way, because the few seconds of a short chapter are mostly
  the import of torch in a fresh kernel, which varies with the machine's load;
- a chapter that states no time runs in at most NO_STATEMENT_S (the README's "under a minute ...
  unless it says otherwise");
- no chapter runs longer than LONGEST_S: a longer computation belongs in a tool under `tools/` that
  ships its results as JSON for the chapter to read (as `tools/head_ablation.py` does for chapter 14);
- every code cell carries its times, so a cell cannot leave the sum by having lost them.

Only the notebooks' JSON is read: the test takes well under a second.
"""

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
NO_STATEMENT_S = 60
LONGEST_S = 180
SLACK_S = 2.0
UNITS = {"s": 1, "min": 60}
# "**Time:** 30 min to read, about 2 min to run": the run part, after the reading part.
_TIME_FIELD = re.compile(r"\*\*Time:\*\*(?P<field>[^·\n]*(?:\n[^·\n*]*)?)")
_RUN = re.compile(
    r"(?P<about>about )?(?P<number>\d+(?:\.\d+)?½?|½) ?(?P<unit>s|min) to run\b"
)


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def stored_seconds(notebook: Path) -> tuple[float, list[int]]:
    """The sum of the stored execution times of the code cells, and the cells that have none."""
    total, untimed = 0.0, []
    for index, cell in enumerate(
        json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    ):
        if cell["cell_type"] != "code" or not "".join(cell["source"]).strip():
            continue
        times = cell.get("metadata", {}).get("execution", {})
        start, end = times.get("iopub.execute_input"), times.get("shell.execute_reply")
        if not (start and end):
            untimed.append(index)
            continue
        total += (_instant(end) - _instant(start)).total_seconds()
    return total, untimed


def run_time(opener: str) -> tuple[float | None, str]:
    """The run time an opener's **Time:** field states, in seconds, and the words that state it.

    (None, "") when it states none. Raises ValueError when the field mentions running in another form,
    so that a rephrased statement cannot silently stop being checked.
    """
    field = _TIME_FIELD.search(opener)
    if field is None:
        return None, ""
    text = " ".join(field.group("field").split())
    run = _RUN.search(text)
    if run is None:
        if "run" in text:
            raise ValueError(
                f"the opener's time {text!r} does not say the run time as "
                "'N s to run' or 'about N min to run' (N may end in ½)"
            )
        return None, ""
    number = run.group("number")
    value = (float(number[:-1] or 0) + 0.5) if number.endswith("½") else float(number)
    return value * UNITS[run.group("unit")], run.group(0)


def stated_seconds(notebook: Path) -> tuple[float | None, str]:
    """The run time the notebook's opener (its first cell, markdown) states: see `run_time`."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    opener = (
        "".join(cells[0]["source"])
        if cells and cells[0]["cell_type"] == "markdown"
        else ""
    )
    try:
        return run_time(opener)
    except ValueError as error:
        raise ValueError(f"{notebook.name}: {error}") from None


def _suggestion(seconds: float) -> str:
    if seconds < 90:
        return f"{max(round(seconds), 1)} s to run"
    return f"about {round(seconds / 60)} min to run"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_every_code_cell_has_stored_execution_times(notebook):
    _, untimed = stored_seconds(notebook)
    assert not untimed, (
        f"{notebook.name}: code cells {untimed} have no stored execution times, so the chapter's "
        f"time cannot be checked: run `jupyter execute --inplace notebooks/{notebook.name}`"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_the_chapter_runs_in_about_the_time_its_opener_states(notebook):
    stored, _ = stored_seconds(notebook)
    stated, words = stated_seconds(notebook)
    where = f"{notebook.name}: its cells took {stored:.1f} s when its outputs were last stored"
    assert stored <= LONGEST_S, (
        f"{where}, over the limit of {LONGEST_S} s for any chapter: move the long runs into a tool under tools/ "
        "that writes their results as JSON for the chapter to read (as tools/head_ablation.py does), and keep "
        "one short live run on the page"
    )
    if stated is None:
        assert stored <= NO_STATEMENT_S, (
            f"{where} and its opener states no run time: make it run in at most {NO_STATEMENT_S} s, or state "
            f"the time in the opener's header (**Time:** … to read, {_suggestion(stored)})"
        )
    else:
        low, high = stated / 2 - SLACK_S, 1.5 * stated + SLACK_S
        assert low <= stored <= high, (
            f"{where}, but its opener says '{words}' ({stated:.0f} s): they disagree by more than half "
            f"(allowed {max(low, 0):.1f}–{high:.1f} s). Correct the opener (e.g. '{_suggestion(stored)}') or "
            "re-store the outputs on an idle machine if the times were inflated by load"
        )


def test_the_opener_parser_reads_every_form_used():
    cases = {
        "**Time:** 10 min to read, 2 s to run": 2,
        "**Time:** 30 min to read, 2½ min to run": 150,
        "**Time:** 20 min to read, about 15 s to run.": 15,
        "**Time:** 40 min to read, about 1 min to run": 60,
        "· **Time:** 25 min to\nread, about 15 s to run.\n\nNext paragraph": 15,
        "**Time:** 10 min to read\n\nRuns for a while.": None,
    }
    for text, seconds in cases.items():
        assert run_time(text)[0] == seconds, text
    with pytest.raises(ValueError, match="does not say the run time"):
        run_time("**Time:** 30 min to read, about two minutes to run")
