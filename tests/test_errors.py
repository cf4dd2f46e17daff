"""The package's error family (transformer.errors): one family that keeps the built-in types, and a
module that imports nothing."""

import ast


import transformer.engine.cli as cli
from transformer.engine.corpora import (
    ChecksumError,
    CorpusFormatError,
    CorpusNotFoundError,
)
from transformer.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ConfigError,
    CorpusError,
    InputError,
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
        cli.CommandError,
    ):
        assert issubclass(kind, TransformerError)
    assert issubclass(ConfigError, ValueError) and issubclass(InputError, ValueError)
    assert issubclass(CheckpointNotFoundError, CheckpointError)
    assert issubclass(CheckpointNotFoundError, FileNotFoundError)
    assert issubclass(RunExistsError, ConfigError) and issubclass(
        RunExistsError, FileExistsError
    )
    assert issubclass(cli.CommandError, InputError)


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
