"""Put the shipped models and the corpora into the wheel.

The repository keeps them beside the package (`models/<name>/`, `data/`), where the chapters, the tests
and an editable install (`pip install -e .`) read them. A wheel (`pip install .`, `pip wheel .`,
`python -m build`) is installed away from the checkout, so the build copies them into the package as
`transformer/_shipped/models/<name>/` and `transformer/_shipped/data/`; `transformer.engine.shipped.models_dir`
and the corpus loaders look there first. Everything else about the package is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

ROOT = Path(__file__).resolve().parent
SHIPPED = {
    "models": ROOT / "models",
    "data": ROOT / "data",
}  # folder inside _shipped/ -> folder of the checkout
REQUIRED = {
    "models"
}  # a wheel without the models is the broken package this file exists to prevent


def _files(folder: Path) -> list[Path]:
    """Every file under `folder`, relative to it, sorted; hidden files and caches left out."""
    relpaths = (
        path.relative_to(folder) for path in folder.rglob("*") if path.is_file()
    )
    return sorted(
        p
        for p in relpaths
        if not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
    )


class build_py_with_shipped_files(build_py):
    """`build_py`, plus a copy of `models/` and `data/` into `transformer/_shipped/` of the build.

    In editable mode (PEP 660) it copies nothing: the editable package reads the checkout's folders.
    """

    def initialize_options(self) -> None:
        super().initialize_options()
        self._shipped = None

    def _shipped_mapping(self) -> dict[str, str]:
        """{file in the build: file in the checkout} for every shipped model and corpus file."""
        if self._shipped is None:
            target = Path(self.build_lib, "transformer", "_shipped")
            self._shipped = {}
            for name, folder in SHIPPED.items():
                if not folder.is_dir():
                    if name in REQUIRED:
                        raise FileError(
                            f"{folder} does not exist: build from a checkout of the course, or from "
                            "an sdist made from one (MANIFEST.in puts models/ and data/ into it)"
                        )
                    self.warn(
                        f"{folder} does not exist: the wheel will not carry transformer/_shipped/{name}"
                    )
                    continue
                for relpath in _files(folder):
                    self._shipped[str(target / name / relpath)] = str(folder / relpath)
        return self._shipped

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        shutil.rmtree(
            Path(self.build_lib, "transformer", "_shipped"), ignore_errors=True
        )  # no stale files
        for destination, source in self._shipped_mapping().items():
            self.mkpath(str(Path(destination).parent))
            self.copy_file(source, destination)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return (
            outputs if self.editable_mode else outputs + list(self._shipped_mapping())
        )

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        return mapping if self.editable_mode else {**mapping, **self._shipped_mapping()}


setup(cmdclass={"build_py": build_py_with_shipped_files})
