"""The package's error family (transformer.errors): one family that keeps the built-in types, and a
module that imports nothing."""

import ast
import inspect

import transformer
import transformer.errors as errors
from transformer.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ChecksumError,
    CommandError,
    ConfigError,
    CorpusError,
    CorpusFormatError,
    CorpusNotFoundError,
    InputError,
    NonFiniteLossError,
    RunExistsError,
    TransformerError,
)

from helpers import ROOT

# ---------------------------------------------------------------- the family


def test_the_package_errors_are_one_family_that_keeps_the_builtin_types():
    for kind in (
        ConfigError,
        CorpusError,
        CheckpointError,
        InputError,
        CommandError,
        NonFiniteLossError,
    ):
        assert issubclass(kind, TransformerError)
    assert issubclass(ConfigError, ValueError) and issubclass(InputError, ValueError)
    assert issubclass(CheckpointNotFoundError, CheckpointError)
    assert issubclass(CheckpointNotFoundError, FileNotFoundError)
    assert issubclass(RunExistsError, ConfigError) and issubclass(
        RunExistsError, FileExistsError
    )
    assert issubclass(CommandError, InputError)
    assert issubclass(NonFiniteLossError, FloatingPointError)


def test_every_error_class_of_the_package_is_defined_in_errors_py():
    """One home for the family: a module that raises its own kind of error imports it."""
    import pkgutil
    import importlib

    elsewhere = []
    for info in pkgutil.walk_packages(transformer.__path__, "transformer."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and info.name != "transformer.errors"
                # the command line's own signals (a closed pipe, SIGTERM), never raised
                # out of it
                and name not in ("StdoutClosed", "Terminated")
            ):
                elsewhere.append(f"{info.name}.{name}")
    assert not elsewhere, f"error classes outside transformer/errors.py: {elsewhere}"
    assert all(
        issubclass(getattr(errors, name), TransformerError) for name in errors.__all__
    )


def test_the_corpus_errors_belong_to_the_family():
    """notebooks/91_corpora.ipynb: CorpusNotFoundError, CorpusFormatError and ChecksumError derive from CorpusError."""
    assert issubclass(CorpusNotFoundError, CorpusError) and issubclass(
        CorpusNotFoundError, FileNotFoundError
    )
    assert issubclass(CorpusFormatError, CorpusError) and issubclass(
        CorpusFormatError, ValueError
    )
    assert issubclass(ChecksumError, CorpusError) and issubclass(
        ChecksumError, ValueError
    )


def test_the_errors_module_imports_nothing():
    source = (ROOT / "src" / "transformer" / "errors.py").read_text()
    assert not [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, (ast.Import, ast.ImportFrom))
    ]
