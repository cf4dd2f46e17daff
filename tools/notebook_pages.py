"""The chapters' pages as a reader meets them: how much code they show, and two mechanical changes.

    python tools/notebook_pages.py measure [NB ...] [--lines 40]   # the numbers, per notebook and in all
    python tools/notebook_pages.py hide-glue NB [NB ...]           # glue(...) calls into hidden cells
    python tools/notebook_pages.py add-setup NB [NB ...]           # the reader's set-up cell, first
    python tools/notebook_pages.py split-exports NB [...] [--lines 40]  # long `#| export` cells, per function

`measure` counts, over the code cells a page shows with their source open (not tagged remove-cell,
remove-input, hide-input or hide-cell, and not inside a folded solution), the cells longer than
`--lines` source lines (nbdev's `#|` lines do not count: the book replaces them by a label), the longest
one, and the `glue(...)` calls they show (myst-nb's glue feeds a number to the prose: plumbing, not
teaching). A glue call in a cell tagged nbval-ignore-output (a timing, a training run: its values
differ per run) is not counted as shown: it stays in its cell, since a value glued elsewhere would need
a second cell excluded from the tests, and the course allows few. It also says whether the notebook
starts with the set-up cell.

`hide-glue` moves every top-level `glue(..., display=False)` statement of a shown code cell into a new
code cell right after it, tagged remove-cell, together with the outputs those calls stored (glue's
display data), so the page and the stored outputs are what they were: nothing is run. A call is moved
only when no later statement of its cell assigns a name the call reads (so it computes the same value
after the cell as inside it); a cell made only of such calls is tagged remove-cell instead. Calls it
cannot move (inside a loop or a function, shown with display=True, or read back by later code) are
listed, to be moved by hand. A cell tagged nbval-ignore-output keeps its glue calls (see `measure`):
the tool never tags a cell nbval-ignore-output.

`add-setup` inserts `SETUP`, naming the packages the notebook imports, as its first code cell (id `course-setup`, tagged remove-cell: the
published page says how to run the chapter above its title, book/_ext/repository_door.py). A chapter
opened on its own, downloaded or in a hosted notebook, stops there with one line that says what to run.

`split-exports` cuts a shown `#| export` cell longer than `--lines` before each top-level function or
class (with its decorators and the comments right above it), then joins neighbouring pieces again while
they fit in `--lines`: the same code, in the same order, exported to the same module, in cells a reader
can hold. A cell with stored outputs, or of one function, is left as it is (listed).

Notebooks are rewritten as the project keeps them (json, indent 1, UTF-8, a final newline); run `ruff
format` on them afterwards.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import uuid
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool
from transformer.files import atomic_write_bytes

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
SETUP_ID = "course-setup"
SETUP = """\
# What this chapter imports. It runs in a copy of the course's repository after the README's
# set-up; opened on its own (downloaded, or in a hosted notebook) it stops here, saying so.
import importlib.util

