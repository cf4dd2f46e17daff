"""Carry to the GPU machine the wheels its image lacks: exactly what the package and bench/gpu_check.sh import.

    python tools/gpu_wheels.py          # here, before a GPU run: downloads into .whl/ (ignored by git)

The GPU machine has no network and its own Python (3.12) with a fixed set of packages
(bench/gpu-image-packages.txt, copied from the image's listing with its date). Everything the package imports
at module level is there but pydantic (transformer.engine.config) and what pydantic needs, so those travel as
wheels: Python 3.12, manylinux x86-64, one version each (the versions this checkout's environment runs its
tests with), downloaded with --no-deps. The download is then checked: every requirement of every wheel is either
another carried wheel or a package of the image. tests/test_gpu_image.py keeps WHEELS complete as the package
changes. On the GPU machine:

    python3 -m pip install -q --no-index --no-deps --target /tmp/whl .whl/*.whl && PYTHONPATH=/tmp/whl bash bench/gpu_check.sh

(bench/gpu_check.sh also installs them by itself when `import transformer` fails.)
"""

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from transformer.engine.command_input import run_tool

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "bench" / "gpu-image-packages.txt"
# What the image lacks, and typing-extensions: the image has one, but its version is not listed and pydantic asks
# for a recent one (>= 4.16 for pydantic 2.14), so a carried copy goes first on the path.
WHEELS = (
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
)
TARGET = [
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux2014_x86_64",
    "--only-binary=:all:",
]


def normal(name: str) -> str:
    """A distribution name as PEP 503 compares them: lowercase, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> set[str]:
    return {
        normal(line)
        for line in IMAGE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


GPU_PYTHON = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}


def requirements(wheel: Path) -> list:
    """What a wheel requires on the GPU machine (`packaging` Requirements, markers evaluated for Python 3.12 on
    Linux, no extras)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    needed = [
        Requirement(line.split(":", 1)[1].strip())
        for line in lines
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in needed if r.marker is None or r.marker.evaluate(GPU_PYTHON)]


def unmet(wheels: list[Path]) -> dict[str, str]:
    """{wheel: requirement} for each requirement that neither a carried wheel nor the image is known to meet (the
    image list has names, not versions: a requirement with a version bound on an image package is unmet)."""
    from packaging.utils import parse_wheel_filename

    carried = {
        normal(str(parse_wheel_filename(w.name)[0])): parse_wheel_filename(w.name)[1]
        for w in wheels
    }
    problems = {}
    for w in wheels:
        for r in requirements(w):
            name = normal(r.name)
            ok = (
                r.specifier.contains(carried[name], prereleases=True)
                if name in carried
                else name in image_packages() and not r.specifier
            )
            if not ok:
                problems[w.name] = str(r)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    args = parser.parse_args()
    versions = {name: importlib.metadata.version(name) for name in WHEELS}
    if args.out.exists() or args.out.is_symlink():
        # only an earlier wheel folder is replaced: --out . or a folder of the user's
        # was deleted whole
        if args.out.is_symlink() or not args.out.is_dir():
            parser.error(
                f"--out {args.out} is not a folder: name a folder for the wheels"
            )
        others = [
            p.name for p in args.out.iterdir() if p.suffix != ".whl" or not p.is_file()
        ]
        if others:
            parser.error(
                f"--out {args.out} holds more than wheels ({', '.join(sorted(others)[:3])}): "
                "name a new folder, or an earlier wheel folder"
            )
        shutil.rmtree(args.out)
    try:
        args.out.mkdir(parents=True)
    except OSError as e:  # a file on the way (--out notes.txt/wheels), no permission
        parser.error(f"--out {args.out}: {e.strerror}: name a folder that can be made")
    specs = [f"{name}=={version}" for name, version in versions.items()]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            *TARGET,
            "-d",
            str(args.out),
            *specs,
        ],
        check=True,
    )
    wheels = sorted(args.out.glob("*.whl"))
    carried = {normal(w.name.split("-")[0]) for w in wheels}
    missing = {normal(n) for n in WHEELS} - carried
    problems = unmet(wheels)
    if missing or problems:
        print(
            f"error: not downloaded {sorted(missing)}; requirements that neither a carried wheel nor the image is "
            f"known to meet {problems}: add them to WHEELS",
            file=sys.stderr,
        )
        return 1
    for w in wheels:
        print(f"{w.name} ({w.stat().st_size / 1e6:.1f} MB)")
    print(
        f"{len(wheels)} wheels in {args.out}: every requirement is carried or in the image ({IMAGE.name})"
    )
    return 0


if __name__ == "__main__":
    run_tool(main)
