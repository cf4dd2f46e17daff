"""The package as another project gets it: a wheel built from the repository, installed away from the checkout.

`pip install /path/to/the/repo` builds a wheel and installs it into site-packages, where the checkout's
`models/` and `data/` are out of reach: the build (setup.py) copies them into the package. These tests
build that wheel offline from a copy of the checkout, install it into a fresh virtual environment, and
use it from an unrelated folder with an empty HOME, no TRANSFORMER_* variables and the network refused.

The fresh environment borrows torch and the other dependencies from the course's venv through a `.pth`
file naming that venv's site-packages. Python appends such a path to `sys.path` without reading the
`.pth` files inside it, so the course's editable install of `transformer` (itself a `.pth` line) stays
invisible: `test_the_installed_package_is_the_wheel_not_the_checkout` checks exactly that.
"""

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import reader_env

ROOT = Path(__file__).resolve().parents[1]
# What a fresh clone does not have: left out of the copy the wheel is built from.
NOT_IN_A_CLONE_AT_TOP = {
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "_build",
    "runs",
    "checkpoints",
    "evaluation",
}
NOT_IN_A_CLONE_ANYWHERE = {
    "__pycache__",
    ".ipynb_checkpoints",
    ".pytest_cache",
    ".hypothesis",
    ".cache",
}


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    """Run `command`; on a non-zero exit, fail with its output."""
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} exited with {result.returncode}\n"
        f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    )
    return result


def _not_in_a_clone(folder: str, names: list[str]) -> list[str]:
    top = Path(folder).resolve() == ROOT
    return [
        name
        for name in names
        if name in NOT_IN_A_CLONE_ANYWHERE
        or name.endswith(".egg-info")
        or (top and name in NOT_IN_A_CLONE_AT_TOP)
    ]


def files_under(folder: Path) -> list[Path]:
    """Every file under `folder`, relative to it, sorted; hidden files and caches left out (as setup.py does)."""
    relpaths = (
        path.relative_to(folder) for path in folder.rglob("*") if path.is_file()
    )
    return sorted(
        p
        for p in relpaths
        if not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
    )


def assert_same_tree(copy: Path, original: Path) -> None:
    assert copy.is_dir(), f"{copy} is missing from the installed package"
    assert files_under(copy) == files_under(original), (
        f"{copy} does not hold the files of {original}"
    )
    differ = [
        str(p)
        for p in files_under(original)
        if not filecmp.cmp(copy / p, original / p, shallow=False)
    ]
    assert not differ, (
        f"these files of {original} differ in the installed copy: {differ}"
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> SimpleNamespace:
    """The wheel, built from a copy of the checkout and installed into a fresh venv; an offline environment to run it."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Built from a copy so that setuptools' build/ and egg-info never land in (or race in) the shared checkout.
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=_not_in_a_clone)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--wheel-dir",
            tmp / "wheels",
            source,
        ]
    )
    (wheel,) = (tmp / "wheels").glob("transformer-*.whl")
    shutil.rmtree(
        source
    )  # pytest keeps the last three runs' temporary folders: keep them small

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site_packages = Path(
        run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
    )
    # Installed before the .pth below exists, so that this pip never sees the course's own `transformer`.
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
            wheel,
        ]
    )
    borrowed = dict.fromkeys(
        sysconfig.get_paths()[key] for key in ("purelib", "platlib")
    )  # torch & co., in order
    (site_packages / "_course_venv_dependencies.pth").write_text(
        "".join(f"{path}\n" for path in borrowed)
    )

    home, elsewhere = tmp / "home", tmp / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    env = reader_env(home)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return SimpleNamespace(
        wheel=wheel,
        python=python,
        bin=venv / "bin",
        site_packages=site_packages,
        env=env,
        cwd=elsewhere,
        package=site_packages / "transformer",
    )


def in_venv(installed, *command) -> str:
    """Standard output of `command`, run from the unrelated folder, offline, with the fresh venv first on PATH."""
    return run(command, cwd=installed.cwd, env=installed.env).stdout


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    probe = (
        "import json, sys, transformer; from transformer.engine.shipped import models_dir; "
        "print(json.dumps({'file': transformer.__file__, 'path': sys.path, 'models': str(models_dir())}))"
    )
    found = json.loads(in_venv(installed, installed.python, "-c", probe))
    assert (
        Path(found["file"]).resolve().is_relative_to(installed.site_packages.resolve())
    ), found["file"]
    assert not Path(found["file"]).resolve().is_relative_to(ROOT), found["file"]
    assert str(ROOT / "src") not in found["path"], (
        "the course's editable install leaked into the fresh venv"
    )
    assert Path(found["models"]) == installed.package / "_shipped" / "models"


def test_the_wheel_carries_every_file_of_every_shipped_model(installed):
    from transformer.engine.shipped import SHIPPED_MODELS

    for name in SHIPPED_MODELS:
        assert_same_tree(
            installed.package / "_shipped" / "models" / name, ROOT / "models" / name
        )


def test_the_installed_command_translates_with_both_shipped_models_offline(installed):
    transformer = installed.bin / "transformer"
    english = in_venv(
        installed, transformer, "translate", "Ein Mann fährt mit dem Fahrrad."
    )
    assert english.count("\n") == 1, english
    words = re.findall(r"[a-z]+", english.lower())
    assert "man" in words and {"bike", "bicycle"} & set(words), (
        english
    )  # "A man is riding his bike."

    chinese = in_venv(
        installed,
        transformer,
        "translate",
        "--model",
        "tatoeba-en-zh",
        "I like to read books.",
    )
    assert chinese.count("\n") == 1, chinese
    assert "喜欢" in chinese and "书" in chinese, (
        chinese
    )  # "I like ... books": 我喜欢读的书。


def test_the_wheel_carries_the_corpora_and_the_installed_loaders_read_them_offline(
    installed,
):
    if not (ROOT / "data").is_dir():
        pytest.skip(
            "the checkout has no data/ folder, so the wheel has no corpora to carry"
        )
    assert_same_tree(installed.package / "_shipped" / "data", ROOT / "data")
    probe = (
        "import json; from transformer.engine.corpora import load_multi30k, load_tatoeba; "
        "print(json.dumps({'val': load_multi30k('val'), 'test': load_tatoeba('test')}))"
    )
    loaded = json.loads(in_venv(installed, installed.python, "-c", probe))
    assert len(loaded["val"]) == 1014 and len(loaded["test"]) > 1000, {
        key: len(pairs) for key, pairs in loaded.items()
    }
    assert all(
        re.search(r"[\u4e00-\u9fff]", chinese) for _, chinese in loaded["test"]
    ), "a Tatoeba target has no Chinese"
