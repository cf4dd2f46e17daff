"""Sphinx extension: show nbdev's `#| export` as a label a reader understands, and hide other directives.

In the notebooks a cell that goes into the package starts with `#| export` (nbdev's exporter reads it).
On the rendered page that line is noise, so this extension removes every `#|` directive line from code
cells and, above a cell that was exported, writes "exported to transformer/<module>.py", the module
being the notebook's `#| default_exp` (or the one the directive names). The notebooks are not changed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes

DIRECTIVE = re.compile(r"^\s*#\|\s*(\S+)\s*(\S*)")
EXPORTING = {"export", "exports", "exporti"}


def default_module(notebook: Path) -> str | None:
    """The `#| default_exp` of a notebook, or None (a chapter that exports nothing)."""
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return None
    for cell in cells:
        for line in "".join(cell.get("source", "")).splitlines():
            match = DIRECTIVE.match(line)
            if match and match.group(1) == "default_exp" and match.group(2):
                return match.group(2)
    return None


def strip_directives(text: str) -> tuple[str, str | None]:
    """Code without its `#|` lines, and the module it is exported to ('' for the default; None if not exported)."""
    kept, exported = [], None
    for line in text.splitlines():
        match = DIRECTIVE.match(line)
        if match is None:
            kept.append(line)
        elif match.group(1) in EXPORTING:
            exported = match.group(2)
    while kept and not kept[0].strip():
        kept.pop(0)
    return "\n".join(kept), exported


def label_exports(app, doctree: nodes.document) -> None:
    docname = app.env.docname
    source = Path(app.env.doc2path(docname))
    module = default_module(source) if source.suffix == ".ipynb" else None
    for container in list(doctree.findall(nodes.container)):
        if container.get("nb_element") != "cell_code_source":
            continue
        for block in list(container.findall(nodes.literal_block)):
            text = block.astext()
            if "#|" not in text:
                continue
            code, exported = strip_directives(text)
            block.rawsource = code
            block.children = [nodes.Text(code)]
            if exported is not None:
                target = (exported or module or "").replace(".", "/")
                label = nodes.paragraph(classes=["nbdev-export-label"])
                label += nodes.Text("exported to ")
                label += nodes.literal(text=f"transformer/{target}.py")
                block.parent.insert(block.parent.index(block), label)
            if not code.strip() and container.parent is not None:
                container.parent.remove(
                    container
                )  # a directive-only cell left untagged: nothing to show


def setup(app):
    app.connect("doctree-read", label_exports)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