needs = {needs}
if missing := [name for name in needs if importlib.util.find_spec(name) is None]:
    raise ModuleNotFoundError(
        f"this chapter needs {{', '.join(missing)}}: clone the course's repository "
        "(linked from every page of the book) and run `pip install -r requirements.txt` "
        "in its folder (it installs them all), then open the chapter from notebooks/"
    )"""
# what a chapter that reads the course's files beside it adds (results/, ../configs/):
# with the packages installed (pip install of the repository), a copy opened elsewhere
# stopped at its first such file with a FileNotFoundError
FILES = """
if missing := [path for path in {files} if not os.path.exists(path)]:
    raise FileNotFoundError(
        f"this chapter reads {{', '.join(missing)}} of the course's repository: open "
        "it from the notebooks/ folder of a clone (linked from every page of the book)"
    )"""


def imported(nb: dict) -> list[str]:
    """The packages outside Python's standard library that the notebook's cells import at their top
    level (not an import inside a function, a `try` or an `if`: those may be optional)."""
    names = set()
    for cell in nb["cells"]:
        tree = parse(source(cell)) if cell["cell_type"] == "code" else None
        for node in tree.body if tree else ():
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return sorted(names - set(sys.stdlib_module_names) - {"__future__"})


def course_files(nb: dict) -> list[str]:
    """The course's folders that the notebook's code names by a relative path (a string
    that starts with results/ or ../configs/, say): results, ../configs, ..."""
    found = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or cell.get("id") == SETUP_ID:
            continue
        tree = parse(source(cell))
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if m := re.match(r"(results|\.\./[a-z]+)(/|$)", node.value):
                    found.add(m.group(1))
    return sorted(found)


def _as_tuple(names: list[str], head: str) -> str:
    """names as a tuple, one line or one a line as ruff format writes it after head."""
    quoted = [f'"{name}"' for name in names]
    one = f"({', '.join(quoted)}{',' if len(quoted) == 1 else ''})"
    if len(head + one) > 88:
        return "(\n" + "".join(f"    {name},\n" for name in quoted) + ")"
    return one


def setup_source(nb: dict) -> str:
    """The set-up cell that fits this notebook."""
    text = SETUP.format(needs=_as_tuple(imported(nb), "needs = "))
    files = course_files(nb)
    if files:
        text = text.replace(
            "import importlib.util\n", "import importlib.util\nimport os\n"
        )
        text += FILES.format(files=_as_tuple(files, "if missing := [path for path in "))
    return text


SOLUTION = re.compile(r"```\{solution-(start|end)\}")
MAGIC = re.compile(r"^\s*[%!]")


class NotANotebook(ValueError):
    """A path that names no Jupyter notebook this tool can read: said in one line."""


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_cell(cell) -> bool:
    """The shape of a cell this tool reads: what a notebook on disk has."""
    if not isinstance(cell, dict) or not isinstance(cell.get("metadata"), dict):
        return False
    outputs = cell.get("outputs", [])
    return (
        cell.get("cell_type") in ("code", "markdown", "raw")
        and (isinstance(cell.get("source"), str) or _strings(cell.get("source")))
        and _strings(cell["metadata"].get("tags", []))
        and isinstance(outputs, list)
        and all(
            isinstance(o, dict) and isinstance(o.get("metadata", {}), dict)
            for o in outputs
        )
    )


def read(path: Path) -> dict:
    """The notebook at `path` as a dict, or NotANotebook saying why it is none."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 JSON"
        raise NotANotebook(f"{path}: {why}: give a Jupyter notebook (.ipynb)") from None
    if not (
        isinstance(nb, dict)
        and isinstance(nb.get("cells"), list)
        and all(_is_cell(c) for c in nb["cells"])
    ):
        raise NotANotebook(
            f"{path}: JSON, but not a Jupyter notebook (a list of cells, each with a "
            "cell_type, metadata and source): give a .ipynb file"
        )
    return nb


def write(path: Path, nb: dict) -> None:
    """The notebook written whole or not at all (a temporary file, then renamed)."""
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def shown_code_cells(nb: dict) -> list[dict]:
    """The code cells whose source the page shows open."""
    shown, folded = [], False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for mark in SOLUTION.findall(source(cell)):
                folded = mark == "start"
        elif cell["cell_type"] == "code" and not folded and not HIDDEN & tags(cell):
            shown.append(cell)
    return shown


def page_lines(cell: dict) -> int:
    return sum(1 for line in source(cell).splitlines() if not line.startswith("#|"))


def parse(text: str) -> ast.Module | None:
    """The cell's syntax tree (IPython's %magic and !shell lines read as `pass`), or None."""
    try:
        return ast.parse(
            "\n".join(
                "pass" if MAGIC.match(line) else line for line in text.splitlines()
            )
        )
    except SyntaxError:
        return None


def is_glue(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "glue"
    )


