"""Sphinx extension: the shipped translators, as ONNX, inside the built book, for the in-browser translator.

A page that holds a `<div class="course-translator" ...>` (chapters 14 and 15) gets the module
`_static/translator/translator.mjs`. At the end of an HTML build, each shipped model (`transformer.SHIPPED_MODELS`,
read from models/) is exported with `transformer.export_onnx` into `_static/translator-models/<name>/`, and its
`translator.json` gains the sizes the page downloads on the first translation (the model's files, and the
runtime that the module imports only then), so the box can say how big the download is and show its progress.
An export is skipped when the folder already holds one made from the same weights (`weights_sha256`), and
altogether when no page of the build holds the box (a book built from part of the table of contents).

The box draws Chinese with the font the package ships for its figures (`transformer/_fonts`, a subset of Noto
Sans CJK SC that covers the English→Chinese model's vocabulary), copied with its licence into `_static/fonts/`,
so Chinese reads where the reader's system has no CJK font.
"""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from pathlib import Path

MARKER = 'class="course-translator"'
RUNTIME = [
    "onnxruntime-web/ort.wasm.min.mjs",
    "onnxruntime-web/ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/ort-wasm-simd-threaded.wasm",
    "sentencepiece/sentencepiece.mjs",
]  # what the box imports on its first translation (translator/translator.mjs itself comes with the page)
FONT = "NotoSansCJKsc-course-subset.otf"
MODEL_FILES = [
    "encoder.onnx",
    "decoder.onnx",
    "source.model",
    "target.model",
    "translator.json",
]


def add_module_where_used(app, pagename, templatename, context, doctree) -> None:
    if MARKER in context.get("body", ""):
        app.add_js_file("translator/translator.mjs", type="module")


def export_models(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from transformer.engine.shipped import SHIPPED_MODELS, models_dir
    from transformer.engine.digests import write_digests
    from transformer.engine.onnx_export import EXPORTED, export_onnx, weights_sha256

    static = Path(app.outdir) / "_static"
    pages = [p for p in Path(app.outdir).rglob("*.html") if static not in p.parents]
    if not any(MARKER in p.read_text(encoding="utf-8") for p in pages):
        return
    runtime = sum((static / f).stat().st_size for f in RUNTIME)
    fonts = files("transformer") / "_fonts"
    (static / "fonts").mkdir(exist_ok=True)
    for name in (FONT, "OFL.txt"):
        shutil.copyfile(fonts / name, static / "fonts" / name)
    for name in SHIPPED_MODELS:
        out = static / "translator-models" / name
        meta_path = out / "translator.json"
        meta = (
            json.loads(meta_path.read_text(encoding="utf-8"))
            if meta_path.is_file()
            else {}
        )
        if meta.get("weights_sha256") != weights_sha256(models_dir() / name) or not all(
            (out / f).is_file() for f in MODEL_FILES
        ):
            export_onnx(name, out, replace=True)
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["download_bytes"] = {
            "model": sum(
                (out / f).stat().st_size for f in MODEL_FILES if f != "translator.json"
            ),
            "runtime": runtime,
        }
        meta_path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        write_digests(out, EXPORTED)  # translator.json changed: its digest too


def setup(app):
    app.connect("html-page-context", add_module_where_used)
    app.connect("build-finished", export_models)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
