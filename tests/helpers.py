"""What several test modules need and pytest's fixtures do not fit: a tiny config as a dict and as a TOML file, a
run's newest checkpoint, a folder's listing, a tool loaded as a module, a model config edited in place, and the
one-layer model config that tests of training and decoding build."""

import importlib.util
import json
import math
import tomllib
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.toml"
SENTENCE = "Ein Hund läuft."


def one_layer_config(vocab_size: int, **changes):
    """A TransformerConfig of one encoder and one decoder layer, D = 16, 2 heads, no
    dropout: a model that builds and steps in milliseconds."""
    from transformer.model import TransformerConfig

    settings = dict(
        d_model=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=32,
        dropout=0.0,
    )
    return TransformerConfig(vocab_size, vocab_size, **{**settings, **changes})


def latest(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


def listing(*roots: Path) -> dict:
    """Every file and folder under `roots`, a file with its size and modification time: what a command must not
    change. (A folder's own time changes when a file is made and removed again, leaving nothing behind.)"""
    return {
        str(p): None
        if p.is_dir() and not p.is_symlink()
        else (p.lstat().st_size, p.lstat().st_mtime_ns)
        for root in roots
        for p in [root, *root.rglob("*")]
    }


def write_config(path: Path, data: dict) -> Path:
    """`data` as a TOML file (top-level settings first, then one table per section)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # TOML's basic strings take JSON's escapes
        return "[" + ", ".join(value(x) for x in v) + "]"

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, table in data.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [
                f"{k} = {value(v)}" for k, v in table.items()
            ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_config(work: Path, **changes) -> dict:
    """configs/tiny.toml as a dict, writing into work/out on the CPU; `optim__lr_factor=-1.0` changes one setting."""
    data = tomllib.loads(TINY.read_text())
    data.update(
        out_dir=str(work / "out"), device="cpu", progress=False, tensorboard=False
    )
    for key, v in changes.items():
        section, _, name = key.rpartition("__")
        (data.setdefault(section, {}) if section else data)[name] = v
    return data


DROP = object()


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, v in changes.items():
        section, _, name = key.rpartition("__")
        target = data[section] if section else data
        if v is DROP:
            del target[name]
        else:
            target[name] = v
    path.write_text(json.dumps(data))


def load_tool(name: str, folder: str = "tools"):
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_settings(name: str = "multi30k-de-en") -> dict:
    """A shipped model's settings (its model_config.json without the "format")."""
    import json

    from transformer.engine.shipped import models_dir

    settings = json.loads((models_dir() / name / "model_config.json").read_text())
    settings.pop("format")
    return settings


def open_page(target, url: str, *, idle: bool = True, **page_options):
    """Open url in a new page of `target` (a browser, or a context of one's own: a
    phone's, for instance) with every request that leaves localhost refused -> (page,
    console errors, refused URLs), once loaded, idle and typeset by MathJax.

    `idle=False` does not wait for half a second without requests (what "idle" means to
    Chromium), only for the page's load, its fonts and MathJax: for tests that read
    every page's layout and do not watch the requests a page makes after its load. A
    page that redirects (the book's index.html) is still waited for."""
    page = target.new_page(**page_options)
    errors: list[str] = []
    refused: list[str] = []

    def only_localhost(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", only_localhost)
    # a page that sends the reader on (the book's index.html) is read where it sends them
    local = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    redirect = b'http-equiv="refresh"' in local.open(url, timeout=30).read().lower()
    page.goto(url, wait_until="load")
    if redirect:
        page.wait_for_url(lambda now: now != url)
    page.wait_for_load_state("networkidle" if idle else "load")
    page.evaluate(
        """async () => {
          await ((window.MathJax && MathJax.startup && MathJax.startup.promise) || null);
          await document.fonts.ready;
        }"""
    )
    return page, errors, refused
