"""Export the chapters' `#| export` cells into `src/transformer/` with nbdev's exporter.

    python tools/export_notebooks.py            # writes src/transformer/*.py
    python tools/export_notebooks.py --root DIR # exports the copy of the project at DIR

This calls `nbdev.export.nb_export` notebook by notebook. It does not run `nbdev-export`, because
that command also rewrites `__init__.py`'s docstring, writes `notebooks/llms.txt` and `_modidx.py`,
none of which this project wants. `__init__.py` is written by hand: it is the public surface.
"""
import argparse
import contextlib
import io
import os
from pathlib import Path

from nbdev.export import nb_export


def export(root: Path) -> list[Path]:
    """Export every notebook under `root/notebooks` into `root/src/transformer`; return the modules."""
    root = root.resolve()
    lib = root / "src" / "transformer"
    notebooks = sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    if not notebooks:
        raise SystemExit(f"no chapter notebooks found under {root / 'notebooks'}")
    before = {p: p.stat().st_mtime_ns for p in lib.glob("*.py")}
    cwd = os.getcwd()
    os.chdir(root)  # nbdev finds pyproject.toml from the working directory
    try:
        for nb in notebooks:
            with contextlib.redirect_stdout(io.StringIO()):
                nb_export(str(nb), lib_path=str(lib))
    finally:
        os.chdir(cwd)
    return sorted(p for p in lib.glob("*.py") if before.get(p) != p.stat().st_mtime_ns)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    for module in export(args.root):
        print("wrote", module.relative_to(args.root.resolve()))
