"""A reader's clone is all the course needs.

A fresh `git clone` of this repository into a temporary folder, with nothing beside it (no folder of corpora),
`HOME` an empty folder (no cache, no config) and every download refused (proxies pointing at a closed
port), must run the corpora's appendix (91, which reads and checks the clone's `data/`) under nbval, evaluate the shipped English→Chinese model on the Tatoeba test
split and train the tiny config. A damaged file in the clone's `data/` must stop the command line with one
line naming the file and the fix, never a traceback and never a silently different split.

The clone is of the committed HEAD: what a reader gets. Uncommitted changes are not in it.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import reader_env
from test_portable_outputs import (
    _pytest_options,
)  # the suite's nbval options, without its xdist workers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """(clone directory, environment of a reader's shell in it)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (or no git): there is nothing to clone")
    base = tmp_path_factory.mktemp("reader")
    subprocess.run(
        ["git", "clone", "-q", str(ROOT), str(base / "course")], check=True, timeout=120
    )
    (base / "home").mkdir()
    env = reader_env(base / "home")
    env.update(PYTHONPATH=str(base / "course" / "src"), OMP_NUM_THREADS="1")
    assert not (base / "shared").exists()
    return base / "course", env


def run(
    course: Path, env: dict, *args: str, timeout: int = 600
) -> subprocess.CompletedProcess:
    """`python ARGS` in the clone, as the reader's shell would run it."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_clone_imports_its_own_package_and_finds_its_own_data(clone):
    course, env = clone
    result = run(
        course,
        env,
        "-c",
        "import transformer.engine.corpus_files as c; print(c.__file__); print(c.data_search_path())",
    )
    assert result.returncode == 0, result.stderr
    module, search = result.stdout.splitlines()
    assert Path(module).is_relative_to(course), module
    assert str(course / "data") in search and "shared" not in search


def test_the_corpora_appendix_passes_nbval_in_the_clone(clone):
    """Appendix 91 finds, reads and verifies the corpora in the clone's own `data/` (chapter 09 reads them
    the same way, through the same loaders, and takes a minute: the suite runs it in the checkout)."""
    course, env = clone
    result = run(
        course,
        env,
        "-m",
        "pytest",
        *_pytest_options(),
        "-o",
        "addopts=",
        "-q",
        "notebooks/91_corpora.ipynb",
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_evaluate_the_shipped_chinese_model_in_the_clone(clone, tmp_path):
    course, env = clone
    result = run(
        course,
        env,
        "-m",
        "transformer",
        "evaluate",
        "--model",
        "tatoeba-en-zh",
        "--split",
        "test",
        "--limit",
        "20",
        "--device",
        "cpu",
        "--out-dir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert "tatoeba-en-zh on test: 20 sentences" in result.stdout
    assert len((tmp_path / "test.hyp").read_text(encoding="utf-8").splitlines()) == 20


def test_train_the_tiny_config_in_the_clone(clone, tmp_path):
    course, env = clone
    result = run(
        course,
        env,
        "-m",
        "transformer",
        "train",
        "--config",
        "configs/tiny.toml",
        "--device",
        "cpu",
        "--out-dir",
        str(tmp_path / "run"),
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        result.stdout.startswith("done: step")
        and (tmp_path / "run" / "metrics.csv").is_file()
    )


@pytest.mark.parametrize(
    "relpath, damage, command",
    [
        (
            "multi30k/train.de.gz",
            "truncated",
            ["train", "--config", "configs/tiny.toml", "--device", "cpu"],
        ),
        (
            "tatoeba/cmn-eng.tsv.gz",
            "changed byte",
            [
                "evaluate",
                "--model",
                "tatoeba-en-zh",
                "--split",
                "test",
                "--limit",
                "2",
                "--device",
                "cpu",
            ],
        ),
    ],
)
def test_a_damaged_data_file_is_one_line_with_the_fix(
    clone, tmp_path, relpath, damage, command
):
    course, env = clone
    target = course / "data" / relpath
    raw = target.read_bytes()
    try:
        if damage == "truncated":
            target.write_bytes(raw[: len(raw) // 2])
        else:  # one byte of the compressed stream: either the gzip check or the text's checksum must catch it
            target.write_bytes(raw[:5000] + bytes([raw[5000] ^ 0x01]) + raw[5001:])
        result = run(
            course,
            env,
            "-m",
            "transformer",
            *command,
            "--out-dir",
            str(tmp_path / "out"),
        )
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert f"data/{relpath}" in lines[0] and "git checkout -- data/" in lines[0]
        assert not (tmp_path / "out").exists()  # a rejected run writes nothing
    finally:
        subprocess.run(["git", "checkout", "--", "data/"], cwd=course, check=True)
    assert target.read_bytes() == raw  # the fix the message names restores the file


def test_no_file_of_the_project_refers_to_a_folder_beside_the_checkout():
    """The course's corpora used to come from a `shared` folder beside the checkout, which a reader's clone
    lacks. No tracked file may name it again (the pattern is assembled so this file does not match itself)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (or no git): no list of tracked files")
    pattern = "../" + "shared"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    offenders = []
    for name in filter(None, tracked.decode().split("\0")):
        path = ROOT / name
        if path.is_file() and path.suffix not in (
            ".gz",
            ".safetensors",
            ".model",
            ".png",
            ".woff",
            ".woff2",
        ):
            if pattern in path.read_text(encoding="utf-8", errors="ignore"):
                offenders.append(name)
    assert not offenders, f"these files refer to {pattern}: {offenders}"