def hidden_glue(node: ast.stmt) -> bool:
    """A statement `glue(name, value, display=False)`."""
    return (
        isinstance(node, ast.Expr)
        and is_glue(node.value)
        and any(
            k.arg == "display"
            and isinstance(k.value, ast.Constant)
            and k.value.value is False
            for k in node.value.keywords
        )
    )


def glue_calls(cell: dict) -> int:
    tree = parse(source(cell))
    if tree is None:
        return source(cell).count("glue(")
    return sum(1 for node in ast.walk(tree) if is_glue(node))


def ignored(cell: dict) -> bool:
    """nbval does not compare the cell's outputs (they differ per run)."""
    return "nbval-ignore-output" in tags(cell)


def shown_glue_calls(cell: dict) -> int:
    """The glue calls of a shown cell that count as shown: not those of an ignored cell."""
    return 0 if ignored(cell) else glue_calls(cell)


def measure(paths: list[Path], lines: int) -> dict:
    rows, total = [], {"shown cells": 0, f"over {lines} lines": 0, "glue shown": 0}
    longest = (0, "")
    for path in paths:
        nb = read(path)
        cells = shown_code_cells(nb)
        sizes = [page_lines(c) for c in cells]
        glue = sum(shown_glue_calls(c) for c in cells)
        over = [n for n in sizes if n > lines]
        first = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
        ready = bool(first and source(first) == setup_source(nb))
        rows.append(
            {
                "notebook": path.name,
                "shown cells": len(cells),
                f"over {lines} lines": len(over),
                "longest": max(sizes, default=0),
                "glue shown": glue,
                "set-up cell": ready,
            }
        )
        total["shown cells"] += len(cells)
        total[f"over {lines} lines"] += len(over)
        total["glue shown"] += glue
        longest = max(longest, (max(sizes, default=0), path.name))
    total["longest"] = f"{longest[0]} ({longest[1]})"
    total["with the set-up cell"] = (
        f"{sum(r['set-up cell'] for r in rows)} of {len(rows)}"
    )
    return {"notebooks": rows, "total": total}


def new_cell(text: str, outputs: list, **metadata) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": metadata.pop("id", None) or uuid.uuid4().hex[:8],
        "metadata": metadata,
        "outputs": outputs,
        "source": text.splitlines(keepends=True),
    }


def timing(at: str) -> dict:
    """Stored execution times of a cell that took no time, at `at`."""
    keys = "iopub.status.busy", "iopub.execute_input", "iopub.status.idle"
    return dict.fromkeys((*keys, "shell.execute_reply"), at)


def glue_output(output: dict) -> str | None:
    """The name a stored output was glued under, or None."""
    return output.get("metadata", {}).get("scrapbook", {}).get("name")


def glue_name(node: ast.stmt) -> str | None:
    call = node.value
    first = call.args[0] if call.args else None
    return first.value if isinstance(first, ast.Constant) else None


def movable(body: list[ast.stmt], i: int) -> bool:
    """body[i] (a glue call) is named by a literal (its stored output says which it is) and reads
    no name that a later statement of the cell assigns."""
    if glue_name(body[i]) is None:
        return False
    reads = {n.id for n in ast.walk(body[i]) if isinstance(n, ast.Name)}
    for later in body[i + 1 :]:
        for n in ast.walk(later):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                if n.id in reads:
                    return False
    return True


