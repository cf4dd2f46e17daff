"""Shared test fixtures: where the real corpora are, a quiet torch, a tiny training run, and the built book in
a browser."""

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from filelock import FileLock  # a dependency of torch

from helpers import open_page

ROOT = Path(__file__).resolve().parents[1]
COURSE_DATA = ROOT / "data"  # the corpora, kept in the repository (data/README.md)

# The models under test are tiny: one thread is faster than two fighting over a small matmul, and it
# makes float reductions independent of the machine's core count.
torch.set_num_threads(1)
# The notebooks' kernels inherit this: with the suite split over two workers (pytest-xdist), two kernels
# of two threads each on two cores would slow each other down many times over.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def course_data() -> Path:
    """The course's copy of the corpora, in the repository's `data/` (every clone has it)."""
    assert (COURSE_DATA / "SHA256SUMS").is_file(), (
        f"{COURSE_DATA} is incomplete: restore it with `git checkout -- data/`"
    )
    return COURSE_DATA


def _tiny_train_config(tmp_path: Path, name: str = "run", **changes):
    """configs/tiny.toml on the CPU, quiet, writing under tmp_path; `optim__epochs=3` sets optim.epochs."""
    from transformer.engine.config import TrainConfig

    settings = TrainConfig.from_toml(ROOT / "configs" / "tiny.toml").to_dict()
    settings.update(
        out_dir=str(tmp_path / name), device="cpu", progress=False, tensorboard=False
    )
    for key, value in changes.items():
        section, _, field = key.rpartition("__")
        (settings[section] if section else settings)[field] = value
    config = TrainConfig.from_dict(settings)  # checked as a file would be
    return config


@pytest.fixture(scope="session")
def tiny_train_config():
    """The function `tiny_train_config(tmp_path, name="run", **changes)`: a TrainConfig of configs/tiny.toml."""
    return _tiny_train_config


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, course_data) -> Path:
    """A run folder of configs/tiny.toml (seconds to train): checkpoints/step-*, latest, best, metrics.csv.
    One per test module, so that no module sees what another did to it."""
    from transformer.engine.trainer import train

    config = _tiny_train_config(tmp_path_factory.mktemp("tiny-run"))
    train(config)
    return Path(config.out_dir)


OFFLINE_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, every connection through it is refused


def reader_env(home: Path) -> dict[str, str]:
    """The environment of a reader's shell on a machine with nothing of ours: HOME the given (empty) folder, no
    course variables, caches, Python paths or pytest state inherited, and every download refused."""
    dropped = (
        "TRANSFORMER_",
        "XDG_",
        "PYTEST_",
        "NBVAL",
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "COV_CORE_",
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(dropped) and k.lower() != "no_proxy"
    }
    env.update(
        dict.fromkeys(
            (
                "http_proxy",
                "https_proxy",
                "all_proxy",
                "HTTP_PROXY",
                "HTTPS_PROXY",
                "ALL_PROXY",
            ),
            OFFLINE_PROXY,
        )
    )
    env["HOME"] = str(home)
    return env


# The longest units of work of the README's `pytest` (a test module, a notebook, or the book's three
# modules together), longest first, as `--durations` measured them on two cores (seconds, 2026-12-07):
# the portability re-runs and the JupyterLab check (only with TRANSFORMER_PORTABILITY=1 and
# TRANSFORMER_JUPYTERLAB=1), the book (226), the bad inputs (94), the training runs (85), chapter 11
# (84), chapters 14, 09, 16 (52-53), ...
# pytest-xdist's `--dist loadscope` hands out whole units in this order (`pytest_xdist_make_scheduler`
# turns off its own reordering by the number of tests, which started the one-test JupyterLab check
# last and left the other worker idle for most of its 54 s).
LONGEST_FIRST = (
    "test_portable_outputs.py",
    "test_check_in_jupyterlab.py",
    "test_book_browser.py",
    "test_widget_page.py",
    "test_browser_translator.py",
    "test_bad_inputs.py",
    "test_train.py",
    "11_decoding.ipynb",
    "14_seeing_attention.ipynb",
    "09_data.ipynb",
    "16_modern_block.ipynb",
    "test_cli.py",
    "12_evaluation.ipynb",
    "08_transformer.ipynb",
    "18_decoder_only.ipynb",
    "test_reader_clone.py",
    "10_training.ipynb",
    "13_results.ipynb",
    "test_wheel.py",
    "test_attention_cost.py",
)


# The modules that read the built book (the `built_book` fixture, one build of about 30 s per pytest
# process): one unit of work, so that a single worker builds it.
BOOK_MODULES = (
    "test_book_browser.py",
    "test_widget_page.py",
    "test_browser_translator.py",
)


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's `--dist loadscope` (pyproject.toml), with the book's modules as one scope."""
    if config.getoption("dist") != "loadscope":
        return None  # another mode asked for on the command line: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    # in LONGEST_FIRST's order (`pytest_collection_modifyitems`), not by tests per unit
    config.option.loadscopereorder = False

    class BookTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if path.endswith(BOOK_MODULES):
                return "the built book"
            return super()._split_scope(nodeid)

    return BookTogether(config, log)


def pytest_collection_modifyitems(config, items):
    """Start the longest units first (`LONGEST_FIRST`), the rest after them in their own order. A stable
    sort, so every notebook's cells keep their order and every test module (pytest-xdist's
    `--dist loadscope` unit of work) stays together."""

    def rank(item) -> int:
        path = item.nodeid.split("::")[0]
        return next(
            (i for i, name in enumerate(LONGEST_FIRST) if path.endswith(name)),
            len(LONGEST_FIRST),
        )

    items.sort(key=rank)


# The browser tests (tests/test_book_browser.py, tests/test_widget_page.py) share one build of the book,
# one local server and one Chromium per pytest process.
CHROMIUM = os.environ.get("CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> Path:
    """The book built as `.ci/run` builds it (warnings are errors) into a temporary folder: its html folder."""
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: install it (Debian: apt-get install chromium) to run the browser tests"
        )
    pytest.importorskip(
        "playwright.sync_api", reason="pip install playwright (in requirements.txt)"
    )
    # Three test modules read the book and pytest-xdist may give them to different workers: the workers of one
    # run share one build (the folder above each worker's own temporary folder belongs to this run), under a lock.
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    out = (
        tmp_path_factory.getbasetemp().parent / "book"
        if shared
        else tmp_path_factory.mktemp("book")
    )
    with FileLock(str(out) + ".lock"):
        if not (out / "built").is_file():
            out.mkdir(exist_ok=True)
            jupyter_book = Path(sys.executable).with_name("jupyter-book")
            result = subprocess.run(
                [
                    str(jupyter_book),
                    "build",
                    str(ROOT),
                    "-W",
                    "-n",
                    "--keep-going",
                    "--path-output",
                    str(out),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=900,
            )
            assert result.returncode == 0, (
                f"the book build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
            (out / "built").touch()
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def book_site(built_book):
    """The built book served on localhost: its base URL, ending in '/'."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(built_book))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="session")
def chromium(built_book):
    """Headless Debian Chromium driven by playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _open_offline(browser, url: str):
    """Open url with every request that leaves localhost aborted -> (page, console errors, refused URLs).

    Waits until the page is loaded and idle (index.html forwards to the first page) and MathJax has typeset.
    """
    return open_page(browser, url, viewport={"width": 1280, "height": 900})


@pytest.fixture(scope="session")
def open_offline(chromium):
    """`open_offline(url)` -> (page, console errors, refused URLs), in the shared Chromium."""
    return functools.partial(_open_offline, chromium)