def split_glue(cell: dict) -> tuple[dict | None, list[str]]:
    """Take the movable glue statements out of `cell` -> (the hidden cell that holds them, or None;
    the calls left behind, for a person). `cell` is changed in place."""
    text = source(cell)
    if ignored(cell):  # its glue calls stay where nbval ignores them (see `measure`)
        return None, []
    tree = parse(text)
    if tree is None or text.lstrip().startswith("#|"):
        return None, ([f"cell {cell.get('id')}: not parsed"] if "glue(" in text else [])
    body = tree.body
    moving = [
        i for i, node in enumerate(body) if hidden_glue(node) and movable(body, i)
    ]
    left = [
        f"cell {cell.get('id')}, line {node.lineno}"
        for node in ast.walk(tree)
        if is_glue(node) and not any(body[i].value is node for i in moving)
    ]
    if not moving:
        return None, left
    lines = text.splitlines()
    taken: set[int] = set()  # 0-based source lines
    for i in moving:
        first = body[i].lineno - 1
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            above = (
                body[i - 1].end_lineno if i else 0
            )  # comments of this call, not code's
            if first - 1 < above:
                break
            first -= 1
        taken.update(range(first, body[i].end_lineno))
    kept = [line for n, line in enumerate(lines) if n not in taken]
    moved = [line for n, line in enumerate(lines) if n in taken]
    outputs = cell.get("outputs", [])
    names = {glue_name(body[i]) for i in moving}
    glued = [o for o in outputs if glue_output(o) in names]
    if not "".join(kept).strip() or all(
        hidden_glue(node) or isinstance(node, ast.Pass) for node in body
    ):
        cell["metadata"]["tags"] = sorted((tags(cell) - HIDDEN) | {"remove-cell"})
        return None, left
    while kept and not kept[-1].strip():
        kept.pop()
    cell["source"] = "\n".join(kept).splitlines(keepends=True)
    cell["outputs"] = [o for o in outputs if glue_output(o) not in names]
    # its time stays counted in the cell it came from (tests/test_chapter_times.py sums them)
    end = cell["metadata"].get("execution", {}).get("shell.execute_reply")
    timed = {"execution": timing(end)} if end else {}
    carried = sorted((tags(cell) - HIDDEN) | {"remove-cell"})
    hidden = new_cell("\n".join(moved), glued, tags=carried, **timed)
    hidden["execution_count"] = cell.get("execution_count")  # nbval: a stored run
    return hidden, left


def hide_glue(path: Path) -> tuple[int, list[str]]:
    """Move the shown glue calls of one notebook -> (calls moved, calls left, described)."""
    nb = read(path)
    shown = {id(c) for c in shown_code_cells(nb)}
    cells, left, moved = [], [], 0
    for cell in nb["cells"]:
        cells.append(cell)
        if id(cell) not in shown:
            continue
        before = shown_glue_calls(cell)
        hidden, stays = split_glue(cell)
        left += stays
        if hidden is not None:
            cells.append(hidden)
        moved += before - len(stays)
    nb["cells"] = cells
    write(path, nb)
    return moved, left


def add_setup(path: Path) -> bool:
    """Put the set-up cell first among the code cells (replacing an older set-up cell) -> whether it changed."""
    nb = read(path)
    old = next((c for c in nb["cells"] if c.get("id") == SETUP_ID), None)
    wanted = setup_source(nb)
    if old is not None and source(old) == wanted:
        return False
    if old is not None:
        nb["cells"].remove(old)
    at = next(
        (i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"),
        len(nb["cells"]),
    )
    start = (
        nb["cells"][at]["metadata"].get("execution", {}).get("iopub.execute_input")
        if at < len(nb["cells"])
        else None
    )
    timed = {"execution": timing(start)} if start else {}
    cell = new_cell(wanted, [], id=SETUP_ID, tags=["remove-cell"], **timed)
    if at < len(
        nb["cells"]
    ):  # a stored run, as the cells around it (tests/test_export.py)
        cell["execution_count"] = nb["cells"][at].get("execution_count")
    nb["cells"].insert(at, cell)
    write(path, nb)
    return True


def pieces(text: str, tree: ast.Module) -> list[list[str]]:
    """The cell's lines cut before each top-level def or class but the first (directive kept apart)."""
    lines = text.splitlines()
    starts = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            while first > 0 and lines[first - 1].lstrip().startswith("#"):
                if lines[first - 1].startswith("#|"):
                    break
                first -= 1
            starts.append(first)
    cuts = [0, *starts[1:], len(lines)]
    return [lines[a:b] for a, b in zip(cuts, cuts[1:])]


def split_export(cell: dict, lines: int) -> list[dict] | None:
    """`cell` cut into cells of at most `lines` lines where it can be, or None."""
    text = source(cell)
    directive = text.splitlines()[0]
    tree = parse(text)
    if tree is None or cell.get("outputs") or page_lines(cell) <= lines:
        return None
    parts = pieces(text, tree)
    if len(parts) < 2:
        return None
    joined = [parts[0]]
    for part in parts[1:]:
        size = lambda chunk: sum(1 for x in chunk if not x.startswith("#|"))
        if size(joined[-1]) + size(part) <= lines:
            joined[-1] = joined[-1] + part
        else:
            joined.append(part)
    if len(joined) < 2:
        return None
    end = cell["metadata"].get("execution", {}).get("shell.execute_reply")
    cells = []
    for n, chunk in enumerate(joined):
        while chunk and not chunk[-1].strip():
            chunk = chunk[:-1]
        if n == 0:
            cell["source"] = "\n".join(chunk).splitlines(keepends=True)
            cells.append(cell)
            continue
        while chunk and not chunk[0].strip():
            chunk = chunk[1:]
        timed = {"execution": timing(end)} if end else {}
        extra = {
            k: v for k, v in cell["metadata"].items() if k not in ("execution", "id")
        }
        piece = new_cell("\n".join([directive, *chunk]), [], **extra, **timed)
        piece["execution_count"] = cell.get("execution_count")
        cells.append(piece)
    return cells


def split_exports(path: Path, lines: int) -> tuple[int, list[str]]:
    """Split the long shown export cells of one notebook -> (cells split, cells left, described)."""
    nb = read(path)
    shown = {id(c) for c in shown_code_cells(nb)}
    cells, split, left = [], 0, []
    for cell in nb["cells"]:
        long_export = (
            id(cell) in shown
            and source(cell).startswith("#| export")
            and page_lines(cell) > lines
        )
        parts = split_export(cell, lines) if long_export else None
        if parts:
            split += 1
            cells += parts
            continue
        cells.append(cell)
        if long_export:
            left.append(f"cell {cell.get('id')}: {page_lines(cell)} lines")
    nb["cells"] = cells
    write(path, nb)
    return split, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="shown cells over N lines, shown glue calls")
    m.add_argument("notebooks", nargs="*", type=Path)
    m.add_argument("--lines", type=at_least(1), default=40)
    m.add_argument("--json", action="store_true", help="print the numbers as JSON")
    for name in ("hide-glue", "add-setup", "split-exports"):
        one = sub.add_parser(name)
        one.add_argument("notebooks", nargs="+", type=Path)
        one.add_argument("--lines", type=at_least(1), default=40)
    args = parser.parse_args(argv)
    try:  # every notebook read before any is changed
        for path in args.notebooks:
            read(path)
    except NotANotebook as e:
        parser.error(str(e))
    if args.command == "measure":
        paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
        result = measure(paths, args.lines)
        if args.json:
            print(json.dumps(result, indent=1))
            return 0
        for row in result["notebooks"]:
            print("  ".join(f"{k}: {v}" for k, v in row.items()))
        print("total:", "  ".join(f"{k}: {v}" for k, v in result["total"].items()))
        return 0
    for path in args.notebooks:
        if args.command == "split-exports":
            split, left = split_exports(path, args.lines)
            print(f"{path.name}: {split} long export cells split at their functions")
            for place in left:
                print(f"  left (one function, or outputs): {place}")
        elif args.command == "hide-glue":
            moved, left = hide_glue(path)
            print(f"{path.name}: {moved} glue calls moved into hidden cells")
            for place in left:
                print(f"  left (move by hand): {place}")
        else:
            print(
                f"{path.name}: {'set-up cell added' if add_setup(path) else 'unchanged'}"
            )
    return 0


if __name__ == "__main__":
    run_tool(main)
