"""Every bad input gets one clear answer: exit status 2, one `error: ...` line that says what is wrong and what to
do, no traceback, and nothing written by the rejected run.

Table-driven. Each case is a command line, run in-process through `transformer.engine.cli.main` (standard input
replaced where the case gives one), in a scratch folder that holds everything the case reads: a copy of a
tiny trained model damaged one way, a config file, a corpus. The folder's listing (names, sizes, times) must
be the same after the command as before it. The damaged models also go through `load_checkpoint` and
`load_translator`, which must raise the package's own `CheckpointError`. A hypothesis test feeds random
values to every config field; the reverse check makes sure a real bug is not dressed up as bad input.

The model is configs/tiny.toml, trained once for the module (seconds).
"""

import contextlib
import copy
import tempfile
import types
import dataclasses
import importlib.util
import errno
import functools
import gzip
import io
import json
import math
import os
import re
import enum
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import transformer.engine.cli as cli
import transformer.engine.commands as commands
import transformer.engine.command_input as command_input
import transformer.engine.trainer as train_module
from transformer.engine.checkpoints import load_training_state
from transformer.engine.loading import load_checkpoint
from transformer.engine.config import TrainConfig
from transformer.engine.digests import DIGESTED, write_digests
from transformer.engine.onnx_export import EXPORTED
from transformer.engine.shipped import load_translator
from transformer.engine.train_state import TRAINING_STATE
from transformer.errors import (
    CheckpointError,
    ConfigError,
    InputError,
    InputTypeError,
)
from transformer.translation import translate
from transformer.engine.metrics import MetricsLog, read_metrics

from helpers import (
    DROP,
    ROOT,
    SENTENCE,
    TINY,
    edit_json,
    latest,
    listing,
    tiny_config,
    write_config,
)


# ---------------------------------------------------------------- fixtures and helpers


CLOSED = (
    object()
)  # standard input closed (`transformer translate <&-`): Python's sys.stdin is None


def run_main(
    argv: list[str], stdin: bytes | None, capsys, monkeypatch
) -> tuple[int, str, str]:
    """`transformer ARGV` in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(
        sys,
        "stdin",
        None if stdin is CLOSED else io.TextIOWrapper(io.BytesIO(stdin or b"")),
    )
    capsys.readouterr()
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status: int, out: str, err: str, phrase: str) -> None:
    assert status == 2, (status, err)
    assert (
        err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    ), err
    assert phrase in err, err
    assert out == "", out


def edit_weights(path: Path, change) -> None:
    """Change the tensors of a model.safetensors, keeping its metadata (the config the
    weights were saved with)."""
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    save_file(change(tensors), str(path), metadata=metadata)
    write_digests(path.parent)  # changed on purpose: the other checks must see it


def with_value(name: str, value: float):
    def change(tensors):
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[3] = value
        return tensors

    return change


FF = "encoder.layers.0.feed_forward.linear1.weight"


# ---------------------------------------------------------------- damaged models: the loaders and `translate`


def truncated(m: Path) -> None:
    w = m / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


MODEL_CASES = [  # (id, damage done to a copy of the latest checkpoint folder, phrase of the one-line message)
    ("weights cut in half", truncated, "damaged or was cut short"),
    (
        "weights empty",
        lambda m: (m / "model.safetensors").write_bytes(b""),
        "cannot be read",
    ),
    (
        "weights not safetensors",
        lambda m: (m / "model.safetensors").write_bytes(b"\x08\0\0\0\0\0\0\0{}garbage"),
        "cannot be read",
    ),
    (
        "a weight is NaN",
        lambda m: edit_weights(m / "model.safetensors", with_value(FF, math.nan)),
        f"tensor '{FF}' holds 1 NaN or infinite value",
    ),
    (
        "a weight is infinite",
        lambda m: edit_weights(m / "model.safetensors", with_value(FF, -math.inf)),
        f"tensor '{FF}' holds 1 NaN or infinite value",
    ),
    (
        "weights saved as integers",
        lambda m: edit_weights(
            m / "model.safetensors",
            lambda t: {k: (v * 100).long() for k, v in t.items()},
        ),
        "is stored as I64, but a model's weights are floating point",
    ),
    (
        "weights saved as booleans",
        lambda m: edit_weights(
            m / "model.safetensors", lambda t: {k: v > 0 for k, v in t.items()}
        ),
        "is stored as BOOL",
    ),
    (
        "model_config.json: another d_model",
        lambda m: edit_json(m / "model_config.json", d_model=64),
        "it says d_model=64, but model.safetensors holds d_model=32",
    ),
    (
        "model_config.json: more layers",
        lambda m: edit_json(m / "model_config.json", num_encoder_layers=2),
        "it says num_encoder_layers=2, but model.safetensors holds num_encoder_layers=1",
    ),
    (
        "model_config.json: another d_ff",
        lambda m: edit_json(m / "model_config.json", d_ff=128),
        "d_ff=128",
    ),
    (
        "model_config.json: another vocabulary",
        lambda m: edit_json(
            m / "model_config.json", src_vocab_size=2000, tgt_vocab_size=2000
        ),
        "tgt_vocab_size=2000",
    ),
    (
        "model_config.json: another norm placement",
        lambda m: edit_json(m / "model_config.json", norm_first=True),
        "is not the config these weights were saved with: it says norm_first=True, but model.safetensors was saved "
        "with norm_first=False",
    ),
    (
        "model_config.json: rotary positions for weights trained with sinusoids",
        lambda m: edit_json(m / "model_config.json", positions="rotary"),
        "it says positions='rotary', but",
    ),
    (
        "model_config.json: max_len 1",
        lambda m: edit_json(m / "model_config.json", max_len=1),
        "it says max_len=1, but model.safetensors was saved with max_len=64",
    ),
    (
        "model_config.json: max_len 10**9",
        lambda m: edit_json(m / "model_config.json", max_len=10**9),
        "it says max_len=1000000000",
    ),
    (
        "model_config.json: a named pipe",
        lambda m: fifo(m / "model_config.json"),
        "model_config.json is a named pipe, not a regular file",
    ),
    (
        "model_config.json: linked to /dev/zero",
        lambda m: link(m / "model_config.json", "/dev/zero"),
        "model_config.json is a character device, not a regular file",
    ),
    (
        "model_config.json: a folder",
        lambda m: folder(m / "model_config.json"),
        "model_config.json is a folder",
    ),
    (
        "train_config.json: linked to /dev/zero",
        lambda m: link(m / "train_config.json", "/dev/zero"),
        "train_config.json is a character device",
    ),
    (
        "train_config.json: 100 MB",
        lambda m: sparse(m / "train_config.json", 100 << 20),
        "more than the 67,108,864",
    ),
    (
        "tokenizer.model: a named pipe",
        lambda m: fifo(m / "tokenizer.model"),
        "tokenizer.model is a named pipe",
    ),
    (
        "tokenizer.model: linked to /dev/zero",
        lambda m: link(m / "tokenizer.model", "/dev/zero"),
        "tokenizer.model is a character device",
    ),
    (
        "model.safetensors: a named pipe",
        lambda m: fifo(m / "model.safetensors"),
        "no checkpoint found at",
    ),
    (
        "model.safetensors: its config in the metadata is a list",
        lambda m: saved_config(m, "[1]"),
        "its metadata's model_config is a JSON list",
    ),
    (
        "model.safetensors: its config in the metadata is not JSON",
        lambda m: saved_config(m, "{"),
        "its metadata's model_config is damaged",
    ),
    (
        "model_config.json: nested 100,000 deep",
        lambda m: (m / "model_config.json").write_text("[" * 100_000 + "]" * 100_000),
        "model_config.json is damaged, not JSON (RecursionError",
    ),
    (
        "tokenizer.model: a symlink loop",
        lambda m: link(m / "tokenizer.model", str(m / "tokenizer.model")),
        "tokenizer.model is missing",
    ),
    (
        "model_config.json: not JSON",
        lambda m: (m / "model_config.json").write_text("{not json"),
        "model_config.json is damaged, not JSON",
    ),
    (
        "model_config.json: missing",
        lambda m: (m / "model_config.json").unlink(),
        "model_config.json is missing",
    ),
    (
        "model_config.json: a list",
        lambda m: (m / "model_config.json").write_text("[1, 2]"),
        "holds a JSON list",
    ),
    (
        "model_config.json: an unknown key",
        lambda m: edit_json(m / "model_config.json", layers=6),
        "unknown setting(s) ['layers']",
    ),
    (
        "model_config.json: a wrong type",
        lambda m: edit_json(m / "model_config.json", d_model="32"),
        "d_model must be int, got '32'",
    ),
    (
        "model_config.json: a size missing",
        lambda m: edit_json(m / "model_config.json", src_vocab_size=DROP),
        "setting 'src_vocab_size' is missing",
    ),
    (
        "model_config.json: an odd d_model",
        lambda m: edit_json(m / "model_config.json", d_model=33),
        "d_model=33",
    ),
    (
        "train_config.json: not UTF-8",
        lambda m: (m / "train_config.json").write_bytes(b'{"name": "\xff"}'),
        "train_config.json is damaged",
    ),
    (
        "train_config.json: lr_factor = -1",
        lambda m: edit_json(m / "train_config.json", optim__lr_factor=-1.0),
        "optim.lr_factor=-1.0 must be a finite number in (0, 10000]",
    ),
    (
        "tokenizer.model missing",
        lambda m: (m / "tokenizer.model").unlink(),
        "tokenizer.model is missing: a model with one shared vocabulary needs tokenizer.model",
    ),
    (
        "tokenizer.model missing beside src_/tgt_tokenizer.model",
        lambda m: (
            [
                shutil.copy(m / "tokenizer.model", m / f"{side}_tokenizer.model")
                for side in ("src", "tgt")
            ]
            and (m / "tokenizer.model").unlink()
        ),
        "needs tokenizer.model",
    ),
    (
        "tokenizer.model not sentencepiece",
        lambda m: (m / "tokenizer.model").write_bytes(b"\x00\x01junk"),
        "is not a sentencepiece model",
    ),
    (
        "tokenizer.model of another vocabulary",
        lambda m: shutil.copy(
            ROOT / "models" / "tatoeba-en-zh" / "src_tokenizer.model",
            m / "tokenizer.model",
        ),
        "has 2000 pieces, but model_config.json gives the source vocabulary 1000",
    ),
    (
        "no weights at all",
        lambda m: (m / "model.safetensors").unlink(),
        "no checkpoint found at",
    ),
]


def saved_config(model: Path, text: str) -> None:
    """The model config that model.safetensors carries in its metadata, replaced by `text`."""
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), framework="pt") as f:
        metadata = {**f.metadata(), "model_config": text}
    save_file(
        load_file(str(model / "model.safetensors")),
        str(model / "model.safetensors"),
        metadata=metadata,
    )


def fifo(path: Path) -> Path:
    """`path` replaced by a named pipe that nobody writes to: a reader that opens it waits forever."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def link(path: Path, target: str) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to(target)
    return path


def folder(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.mkdir(parents=True)
    return path


def sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk space (zeros, never written)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def point_latest(text: bytes | str):
    def damage(run: Path) -> None:
        p = run / "checkpoints" / "latest"
        p.write_bytes(text.encode() if isinstance(text, str) else text)

    return damage


def latest_through_a_link(run: Path) -> None:
    outside = run.parent / "elsewhere"
    shutil.copytree(latest(run), outside)
    (run / "checkpoints" / "elsewhere").symlink_to(outside, target_is_directory=True)
    (run / "checkpoints" / "latest").write_text("elsewhere")


def flip_a_bit_of_a_weight(m: Path) -> None:
    """The lowest bit of one float32 of the weights: a model that loads, and translates a little otherwise."""
    w = m / "model.safetensors"
    data = bytearray(w.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")
    at = len(data) - 100 - (len(data) - 100 - start) % 4
    data[at] ^= 1
    w.write_bytes(bytes(data))


def change_a_tokenizer_piece(m: Path) -> None:
    """One letter of one piece of the vocabulary: a tokenizer that loads, and cuts words otherwise."""
    t = m / "tokenizer.model"
    data = bytearray(t.read_bytes())
    at = re.search(rb"\xe2\x96\x81[a-z]{3,}", bytes(data[1000:])).end() + 999
    data[at] = 0x7F
    t.write_bytes(bytes(data))


MODEL_CASES += [  # tenth trial: an integer of thousands of digits (Python's 4,300-digit limit)
    (  # the fourteenth: json keeps the last of two without a word
        "decoding.json with a setting given twice",
        lambda m: (m / "decoding.json").write_text('{"beam_size": 4, "beam_size": 1}'),
        "the key 'beam_size' is given twice",
    ),
    (
        "decoding.json with a beam of 5,000 digits",
        lambda m: (m / "decoding.json").write_text('{"beam_size": ' + "9" * 5000 + "}"),
        "decoding.json",
    ),
    (
        "model_config.json with a number of 5,000 digits, SHA256SUMS rewritten",
        lambda m: (
            (m / "model_config.json").write_text(
                (m / "model_config.json")
                .read_text()
                .replace("{", '{"x": ' + "9" * 5000 + ", ", 1)
            ),
            write_digests(m, DIGESTED),
        ),
        "model_config.json",
    ),
]


MODEL_CASES += [  # third trial: what loads, damaged, without any other check seeing it
    (
        "one bit of the weights flipped",
        flip_a_bit_of_a_weight,
        "model.safetensors is damaged: its SHA-256 is not the one written into "
        "SHA256SUMS when it was saved",
    ),
    (
        "one letter of the tokenizer changed",
        change_a_tokenizer_piece,
        "tokenizer.model is damaged: its SHA-256 is not the one",
    ),
    (
        "SHA256SUMS missing",
        lambda m: (m / "SHA256SUMS").unlink(),
        "SHA256SUMS is missing: ",
    ),
    (
        "SHA256SUMS not digests",
        lambda m: (m / "SHA256SUMS").write_text("hello  model.safetensors\n"),
        "SHA256SUMS is damaged (not lines of a SHA-256 and a file name)",
    ),
    (  # the weights' metadata still says format 2: editing the JSON cannot undo it
        "format edited to 1 and SHA256SUMS deleted",
        lambda m: (
            edit_json(m / "model_config.json", format=1),
            (m / "SHA256SUMS").unlink(),
        ),
        "SHA256SUMS is missing: the folder was saved with the digests",
    ),
    (
        "SHA256SUMS empty",
        lambda m: (m / "SHA256SUMS").write_text(""),
        "SHA256SUMS has no line for model.safetensors",
    ),
    (
        "SHA256SUMS lists only the weights, and a tokenizer is changed",
        lambda m: (
            (m / "SHA256SUMS").write_text(
                (m / "SHA256SUMS").read_text().split("\n")[0]
            ),
            change_a_tokenizer_piece(m),
        ),
        "SHA256SUMS has no line for tokenizer.model",
    ),
    (
        "train_config.json: the languages swapped",
        lambda m: edit_json(
            m / "train_config.json", data__src_lang="en", data__tgt_lang="de"
        ),
        "train_config.json says the model translates en -> de, but its weights were "
        "saved to translate ['de', 'en']",
    ),
    (
        "train_config.json: a d_model that model_config.json contradicts",
        lambda m: edit_json(m / "train_config.json", model__d_model=64),
        "train_config.json describes another model than the weights: its [model] says "
        "d_model=64",
    ),
]


def listed_too(name: str, text: str):
    """A file `name` holding `text`, written into the folder and listed in its SHA256SUMS."""

    def damage(m: Path) -> None:
        (m / name).write_text(text)
        write_digests(m, DIGESTED + TRAINING_STATE + (name,))

    return damage


MODEL_CASES += [  # fifth trial: SHA256SUMS read as `sha256sum -c` reads it
    (
        "SHA256SUMS: a wrong line before the right one",
        lambda m: (m / "SHA256SUMS").write_text(
            f"{'0' * 64}  model.safetensors\n" + (m / "SHA256SUMS").read_text()
        ),
        "model.safetensors is damaged: its SHA-256 is not the one",
    ),
    (
        "SHA256SUMS: a line for a file that is missing",
        lambda m: (
            listed_too("notes.txt", "mine")(m),
            (m / "notes.txt").unlink(),
        ),
        "notes.txt is missing, but SHA256SUMS lists it",
    ),
    (
        "SHA256SUMS: decoding.json listed, then deleted",
        lambda m: (
            listed_too("decoding.json", '{"beam_size": 2}')(m),
            (m / "decoding.json").unlink(),
        ),
        "decoding.json is missing, but SHA256SUMS lists it",
    ),
    (
        "SHA256SUMS: decoding.json listed, then edited",
        lambda m: (
            listed_too("decoding.json", '{"beam_size": 2}')(m),
            (m / "decoding.json").write_text('{"beam_size": 3}'),
        ),
        "decoding.json is damaged: its SHA-256 is not the one",
    ),
    (
        'model_config.json: "format": "2", a string',
        lambda m: edit_json(m / "model_config.json", format="2"),
        'says "format": "2", but the format must be an integer (1 to 2)',
    ),
]

RUN_CASES = [  # damage done to a copy of the whole run folder
    (
        "latest points up and out",
        point_latest("../../../../etc"),
        "not the name of a checkpoint folder beside it",
    ),
    (
        "latest holds an absolute path",
        point_latest("/etc"),
        "not the name of a checkpoint folder",
    ),
    (
        "latest is empty",
        point_latest(""),
        "holds '', not the name of a checkpoint folder",
    ),
    (
        "latest is not text",
        point_latest(b"\xff\xfe\0\0"),
        "not the name of a checkpoint folder",
    ),
    (
        "latest leads out through a link",
        latest_through_a_link,
        "elsewhere is a symbolic link (to ",
    ),
    (
        "latest names a checkpoint that is gone",
        point_latest("step-99999999\n"),
        "names step-99999999, but",
    ),
    (
        "latest is a named pipe",
        lambda run: fifo(run / "checkpoints" / "latest"),
        "no checkpoint found at",
    ),
    (
        "latest names a symlink loop",
        lambda run: (
            link(run / "checkpoints" / "loop", str(run / "checkpoints" / "loop"))
            and point_latest("loop")(run)
        ),
        "holds 'loop', not the name of a checkpoint folder",
    ),
    (
        "latest is 100 MB",
        lambda run: sparse(run / "checkpoints" / "latest", 100 << 20),
        "more than the 4,096",
    ),
]


def damaged(tiny_run: Path, work: Path, case: str):
    """A damaged copy (a checkpoint folder or a run folder) and the phrase its message must hold."""
    for name, damage, phrase in MODEL_CASES:
        if name == case:
            target = work / "model"
            shutil.copytree(latest(tiny_run), target)
            damage(target)
            return target, phrase
    for name, damage, phrase in RUN_CASES:
        if name == case:
            target = work / "run"
            shutil.copytree(tiny_run, target, symlinks=True)
            damage(target)
            return target, phrase
    raise KeyError(case)


@pytest.mark.parametrize("case", [c[0] for c in MODEL_CASES + RUN_CASES])
def test_a_damaged_model_is_refused_by_the_loaders_and_by_translate_in_one_line(
    case, tiny_run, tmp_path, monkeypatch, capsys
):
    model, phrase = damaged(tiny_run, tmp_path, case)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path, tiny_run)
    for load in (load_checkpoint, load_translator):
        with pytest.raises(CheckpointError) as info:
            load(model)
        assert phrase in str(info.value) and "\n" not in str(info.value), str(
            info.value
        )
    assert_one_line_error(
        *run_main(["translate", "--model", model, SENTENCE], None, capsys, monkeypatch),
        phrase,
    )
    assert listing(tmp_path, tiny_run) == before


def test_weights_in_any_floating_point_type_load_and_translate(tiny_run, tmp_path):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        model = tmp_path / str(dtype)
        shutil.copytree(latest(tiny_run), model)
        edit_weights(
            model / "model.safetensors",
            lambda t: {k: v.to(dtype) for k, v in t.items()},
        )
        ckpt = load_checkpoint(model)
        assert next(ckpt.model.parameters()).dtype == torch.float32


def test_sha256sum_s_own_forms_of_a_line_are_read_and_still_checked(tiny_run, tmp_path):
    """`sha256sum -c` takes "./name", "*name" (binary mode) and upper-case digests: so
    does the loader, and a file whose digest is wrong in that form is still refused."""
    model = tmp_path / "model"
    shutil.copytree(latest(tiny_run), model)
    sums = model / "SHA256SUMS"
    lines = sums.read_text().splitlines()
    odd = [
        f"{d.upper()}  ./{n.strip()}" if i % 2 else f"{d} *{n.strip()}"
        for i, (d, n) in enumerate(line.split(" ", 1) for line in lines)
    ]
    sums.write_text("\r\n".join(odd) + "\r\n")
    load_checkpoint(model)
    flip_a_bit_of_a_weight(model)
    with pytest.raises(CheckpointError, match="model.safetensors is damaged"):
        load_checkpoint(model)


def test_the_shipped_weights_carry_their_format_and_languages(tmp_path):
    """Written into the weights at save, where editing model_config.json or
    train_config.json cannot reach them."""
    for name, languages in (
        ("multi30k-de-en", ["de", "en"]),
        ("tatoeba-en-zh", ["en", "zh"]),
    ):
        with safe_open(str(ROOT / "models" / name / "model.safetensors"), "pt") as f:
            metadata = f.metadata()
        assert metadata["format"] == "2"
        assert json.loads(metadata["languages"]) == languages


# ---------------------------------------------------------------- `translate` and `evaluate`: options and input


def decoding_json(text: str):
    def setup(work: Path, run: Path) -> list:
        shutil.copytree(latest(run), work / "model")
        (work / "model" / "decoding.json").write_text(text)
        return ["translate", "--model", work / "model", SENTENCE]

    return setup


def model_trained_on(**data):
    """A copy of the model whose train_config.json describes another corpus."""

    def setup(work: Path, run: Path) -> list:
        shutil.copytree(latest(run), work / "model")
        edit_json(
            work / "model" / "train_config.json",
            **{f"data__{k}": v for k, v in data.items()},
        )
        return [
            "evaluate",
            "--model",
            work / "model",
            "--split",
            "val",
            "--out-dir",
            work / "eval",
        ]

    return setup


def empty_data_dir(work: Path, run: Path) -> list:
    (work / "empty").mkdir()
    return model_trained_on(data_dir=str(work / "empty"), download=False)(work, run)


def damaged_data_dir(work: Path, run: Path) -> list:
    folder = work / "data" / "multi30k"
    folder.mkdir(parents=True)
    for name in ("val.de.gz", "val.en.gz"):
        shutil.copy(ROOT / "data" / "multi30k" / name, folder / name)
    (folder / "val.de.gz").write_bytes((folder / "val.de.gz").read_bytes()[:500])
    return model_trained_on(data_dir=str(work / "data"), download=False)(work, run)


def out_dir_is_a_file(work: Path, run: Path) -> list:
    (work / "eval").write_text("a file")
    return [
        "evaluate",
        "--model",
        run,
        "--split",
        "val",
        "--limit",
        "3",
        "--out-dir",
        work / "eval",
    ]


def run_model(*argv):
    """A command on the intact model: `{model}` in argv stands for it."""
    return lambda work, run: [run if a == "{model}" else a for a in argv]


COMMAND_CASES = [  # (id, setup(work, run) -> argv, standard input, phrase)
    (
        "translate --alpha nan",
        run_model("translate", "--model", "{model}", "--alpha", "nan", SENTENCE),
        None,
        "alpha=nan: the length penalty's exponent must be a number from 0 to 10",
    ),
    (
        "translate --alpha inf",
        run_model("translate", "--model", "{model}", "--alpha", "inf", SENTENCE),
        None,
        "alpha=inf:",
    ),
    (
        "translate --alpha -0.5",
        run_model("translate", "--model", "{model}", "--alpha", "-0.5", SENTENCE),
        None,
        "alpha=-0.5:",
    ),
    (
        "translate --beam 0",
        run_model("translate", "--model", "{model}", "--beam", "0", SENTENCE),
        None,
        "beam_size=0: give an integer from 1",
    ),
    (
        "translate --batch-size -3",
        run_model("translate", "--model", "{model}", "--batch-size", "-3", SENTENCE),
        None,
        "batch_size=-3 must be an integer >= 1",
    ),
    (
        "translate --max-len 0",
        run_model("translate", "--model", "{model}", "--max-len", "0", SENTENCE),
        None,
        "--max-len must be at least 1",
    ),
    (
        "translate --device tpu",
        run_model("translate", "--model", "{model}", "--device", "tpu", SENTENCE),
        None,
        "device='tpu' is not a device name",
    ),
    (
        "translate --device cuda:99",
        run_model("translate", "--model", "{model}", "--device", "cuda:99", SENTENCE),
        None,
        "device='cuda:99'",
    ),
    (
        "translate --model that does not exist",
        run_model("translate", "--model", "no/such/model", SENTENCE),
        None,
        "no model at no/such/model",
    ),
    (
        "translate --model that is a file",
        lambda w, r: ["translate", "--model", TINY, SENTENCE],
        None,
        "no checkpoint found at",
    ),
    (
        "decoding.json not JSON",
        decoding_json("{beam"),
        None,
        "decoding.json is damaged, not JSON",
    ),
    (
        "decoding.json beam 0",
        decoding_json('{"beam_size": 0, "alpha": 0.6}'),
        None,
        'decoding.json must hold {"beam_size": an integer from 1 to the target vocabulary',
    ),
    (
        "decoding.json a list, not an object",
        decoding_json("[4, 1.0]"),
        None,
        'decoding.json must hold {"beam_size": an integer from 1 to the target '
        'vocabulary\'s 1000, "alpha": a number from 0 to 10}, got [4, 1.0]: fix it',
    ),
    (
        "decoding.json a beam of true",
        decoding_json('{"beam_size": true}'),
        None,
        'its "beam_size" is true: fix it',
    ),
    (
        "decoding.json a misspelt setting",
        decoding_json('{"beam_size": 4, "aplha": 1.0}'),
        None,
        "decoding.json holds 'aplha', which is not a decoding setting (those are "
        "beam_size, alpha): fix it, or delete it",
    ),
    (
        "decoding.json beam 1e9",
        decoding_json('{"beam_size": 1e9, "alpha": 0.6}'),
        None,
        'its "beam_size" is 1000000000.0: fix it',
    ),
    (
        "decoding.json beam 1000000000",
        decoding_json('{"beam_size": 1000000000, "alpha": 0.6}'),
        None,
        'an integer from 1 to the target vocabulary\'s 1000, "alpha": a number from 0 '
        'to 10}; its "beam_size" is 1000000000: fix it',
    ),
    (
        "decoding.json a named pipe",
        lambda w, r: (
            decoding_json("{}")(w, r)
            and fifo(w / "model" / "decoding.json")
            and ["translate", "--model", w / "model", SENTENCE]
        ),
        None,
        "decoding.json is a named pipe",
    ),
    (
        "translate --beam 100000000",
        run_model("translate", "--model", "{model}", "--beam", "100000000", SENTENCE),
        None,
        "beam_size=100000000: give an integer from 1",
    ),
    (
        "translate --beam 99999999999999999999",
        run_model(
            "translate",
            "--model",
            "{model}",
            "--beam",
            "99999999999999999999",
            SENTENCE,
        ),
        None,
        "beam_size=99999999999999999999",
    ),
    (
        "translate, standard input closed",
        run_model("translate", "--model", "{model}"),
        CLOSED,
        "standard input is closed",
    ),
    (
        "translate, standard input of 3 MB of zero bytes",
        run_model("translate", "--model", "{model}"),
        b"\0" * (3 << 20),
        "standard input holds a NUL byte on line 1",
    ),
    (
        "translate --model ~nosuchuser/x",
        run_model("translate", "--model", "~nosuchuser/x", SENTENCE),
        None,
        "no model at ~nosuchuser/x",
    ),
    (
        "translate --model of 300 characters",
        run_model("translate", "--model", "a" * 300, SENTENCE),
        None,
        "File name too long",
    ),
    (
        "translate --model ''",
        run_model("translate", "--model", "", SENTENCE),
        None,
        "model='': give a shipped",
    ),
    (
        "translate --device meta",
        run_model("translate", "--model", "{model}", "--device", "meta", SENTENCE),
        None,
        "device='meta': the course runs on cpu, cuda, cuda:N or mps",
    ),
    (
        "translate --device cpu:1",
        run_model("translate", "--model", "{model}", "--device", "cpu:1", SENTENCE),
        None,
        "device='cpu:1': the course runs on",
    ),
    (
        "translate --device xpu",
        run_model("translate", "--model", "{model}", "--device", "xpu", SENTENCE),
        None,
        "device='xpu'",
    ),
    (
        "translate --alpha 1000",
        run_model("translate", "--model", "{model}", "--alpha", "1000", SENTENCE),
        None,
        "alpha=1000.0: the length penalty's exponent must be a number from 0 to 10.0",
    ),
    (
        "decoding.json alpha 1000",
        decoding_json('{"beam_size": 4, "alpha": 1000}'),
        None,
        'its "alpha" is 1000: fix it',
    ),
    (
        "decoding.json nested 30,000 deep",
        decoding_json("[" * 30_000 + "]" * 30_000),
        None,
        "decoding.json is damaged, not JSON",
    ),
    (
        "evaluate where <split>.json is a folder",
        lambda w, r: (
            folder(w / "ev" / "val.json")
            and [
                "evaluate",
                "--model",
                r,
                "--split",
                "val",
                "--limit",
                "3",
                "--out-dir",
                w / "ev",
            ]
        ),
        None,
        "val.json exists and is not a file",
    ),
    (
        "export-onnx --out .",
        run_model("export-onnx", "--model", "{model}", "--out", ".", "--replace"),
        None,
        "names no new folder",
    ),
    (
        "export-onnx --out the model's own folder",
        lambda w, r: [
            "export-onnx",
            "--model",
            latest(r),
            "--out",
            latest(r),
            "--replace",
        ],
        None,
        "holds the current folder or the model it would export",
    ),
    (  # the seventeenth trial: a later resume's pruning deleted it
        "export-onnx --out a step folder in a run's checkpoints/",
        lambda w, r: [
            "export-onnx",
            "--model",
            latest(r),
            "--out",
            r / "checkpoints" / "step-99999999",
        ],
        None,
        "lies in a checkpoints/ folder, which a training run writes and prunes",
    ),
    (
        "export-onnx --out ''",
        run_model("export-onnx", "--model", "{model}", "--out", ""),
        None,
        "--out is empty",
    ),
    (
        "export-onnx --out a file",
        lambda w, r: (
            (w / "f").write_text("x")
            and ["export-onnx", "--model", r, "--out", w / "f"]
        ),
        None,
        "is a file, not a folder",
    ),
    (
        "export-onnx --out a folder of the user's files",
        lambda w, r: (
            folder(w / "mine")
            and (w / "mine" / "source.model").write_text("mine")
            and ["export-onnx", "--model", r, "--out", w / "mine"]
        ),
        None,
        "already holds files: export into a new or empty folder, or pass --replace",
    ),
    (
        "export-onnx --out inside a file",
        lambda w, r: (
            (w / "afile").write_text("x")
            and ["export-onnx", "--model", r, "--out", w / "afile" / "x"]
        ),
        None,
        "afile is a file, not a folder, so",
    ),
    (
        "export-onnx --out a symbolic link to an empty folder",
        lambda w, r: (
            folder(w / "target")
            and ((w / "link").symlink_to("target") or True)
            and ["export-onnx", "--model", r, "--out", w / "link"]
        ),
        None,
        "link is a symbolic link (to target): give the folder it points to",
    ),
    (
        "export-onnx --out where no folder can be made (/proc)",
        run_model("export-onnx", "--model", "{model}", "--out", "/proc/x"),
        None,
        "cannot write into /proc, where /proc/x would be made (No such file or "
        "directory): export into a folder you can write to",
    ),
    (
        "decoding.json alpha NaN",
        decoding_json('{"beam_size": 4, "alpha": NaN}'),
        None,
        "decoding.json must hold",
    ),
    (
        "standard input: Latin-1",
        run_model("translate", "--model", "{model}"),
        "Männer\n".encode("latin-1"),
        "standard input is not UTF-8: byte 0xe4 at offset 1",
    ),
    (
        "standard input: invalid UTF-8 after good lines",
        run_model("translate", "--model", "{model}"),
        b"Ein Hund.\nZwei\xc3(\n",
        "byte 0xc3 at offset 14",
    ),
    (
        "standard input with old Mac line endings (\\r alone)",
        run_model("translate", "--model", "{model}"),
        b"Ein Hund.\rZwei Katzen.\rDrei.\r",
        "standard input has old Mac line endings",
    ),
    (
        "standard input: a NUL byte",
        run_model("translate", "--model", "{model}"),
        b"Ein Hund.\nEin\0Kind.\n",
        "standard input holds a NUL byte on line 2",
    ),
    (
        "standard input: UTF-16",
        run_model("translate", "--model", "{model}"),
        "Ein Hund.\n".encode("utf-16-le"),
        "binary data or UTF-16",
    ),
    (
        "an argument that is not UTF-8",
        run_model("translate", "--model", "{model}", "M\udce4nner"),
        None,
        "argument 1 is not UTF-8",
    ),
    (
        "an argument with a NUL",
        run_model("translate", "--model", "{model}", SENTENCE, "a\0b"),
        None,
        "argument 2 holds a NUL byte",
    ),
    (
        "evaluate --limit -995",
        run_model(
            "evaluate", "--model", "{model}", "--split", "val", "--limit", "-995"
        ),
        None,
        "--limit must be >= 0",
    ),
    (
        "evaluate --alpha nan",
        run_model("evaluate", "--model", "{model}", "--split", "val", "--alpha", "nan"),
        None,
        "alpha=nan: the length penalty's exponent",
    ),
    (
        "evaluate --beam -1",
        run_model("evaluate", "--model", "{model}", "--split", "val", "--beam", "-1"),
        None,
        "beam_size=-1: give an integer from 1",
    ),
    (
        "evaluate an unknown split",
        run_model("evaluate", "--model", "{model}", "--split", "test_2099"),
        None,
        "unknown split 'test_2099' for Multi30k",
    ),
    ("evaluate into a file", out_dir_is_a_file, None, "is a file, not a folder"),
    (
        "evaluate --out-dir ~nosuchuser/x (made a folder called ~nosuchuser here)",
        run_model(
            "evaluate",
            "--model",
            "{model}",
            "--split",
            "val",
            "--out-dir",
            "~nosuchuser/x",
        ),
        None,
        "out_dir=~nosuchuser/x: ~nosuchuser names no home folder here",
    ),
    (
        "evaluate --out-dir with a newline (it split the last line in two)",
        run_model(
            "evaluate", "--model", "{model}", "--split", "val", "--out-dir", "a\nb"
        ),
        None,
        "holds the control character '\\n'",
    ),
    (
        "evaluate into a symbolic link to nothing",
        lambda w, r: (
            link(w / "dangling", str(w / "nothing"))
            and run_model("evaluate", "--model", "{model}", "--split", "val")(w, r)
            + ["--out-dir", w / "dangling"]
        ),
        None,
        "dangling is a symbolic link to",
    ),
    (
        "evaluate into /proc/self",
        run_model(
            "evaluate",
            "--model",
            "{model}",
            "--split",
            "val",
            "--out-dir",
            "/proc/self",
        ),
        None,
        "out_dir=/proc/self cannot be written: give a folder you can write",
    ),
    (
        "evaluate into a folder whose name is too long",
        lambda w, r: (
            run_model("evaluate", "--model", "{model}", "--split", "val")(w, r)
            + ["--out-dir", w / ("x" * 300) / "y"]
        ),
        None,
        "cannot be used (File name too long): give a folder you can write",
    ),
    (
        "evaluate: the corpus files are missing",
        empty_data_dir,
        None,
        "multi30k/val.de.gz is not in",
    ),
    (
        "evaluate: a corpus file is damaged",
        damaged_data_dir,
        None,
        "val.de.gz is damaged",
    ),
    (
        "evaluate a model of a corpus without splits",
        model_trained_on(
            corpus="parallel", train_files=["a", "b"], valid_files=["c", "d"]
        ),
        None,
        "has no named splits",
    ),
    (
        "evaluate a model that does not exist",
        run_model("evaluate", "--model", "nothing/here", "--split", "val"),
        None,
        "no model at nothing/here",
    ),
]


@pytest.mark.parametrize("case", [c[0] for c in COMMAND_CASES])
def test_a_bad_option_or_input_of_translate_and_evaluate_is_one_line_and_exit_2(
    case, tiny_run, tmp_path, monkeypatch, capsys
):
    _, setup, stdin, phrase = next(c for c in COMMAND_CASES if c[0] == case)
    argv = setup(tmp_path, tiny_run)
    monkeypatch.chdir(
        tmp_path
    )  # `evaluate` writes to ./evaluation/<model> by default: it must not
    before = listing(tmp_path, tiny_run)
    assert_one_line_error(*run_main(argv, stdin, capsys, monkeypatch), phrase)
    assert listing(tmp_path, tiny_run) == before


def test_device_cpu_0_is_the_cpu(tiny_run, monkeypatch, capsys):
    """`--device cpu:0` was a SafetensorError traceback: it names the one CPU."""
    on = {}
    for device in ("cpu", "cpu:0"):
        argv = ["translate", "--model", tiny_run, "--device", device, SENTENCE]
        status, out, err = run_main(argv, None, capsys, monkeypatch)
        assert status == 0 and err == "", err
        on[device] = out
    assert on["cpu:0"] == on["cpu"] and on["cpu"].count("\n") == 1
    assert load_checkpoint(tiny_run, device="cpu:0").path == latest(tiny_run)


@pytest.mark.parametrize(
    "stdin, lines",
    [
        (
            (" ".join(["Hund"] * 2800) + "\nEin Kind.\n").encode(),
            2,
        ),  # a 2,800-token line: cut, with one warning
        (
            "Ein\x1b[31m Hund\x07 läuft.\n\x0c\n\tZwei Katzen.\n".encode(),
            3,
        ),  # control characters are unknown pieces
        (
            "\ufeffEin Hund.\r\n\r\nEin Kind.\r\n".encode(),
            3,
        ),  # a BOM and Windows line ends
        (
            "Ein\u2028Satz\x1cmit Trennern.\n".encode(),
            1,
        ),  # characters str.splitlines() would split at
    ],
)
def test_odd_but_valid_standard_input_gives_one_output_line_per_input_line(
    stdin, lines, tiny_run, monkeypatch, capsys
):
    status, out, err = run_main(
        ["translate", "--model", tiny_run, "--beam", "1"], stdin, capsys, monkeypatch
    )
    assert status == 0, err
    assert len(out.split("\n")) == lines + 1 and out.endswith("\n"), out
    assert err == "" or (
        err.count("\n") == 1 and err.startswith("warning: line 1 has ")
    ), err


# ---------------------------------------------------------------- `train`: config files, corpora, run folders


def config_case(**changes):
    def setup(work: Path, run: Path) -> list:
        return [
            "train",
            "--config",
            write_config(work / "bad.toml", tiny_config(work, **changes)),
        ]

    return setup


def config_text(data: bytes):
    def setup(work: Path, run: Path) -> list:
        (work / "bad.toml").write_bytes(data)
        return ["train", "--config", work / "bad.toml"]

    return setup


def with_args(*args, **changes):
    def setup(work: Path, run: Path) -> list:
        return config_case(**changes)(work, run) + list(args)

    return setup


def parallel_corpus(train_src: bytes, train_tgt: bytes, **changes):
    """A config of a `parallel` corpus in work/corpus (the validation files are the training files)."""

    def setup(work: Path, run: Path) -> list:
        corpus = work / "corpus"
        corpus.mkdir()
        (corpus / "train.de").write_bytes(train_src)
        (corpus / "train.en").write_bytes(train_tgt)
        files = [str(corpus / "train.de"), str(corpus / "train.en")]
        return config_case(
            data__corpus="parallel",
            data__train_files=files,
            data__valid_files=files,
            **changes,
        )(work, run)

    return setup


def existing_run(*args, **changes):
    def setup(work: Path, run: Path) -> list:
        shutil.copytree(run, work / "out")
        return config_case(**changes)(work, run) + list(args)

    return setup


def existing_run_with_pointer(text: str):
    def setup(work: Path, run: Path) -> list:
        argv = existing_run()(work, run)
        (work / "out" / "checkpoints" / "latest").write_text(text)
        return argv

    return setup


def resumed_with_state(change, digests: bool = True):
    """A copy of the run whose every checkpoint's training_state.json is changed (the JSON still parses), then
    --resume: nothing older is intact to fall back to. `digests`: SHA256SUMS is written again, as by someone
    who edits with care, so that the checks of the state itself are what speak."""

    def setup(work: Path, run: Path) -> list:
        argv = existing_run("--resume")(work, run)
        for state in (work / "out" / "checkpoints").glob("step-*/training_state.json"):
            state.write_text(json.dumps(change(json.loads(state.read_text()))))
            if digests:
                write_digests(state.parent, DIGESTED + TRAINING_STATE)
        return argv

    return setup


def resumed_with_tensors(change, digests: bool = True):
    """As `resumed_with_state`, for training_state.safetensors: `change(tensors, tree)` edits its tensors, `tree`
    being training_state.json's structure (which names them)."""

    def setup(work: Path, run: Path) -> list:
        argv = existing_run("--resume")(work, run)
        for ckpt in (work / "out" / "checkpoints").glob("step-*"):
            tensors = load_file(str(ckpt / "training_state.safetensors"))
            change(tensors, json.loads((ckpt / "training_state.json").read_text()))
            save_file(tensors, str(ckpt / "training_state.safetensors"))
            if digests:
                write_digests(ckpt, DIGESTED + TRAINING_STATE)
        return argv

    return setup


def adam_moment(tree: dict, name: str) -> str:
    """The safetensors name of the first parameter's Adam moment `name` in a training_state.json tree."""
    first = tree["optimizer"]["state"]["__items__"][0][1]
    return first[name]["__tensor__"]


def negative_second_moments(tensors: dict, tree: dict) -> None:
    key = adam_moment(tree, "exp_avg_sq")
    tensors[key] = -tensors[key] - 1e-3


def flip_a_byte(tensors: dict, tree: dict) -> None:
    """One byte of Adam's first moments flipped: the file is whole and its numbers finite."""
    key = adam_moment(tree, "exp_avg")
    tensors[key] = tensors[key].clone()
    tensors[key].view(torch.uint8)[0] ^= 1


GERMAN = "".join(f"Ein Hund {i} läuft.\n" for i in range(20)).encode()
ENGLISH = "".join(f"A dog {i} runs.\n" for i in range(20)).encode()

TRAIN_CASES = [  # (id, setup(work, run) -> argv, phrase)
    (
        "config file missing",
        lambda w, r: ["train", "--config", w / "nothing.toml"],
        "nothing.toml' does not exist",
    ),
    (
        "config file is a folder",
        lambda w, r: ["train", "--config", w],
        "is a folder, not a regular file",
    ),
    (
        "config file is a named pipe",
        lambda w, r: ["train", "--config", fifo(w / "pipe.toml")],
        "is a named pipe",
    ),
    (
        "config file is /dev/zero",
        lambda w, r: ["train", "--config", "/dev/zero"],
        "is a character device",
    ),
    (
        "config file of a gigabyte",
        lambda w, r: ["train", "--config", sparse(w / "huge.toml", 1 << 30)],
        "1,073,741,824 bytes, more than the 16,777,216",
    ),
    ("config not TOML", config_text(b"name = 'x'\n[data"), "is not valid TOML"),
    (
        "config not UTF-8",
        config_text("name = 'Männer'\n".encode("latin-1")),
        "is not UTF-8: byte 0xe4",
    ),
    (
        "config a misspelt key",
        config_case(optim__lr=0.1),
        "unknown setting(s) ['lr'] in [optim]",
    ),
    (
        "config a wrong type",
        config_case(optim__epochs="ten"),
        "optim.epochs must be int, got 'ten'",
    ),
    (
        "lr_factor = -1.0",
        config_case(optim__lr_factor=-1.0),
        "optim.lr_factor=-1.0 must be a finite number in (0, 10000]",
    ),
    ("lr_factor = 0", config_case(optim__lr_factor=0.0), "optim.lr_factor=0.0"),
    ("lr_factor = nan", config_case(optim__lr_factor=math.nan), "optim.lr_factor=nan"),
    (
        "betas outside [0, 1)",
        config_case(optim__betas=[0.9, 1.0]),
        "optim.betas[1]=1.0 must be a finite number in [0, 1)",
    ),
    (
        "eps = 0",
        config_case(optim__eps=0.0),
        "optim.eps=0.0 must be a finite number in [1e-30, 1]",
    ),
    (
        "weight_decay < 0",
        config_case(optim__weight_decay=-0.1),
        "optim.weight_decay=-0.1",
    ),
    (
        "clip_grad_norm = inf",
        config_case(optim__clip_grad_norm=math.inf),
        "optim.clip_grad_norm=inf",
    ),
    (
        "label_smoothing = nan",
        config_case(optim__label_smoothing=math.nan),
        "optim.label_smoothing=nan",
    ),
    (
        "max_tokens below max_len",
        config_case(optim__max_tokens=10),
        "optim.max_tokens=10 must be at least",
    ),
    ("epochs = 0", config_case(optim__epochs=0), "optim.epochs=0 must be at least 1"),
    ("warmup_steps = 0", config_case(optim__warmup_steps=0), "optim.warmup_steps=0"),
    ("an odd d_model", config_case(model__d_model=33), "model.d_model=33"),
    (
        "d_model not divisible by the heads",
        config_case(model__num_heads=3),
        "divisible by num_heads=3",
    ),
    (
        "dropout = 1.5",
        config_case(model__dropout=1.5),
        "model.dropout=1.5 must be a finite number in [0, 1)",
    ),
    (
        "max_train_pairs < 0",
        config_case(data__max_train_pairs=-5),
        "data.max_train_pairs",
    ),
    (
        "an unknown Multi30k split",
        config_case(data__train_split="dev"),
        "data.train_split='dev'",
    ),
    (
        "data_dir that is not a folder (/dev/null)",
        config_case(data__data_dir="/dev/null"),
        "data_dir=/dev/null is not a folder",
    ),
    (
        "multi30k from French",
        config_case(data__src_lang="fr"),
        "data.corpus='multi30k' holds 'de' and 'en': set src_lang and tgt_lang to them",
    ),
    (
        "train_files beside corpus = 'multi30k' (ignored: it trained on Multi30k)",
        config_case(data__train_files=["a", "b"]),
        "data.train_files and valid_files are read only for corpus = 'parallel' or "
        "'tsv', not 'multi30k': remove them, or change corpus",
    ),
    (
        "tatoeba from German",
        config_case(data__corpus="tatoeba"),
        "data.corpus='tatoeba' holds 'en' and 'zh': set src_lang and tgt_lang to them",
    ),
    (
        "one language on both sides",
        config_case(data__tgt_lang="de"),
        "a translation needs two languages",
    ),
    ("out_dir empty", config_case(out_dir=""), "out_dir is empty"),
    ("seed < 0", config_case(seed=-1), "seed=-1"),
    ("--max-steps -1", with_args("--max-steps", "-1"), "optim.max_steps=-1"),
    ("--device tpu", with_args("--device", "tpu"), "device='tpu' is not a device name"),
    (
        "--out-dir a file",
        lambda w, r: (
            (w / "file").write_text("x") and with_args("--out-dir", w / "file")(w, r)
        ),
        "is a file, not a folder",
    ),
    (
        "out_dir holds a run",
        existing_run(),
        "already holds a run (step-00000026): pass --resume",
    ),
    ("--resume with nothing to resume", with_args("--resume"), "nothing to resume"),
    (
        "--resume with another d_model",
        existing_run("--resume", model__d_model=64),
        "contradicts the checkpoint it would resume: model.d_model: checkpoint has 32, config has 64",
    ),
    (
        "a run folder whose latest points out",
        existing_run_with_pointer("../../../../etc"),
        "already holds a run (checkpoints, tokenizer, metrics.csv): pass --resume",
    ),
    (
        "parallel corpus files missing",
        config_case(
            data__corpus="parallel",
            data__train_files=["x.de", "x.en"],
            data__valid_files=["x.de", "x.en"],
        ),
        "data file x.de does not exist",
    ),
    (
        "parallel corpus not aligned",
        parallel_corpus(GERMAN, ENGLISH[: len(ENGLISH) // 2]),
        "aligned line by line",
    ),
    (
        "parallel corpus not UTF-8",
        parallel_corpus("Männer\n".encode("latin-1") + GERMAN, b"Men\n" + ENGLISH),
        "train.de, line 1: byte 0xe4 is not valid UTF-8",
    ),
    (
        "a vocabulary too large for the corpus",
        parallel_corpus(GERMAN, ENGLISH, data__vocab_size=5000),
        "the run's tokenizer cannot be trained",
    ),
    (
        "the corpus is missing",
        config_case(data__data_dir="nowhere", data__download=False),
        "multi30k/train.de.gz is not in",
    ),
    ("d_model = 2**30 (terabytes)", config_case(model__d_model=2**30), "needs about"),
    (
        "d_ff = 2,000,000,000 (4 TB)",
        config_case(model__d_ff=2_000_000_000),
        "needs about 4,160.0 GB",
    ),
    (
        "model max_len = 2**31 - 1",
        config_case(model__max_len=2**31 - 1),
        "lower model.d_model, model.d_ff",
    ),
    (
        "a million encoder layers",
        config_case(model__num_encoder_layers=10**6),
        "needs about",
    ),
    (
        "rotary positions with d_head = 1",
        config_case(model__positions="rotary", model__num_heads=32),
        "rotary positions rotate pairs of dimensions",
    ),
    (
        "lr_factor = 1e300",
        config_case(optim__lr_factor=1e300),
        "optim.lr_factor=1e+300 must be a finite number in (0, 10000]",
    ),
    (
        "weight_decay = 1e300",
        config_case(optim__weight_decay=1e300),
        "optim.weight_decay=1e+300 must be a finite number in [0, 10000]",
    ),
    ("eps = 5e-324", config_case(optim__eps=5e-324), "in [1e-30, 1]"),
    (
        "data.max_len = 2 drops every pair",
        config_case(data__max_len=2),
        "no training pair is left",
    ),
    (
        "the same, in an out_dir that was there: its tokenizer/ goes again",
        lambda w, r: folder(w / "out") and config_case(data__max_len=2)(w, r),
        "no training pair is left",
    ),
    (
        "a vocabulary smaller than the characters",
        config_case(data__vocab_size=5),
        "raise data.vocab_size",
    ),
    (
        "a config nested 100,000 deep",
        config_text(b"a = " + b"[" * 100_000 + b"]" * 100_000),
        "nests its arrays or tables too deeply",
    ),
    (
        "data_dir = ~nosuchuser/d",
        config_case(data__data_dir="~nosuchuser/d", data__download=False),
        "is not in",
    ),
    (
        "--out-dir of 300 characters",
        with_args("--out-dir", "c" * 300),
        "File name too long",
    ),
    (
        "--device meta",
        with_args("--device", "meta"),
        "device='meta': the course runs on",
    ),
    (
        "out_dir holds a run whose latest is gone",
        existing_run_with_pointer("step-99999999"),
        "already holds a run",
    ),
    (
        "out_dir holds a run without pointers",
        lambda w, r: (
            existing_run()(w, r)
            and [(w / "out" / "checkpoints" / p).unlink() for p in ("latest", "best")]
            and config_case()(w, r)
        ),
        "already holds a run (checkpoints, tokenizer, metrics.csv)",
    ),
    (
        "out_dir is a folder of the user's files",
        lambda w, r: (
            folder(w / "mine")
            and (w / "mine" / "notes.txt").write_text("mine")
            and with_args("--out-dir", w / "mine")(w, r)
        ),
        "holds files that are not a run's (notes.txt)",
    ),
    (
        "out_dir with a NUL byte",
        config_case(out_dir="runs/a\0b"),
        "a path holds no NUL byte and is not empty",
    ),
    (
        "tsv train_files ['']",
        config_case(data__corpus="tsv", data__train_files=[""], data__valid_files=[""]),
        "data.train_files[0]=''",
    ),
    (
        "a target vocabulary too small",
        config_case(
            data__shared_vocab=False,
            model__share_embeddings=False,
            data__tgt_vocab_size=5,
        ),
        "raise data.tgt_vocab_size",
    ),
    (
        "out_dir a link to nothing",
        lambda w, r: (
            link(w / "dangling", str(w / "nothing"))
            and with_args("--out-dir", w / "dangling")(w, r)
        ),
        "nothing, which does not exist: remove it, or give another folder",
    ),
    (
        "out_dir in /proc",
        config_case(out_dir="/proc/foo"),
        "out_dir=/proc/foo cannot be made: no folder can be created in /proc; give a "
        "folder you can write",
    ),
    (
        "out_dir/checkpoints is a file",
        lambda w, r: (
            folder(w / "out")
            and (w / "out" / "checkpoints").write_text("x")
            and config_case()(w, r)
        ),
        "checkpoints should be a folder of the run",
    ),
    (
        "out_dir holds the user's own metrics.csv (a new run overwrote it)",
        lambda w, r: (
            folder(w / "out")
            and (w / "out" / "metrics.csv").write_text("my experiment,score\nA,1\n")
            and config_case()(w, r)
        ),
        "holds files that are not a run's (metrics.csv, not a run's table)",
    ),
    (
        "out_dir holds checkpoints/step-notes, a file of the user's (the same circle)",
        lambda w, r: (
            folder(w / "out" / "checkpoints")
            and (w / "out" / "checkpoints" / "step-notes").write_text("mine")
            and config_case()(w, r)
        ),
        "holds files that are not a run's (checkpoints/step-notes)",
    ),
    (
        "out_dir holds only checkpoints/readme.txt (the advice went round in a circle)",
        lambda w, r: (
            folder(w / "out" / "checkpoints")
            and (w / "out" / "checkpoints" / "readme.txt").write_text("mine")
            and config_case()(w, r)
        ),
        "holds files that are not a run's (checkpoints/readme.txt)",
    ),
    (
        "a config whose seed has 5,000 digits",
        config_text(b"seed = " + b"9" * 5000 + b"\n"),
        "is not valid TOML: Exceeds the limit",
    ),
    (
        "out_dir = ~nosuchuser/run (made a folder called ~nosuchuser here)",
        config_case(out_dir="~nosuchuser/run"),
        "out_dir=~nosuchuser/run: ~nosuchuser names no home folder here",
    ),
    (
        "--out-dir with a newline (it split the done: line in two)",
        with_args("--out-dir", "runs/a\nb"),
        "out_dir='runs/a\\nb' holds the control character '\\n'",
    ),
    (
        "--resume, checkpoints/best is a folder (found at the start, not an epoch later)",
        lambda w, r: [
            existing_run("--resume")(w, r),
            folder(w / "out" / "checkpoints" / "best"),
        ][0],
        "checkpoints/best should be the file that names a checkpoint folder",
    ),
    (
        "out_dir/metrics.csv is a folder",
        lambda w, r: (
            folder(w / "out")
            and folder(w / "out" / "metrics.csv")
            and config_case()(w, r)
        ),
        "metrics.csv should be a file of the run",
    ),
    (
        "--resume, training_state.json is {}",
        resumed_with_state(lambda s: {}),
        "training_state.json is damaged",
    ),
    (
        "--resume, world_size is text",
        resumed_with_state(lambda s: {**s, "world_size": "1"}),
        "training_state.json is damaged (world_size missing or of the wrong type)",
    ),
    (
        "--resume, rng is empty",
        resumed_with_state(lambda s: {**s, "rng": []}),
        "does not fit this model's optimiser",
    ),
    (
        "--resume, an optimiser of another shape",
        resumed_with_state(lambda s: {**s, "optimizer": {}}),
        "does not fit this model's optimiser",
    ),
    (
        "--resume, a tensor name that is not there",
        resumed_with_state(
            lambda s: json.loads(json.dumps(s).replace('"t0"', '"t999"'))
        ),
        "training_state.json is damaged (KeyError",
    ),
    (
        "--resume, the data's fingerprint is a list",
        resumed_with_state(lambda s: {**s, "data": [1]}),
        "training_state.json is damaged (data missing or of the wrong type)",
    ),
    (
        "--resume, the data's fingerprint without its digest",
        resumed_with_state(lambda s: {**s, "data": {"train_pairs": 400}}),
        "training_state.json is damaged (data missing or of the wrong type)",
    ),
]


def test_there_are_at_least_thirty_bad_inputs():
    assert (
        len(MODEL_CASES) + len(RUN_CASES) + len(COMMAND_CASES) + len(TRAIN_CASES) >= 30
    )


# ---------------------------------------------------------------- a real bug keeps its traceback


def test_a_bug_inside_translation_is_not_turned_into_bad_input(
    tiny_run, monkeypatch, capsys
):
    def bug(*args, **kwargs):
        raise ValueError(
            "shapes (2, 3) and (4, 5) cannot be multiplied"
        )  # stands for a bug deep in the model

    monkeypatch.setattr(commands, "translate", bug)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        run_main(
            ["translate", "--model", tiny_run, SENTENCE], None, capsys, monkeypatch
        )


def test_a_bug_inside_a_training_run_is_not_turned_into_bad_input(
    tmp_path, monkeypatch, capsys, course_data
):
    def bug(*args, **kwargs):
        raise ValueError("a bug in the training step")

    monkeypatch.setattr(train_module, "train_step", bug)
    config = write_config(tmp_path / "tiny.toml", tiny_config(tmp_path))
    with pytest.raises(ValueError, match="a bug in the training step"):
        run_main(
            ["train", "--config", config, "--no-progress"], None, capsys, monkeypatch
        )


def test_a_bug_while_loading_weights_is_not_turned_into_a_checkpoint_error(
    tiny_run, monkeypatch
):
    import transformer.engine.model_files as model_files

    def bug(*args, **kwargs):
        raise RuntimeError("a bug in the loader")

    monkeypatch.setattr(model_files, "load_model", bug)
    with pytest.raises(RuntimeError, match="a bug in the loader"):
        load_checkpoint(tiny_run)


# ---------------------------------------------------------------- where a command writes: checked first, ordinary modes


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into: read-only permissions, or, for root (whom permissions do not stop),
    a folder of the kernel's own read-only file system."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    candidate = Path("/sys/kernel")
    try:
        (candidate / "probe").mkdir()
    except OSError:
        return candidate
    pytest.skip("no folder here that root cannot write into")


def test_evaluate_into_a_folder_it_cannot_write_stops_before_translating_anything(
    tiny_run, tmp_path, monkeypatch, capsys
):
    folder = unwritable_folder(tmp_path)
    monkeypatch.setattr(
        "transformer.engine.evaluate.translate",
        lambda *a, **k: pytest.fail("translated before checking"),
    )
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path, tiny_run)
    for out in (folder, folder / "eval"):
        argv = ["evaluate", "--model", tiny_run, "--split", "val", "--out-dir", out]
        assert_one_line_error(
            *run_main(argv, None, capsys, monkeypatch), "give a folder you can write"
        )
    assert listing(tmp_path, tiny_run) == before


def test_export_onnx_replaces_a_folder_whole_only_when_asked_and_says_so_when_it_cannot_write(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """--replace replaces an earlier export whole, and never a folder of other files
    (the eleventh trial: it emptied a home folder, a run and the shipped models)."""
    pytest.importorskip("onnx")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "other.txt").write_text("the user's")
    replace = ["export-onnx", "--model", tiny_run, "--out", mine, "--replace"]
    assert_one_line_error(
        *run_main(replace, None, capsys, monkeypatch),
        "holds files that are not an export's (other.txt): --replace replaces only",
    )
    assert (mine / "other.txt").read_text() == "the user's"
    (mine / "other.txt").unlink()
    (mine / "translator.json").write_text("{}")  # an earlier export, damaged
    status, out, err = run_main(replace, None, capsys, monkeypatch)
    assert status == 0, err
    assert sorted(p.name for p in mine.iterdir()) == [
        "SHA256SUMS",
        "decoder.onnx",
        "encoder.onnx",
        "source.model",
        "target.model",
        "translator.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # nothing left beside
    folder = unwritable_folder(tmp_path)
    assert_one_line_error(
        *run_main(
            ["export-onnx", "--model", tiny_run, "--out", folder / "onnx"],
            None,
            capsys,
            monkeypatch,
        ),
        "export into a folder you can write to",
    )


def test_what_the_package_writes_gets_the_umask_s_permissions_not_private_ones(
    tiny_train_config, tiny_run, tmp_path, monkeypatch, capsys
):
    """Temporary files and folders are private (0600, 0700); renamed into place they keep that mode unless it is
    set: a checkpoint, metrics.csv, an export or an evaluation served by another user could not be read."""
    old = os.umask(0o022)
    try:
        from transformer.engine.trainer import train

        result = train(tiny_train_config(tmp_path, "run", optim__max_steps=3))
        assert (
            run_main(
                [
                    "evaluate",
                    "--model",
                    result.checkpoint,
                    "--split",
                    "val",
                    "--limit",
                    "2",
                    "--out-dir",
                    tmp_path / "eval",
                ],
                None,
                capsys,
                monkeypatch,
            )[0]
            == 0
        )
        if importlib.util.find_spec("onnx"):
            assert (
                run_main(
                    [
                        "export-onnx",
                        "--model",
                        result.checkpoint,
                        "--out",
                        tmp_path / "onnx",
                    ],
                    None,
                    capsys,
                    monkeypatch,
                )[0]
                == 0
            )
    finally:
        os.umask(old)
    modes = {
        str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777
        for p in tmp_path.rglob("*")
    }
    wrong = {
        p: oct(m)
        for p, m in modes.items()
        if m != (0o755 if (tmp_path / p).is_dir() else 0o644)
    }
    assert not wrong, wrong
    assert {"run/metrics.csv", "eval/val.hyp"} <= set(modes)


# ---------------------------------------------------------------- standard output that cannot take the translations


def cli_process(argv: list, **options) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", *map(str, argv)], env=env, **options
    )


def test_a_full_standard_output_is_one_error_line_not_a_traceback(tiny_run):
    with open("/dev/full", "w") as full:
        p = cli_process(
            ["translate", "--model", tiny_run, SENTENCE],
            stdout=full,
            stderr=subprocess.PIPE,
        )
        _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and err.decode() == (
        "error: cannot write to standard output: No space left on device\n"
    ), err.decode()


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(tiny_run):
    """`transformer translate < many | head -1`: the reader goes away before the translations are written."""
    p = cli_process(
        ["translate", "--model", tiny_run, "--beam", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before the first line
    _, err = p.communicate(
        ("".join(f"Ein Hund {i} läuft.\n" for i in range(500))).encode(), timeout=120
    )
    assert err == b"" and p.returncode == 141, (p.returncode, err.decode())


def test_with_standard_error_closed_a_warning_never_lands_in_the_translations(
    tiny_run,
):
    """`transformer translate < in > out 2>&-`, a line longer than the model reads: the
    warning about it has nowhere to go, and must not become a line of out."""
    p = cli_process(
        ["translate", "--model", tiny_run, "--beam", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.close(2),
    )
    out, _ = p.communicate(f"{'Ein Hund läuft. ' * 40}\n{SENTENCE}\n".encode(), 120)
    assert p.returncode == 0 and out.decode().count("\n") == 2, out.decode()
    assert "warning" not in out.decode(), out.decode()


def test_chinese_to_a_standard_output_that_is_not_utf8_is_written_in_utf8():
    """PYTHONIOENCODING=ascii (as a Windows redirect in cp1252, which has no Chinese
    either): the translations are written whole, in UTF-8, not cut by a
    UnicodeEncodeError."""
    model = ROOT / "models" / "tatoeba-en-zh"
    p = subprocess.run(
        [sys.executable, "-m", "transformer", "translate", "--model", model],
        input=b"A dog runs.\nI like tea.\n",
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "ascii"},
        timeout=120,
    )
    assert p.returncode == 0 and p.stderr == b"", p.stderr.decode()
    lines = p.stdout.decode("utf-8").split("\n")
    assert (
        len(lines) == 3
        and lines[2] == ""
        and all("\u4e00" <= c <= "\u9fff" for c in lines[0][:1] + lines[1][:1])
    ), lines


# ---------------------------------------------------------------- the Python API names the argument that is wrong


def api_cases(ckpt, onnx_dir: Path | None):
    from transformer import (
        OnnxTranslator,
        attention,
        beam_search,
        greedy_decode,
        tiled_attention,
        translate,
    )
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    from transformer.engine.model_config import ModelConfig
    from transformer.engine.evaluate import evaluate_checkpoint
    from transformer.engine.evaluate import evaluate_pairs

    src = torch.tensor([[5, 6, 7]])
    q = torch.randn(5)
    cases = [
        (
            "translate one string",
            lambda: translate(ckpt, SENTENCE),
            InputError,
            "sentences must be a list of strings, got str: for one sentence, pass [sentence]",
        ),
        (
            "translate [None]",
            lambda: translate(ckpt, [None]),
            InputError,
            "sentences[0] is NoneType, not a str",
        ),
        (
            "translate a set of sentences",
            lambda: translate(ckpt, {SENTENCE, "Ein Hund."}),
            InputError,
            "sentences is a set, whose order is arbitrary",
        ),
        (
            "translate with the model on the meta device",
            lambda: translate(
                dataclasses.replace(ckpt, model=copy.deepcopy(ckpt.model).to("meta")),
                [SENTENCE],
            ),
            InputError,
            "the model is on the meta device",
        ),
        (
            "translate beam_size=2.5",
            lambda: translate(ckpt, [SENTENCE], beam_size=2.5),
            InputError,
            "beam_size=2.5: give an integer from 1",
        ),
        (
            "translate beam_size=tensor(2)",
            lambda: translate(ckpt, [SENTENCE], beam_size=torch.tensor(2)),
            InputTypeError,
            "beam_size=tensor(2) is a torch.Tensor, not a number",
        ),
        (
            "beam_search beam_size=tensor(2)",
            lambda: beam_search(ckpt.model, src, beam_size=torch.tensor(2)),
            InputTypeError,
            "beam_size=tensor(2) is a torch.Tensor, not a number",
        ),
        (
            "translate beam_size=True",
            lambda: translate(ckpt, [SENTENCE], beam_size=True),
            InputError,
            "beam_size=True",
        ),
        (
            "translate alpha='1'",
            lambda: translate(ckpt, [SENTENCE], alpha="1"),
            InputError,
            "alpha='1'",
        ),
        (
            "translate batch_size=0.5",
            lambda: translate(ckpt, [SENTENCE], batch_size=0.5),
            InputError,
            "batch_size=0.5 must be an integer >= 1",
        ),
        (
            "translate max_len_a=nan",
            lambda: translate(ckpt, [SENTENCE], max_len_a=math.nan),
            InputError,
            "max_len_a=nan",
        ),
        (
            "translate without a model",
            lambda: translate(None, [SENTENCE]),
            InputError,
            "checkpoint must be a loaded model",
        ),
        (
            "a beam the machine cannot hold",
            lambda: beam_search(ckpt.model, src.repeat(10**6, 1), beam_size=1000),
            InputError,
            "needs about",
        ),
        (
            "greedy_decode, an id outside the vocabulary",
            lambda: greedy_decode(ckpt.model, torch.tensor([[5, 10**6]])),
            InputError,
            "src holds token id 1000000, outside the source vocabulary (ids 0 to 999)",
        ),
        (
            "greedy_decode, a negative id",
            lambda: greedy_decode(ckpt.model, torch.tensor([[-3, 5]])),
            InputError,
            "src holds token id -3",
        ),
        (
            "greedy_decode, one sentence without a batch",
            lambda: greedy_decode(ckpt.model, src[0]),
            InputError,
            "src must be a (B, S) tensor of token ids (int64), got shape (3,), dtype torch.int64: for one sentence",
        ),
        (
            "beam_search, float ids",
            lambda: beam_search(ckpt.model, src.float()),
            InputError,
            "dtype torch.float32",
        ),
        (
            "attention of 1-D tensors",
            lambda: attention(q, q, q),
            ValueError,
            "Q must be a tensor of at least two dimensions (..., rows, width), got shape (5,)",
        ),
        (
            "tiled_attention with a float mask",
            lambda: tiled_attention(q[None], q[None], q[None], mask=torch.ones(1, 1)),
            TypeError,
            "mask must be a boolean tensor (True = may attend), got dtype torch.float32",
        ),
    ]
    f32, f64 = torch.randn(2, 3, 4), torch.randn(2, 5, 4, dtype=torch.float64)
    cases += [
        (
            "translate a lone surrogate",
            lambda: translate(ckpt, ["Ein \udcff Hund."]),
            InputError,
            "sentences[0] is not valid Unicode",
        ),
        (
            "load_checkpoint(123)",
            lambda: load_checkpoint(123),
            InputError,
            "path=123: give a run's folder",
        ),
        (
            "load_checkpoint on cpu:1",
            lambda: load_checkpoint(ckpt.path, device="cpu:1"),
            InputError,
            "device='cpu:1': the course runs on cpu, cuda, cuda:N or mps",
        ),
        (
            "load_checkpoint on device 7",
            lambda: load_checkpoint(ckpt.path, device=7),
            InputError,
            "device=7",
        ),
        (
            "greedy_decode given the checkpoint",
            lambda: greedy_decode(ckpt, src),
            InputError,
            "model must be a Transformer, got Checkpoint: pass the checkpoint's .model",
        ),
        (
            "greedy_decode, a source longer than the model reads",
            lambda: greedy_decode(ckpt.model, src.repeat(1, 30)),
            InputError,
            "src has 90 positions, but the model reads at most max_len=64",
        ),
        (
            "attention, float32 Q with float64 K",
            lambda: attention(f32, f64, f64),
            TypeError,
            "Q, K and V must be floating-point tensors of one dtype, got torch.float32, torch.float64",
        ),
        (
            "attention of integers",
            lambda: attention(*(torch.ones(2, 3, 4, dtype=torch.long),) * 3),
            TypeError,
            "floating-point",
        ),
        (
            "attention, batch dimensions 2 and 3",
            lambda: attention(f32, torch.randn(3, 5, 4), torch.randn(3, 5, 4)),
            ValueError,
            "the batch dimensions of Q (2,), K (3,) and V (3,) do not broadcast",
        ),
        (
            "attention, D_k = 0",
            lambda: attention(
                torch.randn(2, 3, 0), torch.randn(2, 5, 0), torch.randn(2, 5, 4)
            ),
            ValueError,
            "D_k=0",
        ),
        (
            "tiled_attention, a (3, 7) mask for S = 5",
            lambda: tiled_attention(
                f32,
                f32[:, :1].expand(2, 5, 4),
                f32[:, :1].expand(2, 5, 4),
                mask=torch.ones(3, 7, dtype=torch.bool),
            ),
            ValueError,
            "mask of shape (3, 7) does not broadcast to the scores (..., T, S) = (2, 3, 5)",
        ),
        (
            "tiled_attention, block 2.5",
            lambda: tiled_attention(f32, f32, f32, block=2.5),
            ValueError,
            "block=2.5: a block is an integer number of keys",
        ),
        (
            "TrainConfig(seed='0')",
            lambda: TrainConfig(seed="0"),
            ConfigError,
            "seed must be int, got '0'",
        ),
        (
            "evaluate_pairs, a split that is a path",
            lambda: evaluate_pairs(ckpt, [(SENTENCE, "A dog.")], "../../x"),
            InputError,
            "split='../../x' names the files written",
        ),
        (
            "evaluate_pairs, no pairs",
            lambda: evaluate_pairs(ckpt, [], "x"),
            InputError,
            "pairs is empty",
        ),
        (
            "evaluate_pairs, a pair of one",
            lambda: evaluate_pairs(ckpt, [(SENTENCE,)], "x"),
            InputError,
            "pairs must be a list of (source, reference) pairs of strings",
        ),
        (
            "evaluate_pairs, a split name too long for a file name",
            lambda: evaluate_pairs(ckpt, [(SENTENCE, "A dog.")], "v" * 300),
            InputError,
            "split='vvvv",
        ),
        (
            "evaluate_pairs, pairs that are a number",
            lambda: evaluate_pairs(ckpt, 3, "x"),
            InputError,
            "pairs must be a list of (source, reference) pairs of strings",
        ),
        (
            "evaluate_checkpoint of a name",
            lambda: evaluate_checkpoint("multi30k-de-en", "val"),
            InputError,
            "checkpoint must be a loaded model",
        ),
        (
            "evaluate_checkpoint out_dir of bytes",
            lambda: evaluate_checkpoint(ckpt, "val", out_dir=b"x"),
            TypeError,
            "out_dir must be a folder's name, a str or a path-like object such as "
            "pathlib.Path, got bytes",
        ),
        (
            "evaluate_checkpoint out_dir=3",
            lambda: evaluate_checkpoint(ckpt, "val", out_dir=3),
            InputError,
            "out_dir must be a folder's name, a str or a path-like object such as "
            "pathlib.Path, got int",
        ),
        (
            "evaluate_checkpoint limit=2.5",
            lambda: evaluate_checkpoint(ckpt, "val", limit=2.5),
            InputError,
            "limit=2.5 must be an integer >= 0",
        ),
        (
            "load_checkpoint pointer='nosuch'",
            lambda: load_checkpoint(ckpt.path, pointer="nosuch"),
            InputError,
            "pointer='nosuch': a run's checkpoints are named by 'latest' or 'best'",
        ),
        (
            "TrainConfig(model=[])",
            lambda: TrainConfig(model=[]),
            ConfigError,
            "[model] must be a table of settings, got []",
        ),
        (
            "TrainConfig.from_json(None)",
            lambda: TrainConfig.from_json(None),
            ConfigError,
            "a config in JSON is text, got NoneType",
        ),
        (
            "TrainConfig.from_json, a 5,000-digit seed",
            lambda: TrainConfig.from_json('{"seed": ' + "9" * 5000 + "}"),
            ConfigError,
            "not valid JSON: ValueError: Exceeds the limit",
        ),
        (
            "ModelConfig(dropout=np.float32(0.1))",
            lambda: ModelConfig(30, 30, dropout=np.float32(0.1)),
            ConfigError,
            "dropout must be float, got np.float32(0.1) (a numpy value: pass a Python "
            "number, int(x) or float(x))",
        ),
        (
            "ModelConfig(d_model=np.int64(64))",
            lambda: ModelConfig(30, 30, d_model=np.int64(64)),
            ConfigError,
            "d_model must be int, got np.int64(64) (a numpy value",
        ),
        (
            "ModelConfig(dropout=Decimal('0.1'))",
            lambda: ModelConfig(30, 30, dropout=Decimal("0.1")),
            ConfigError,
            "dropout must be float, got Decimal('0.1')",
        ),
        (
            "ModelConfig(dropout=Fraction(1, 10))",
            lambda: ModelConfig(30, 30, dropout=Fraction(1, 10)),
            ConfigError,
            "dropout must be float, got Fraction(1, 10)",
        ),
        (
            "ModelConfig(dropout=a 0-d tensor)",
            lambda: ModelConfig(30, 30, dropout=torch.tensor(0.1)),
            ConfigError,
            "dropout must be float, got tensor(0.1000) (a torch value",
        ),
        (
            "TrainConfig.from_toml(None)",
            lambda: TrainConfig.from_toml(None),
            ConfigError,
            "a config file is a path, got NoneType",
        ),
        (  # it read "norm must be one of ['layer', 'rms'], got 'rms'"
            "ModelConfig(norm=an Enum of str)",
            lambda: ModelConfig(
                30, 30, norm=enum.Enum("Norm", {"RMS": "rms"}, type=str).RMS
            ),
            ConfigError,
            "(a Norm, a kind of str: pass a plain str, such as an Enum member's .value)",
        ),
        (
            "ModelConfig(norm=a str subclass)",
            lambda: ModelConfig(30, 30, norm=type("Name", (str,), {})("rms")),
            ConfigError,
            "norm must be one of ['layer', 'rms'], got 'rms' (a Name, a kind of str",
        ),
    ]
    if onnx_dir is not None:
        onnx = OnnxTranslator(onnx_dir)
        cases += [
            (
                "OnnxTranslator.translate one string",
                lambda: onnx.translate(SENTENCE),
                InputError,
                "sentences must be a list of strings",
            ),
            (
                "OnnxTranslator.translate batch_size=0",
                lambda: onnx.translate([SENTENCE], batch_size=0),
                InputError,
                "batch_size=0 must be an integer >= 1",
            ),
            (
                "OnnxTranslator.translate batch_size=-1",
                lambda: onnx.translate([SENTENCE], batch_size=-1),
                InputError,
                "batch_size=-1",
            ),
            (
                "OnnxTranslator threads='2'",
                lambda: OnnxTranslator(onnx_dir, threads="2"),
                InputError,
                "threads='2' must be an integer >= 0",
            ),
            (
                "OnnxTranslator threads=2.5",
                lambda: OnnxTranslator(onnx_dir, threads=2.5),
                InputError,
                "threads=2.5 must be an integer >= 0",
            ),
            (
                "OnnxTranslator threads=10**6",
                lambda: OnnxTranslator(onnx_dir, threads=10**6),
                InputError,
                f"threads=1000000 is more than the {len(os.sched_getaffinity(0))} CPUs "
                f"this process may use: give at most {len(os.sched_getaffinity(0))}",
            ),
            (
                "OnnxTranslator on a folder that is no export",
                lambda: OnnxTranslator(ckpt.path),
                InputError,
                "translator.json is missing: the folder is not a whole export",
            ),
        ]
    return cases


def test_each_bad_argument_of_the_python_api_raises_an_error_that_names_it(
    tiny_run, tmp_path
):
    ckpt = load_checkpoint(tiny_run)
    onnx_dir = None
    if importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxruntime"):
        from transformer import export_onnx

        onnx_dir = export_onnx(tiny_run, tmp_path / "onnx")
    cases = api_cases(ckpt, onnx_dir)
    assert len(cases) >= 15
    for name, call, kind, phrase in cases:
        with pytest.raises(kind) as info:
            call()
        assert phrase in str(info.value) and "\n" not in str(info.value), (
            name,
            str(info.value),
        )


def test_a_checkpoint_losing_its_files_while_it_is_read_says_to_try_again(
    tiny_run, tmp_path
):
    """A training run prunes its old checkpoints while another process loads one: a
    file of a run's step folder that is gone says to try again (it said to copy the
    folder again, as for a damaged copy)."""
    from transformer.errors import CheckpointError

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    step = latest(run)
    (step / "SHA256SUMS").unlink()
    with pytest.raises(CheckpointError, match="pruning its checkpoints, try again"):
        load_checkpoint(run)


def test_greedy_decoding_of_more_rows_than_the_memory_holds_is_one_line(
    tiny_run, monkeypatch
):
    """Greedy decoding holds per sentence what a beam of 1 holds (scores over the
    vocabulary, the decoder's keys and values): a batch too large for the memory is
    refused before the first step, as a beam is (it ran until the allocator failed)."""
    import transformer.memory as memory
    from transformer.decoding import greedy_decode

    ckpt = load_checkpoint(tiny_run)
    rows = 30_000  # about 0.6 GB of rows for the tiny model: over the floor
    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 100 << 20)
    with pytest.raises(InputError, match=f"greedy decoding over {rows} sentence"):
        greedy_decode(ckpt.model, torch.tensor([[5, 6, 7]]).expand(rows, 3))
    with pytest.raises(InputError, match=f"greedy decoding over {rows} sentence"):
        translate(ckpt, [SENTENCE] * rows, beam_size=1, batch_size=rows)
    assert translate(ckpt, [SENTENCE], beam_size=1)  # one row: under the floor


def test_odd_but_valid_api_arguments_translate_as_plain_ones_do(tiny_run):
    """NumPy numbers for the beam and the length penalty, a generator of sentences, and an output-length factor
    so large that a * S overflows int64 all translate exactly as the plain arguments do."""
    import numpy as np

    ckpt = load_checkpoint(tiny_run)
    plain = translate(ckpt, [SENTENCE, "Zwei Hunde spielen."], beam_size=4, alpha=0.6)
    assert (
        translate(
            ckpt,
            (s for s in [SENTENCE, "Zwei Hunde spielen."]),
            beam_size=np.int64(4),
            alpha=np.float32(0.6),
        )
        == plain
    )
    assert translate(
        ckpt, [SENTENCE, "Zwei Hunde spielen."], beam_size=4, alpha=0.6, max_len_a=1e19
    ) == translate(
        ckpt, [SENTENCE, "Zwei Hunde spielen."], beam_size=4, alpha=0.6, max_len_a=1e6
    )


def test_a_model_folder_whose_name_is_not_utf8_is_refused_for_its_name(
    tiny_run, tmp_path
):
    """safetensors reads only names that are UTF-8: the one line says that the name,
    not the file, is what is wrong (it said the weights were damaged)."""
    model = shutil.copytree(tiny_run, tmp_path / os.fsdecode(b"mdl_\xff"))
    p = cli_process(["translate", "--model", model, SENTENCE], stderr=subprocess.PIPE)
    err = p.communicate(timeout=120)[1].decode(errors="replace")
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "its name is not UTF-8, and safetensors reads only names that are" in err


def test_an_export_into_a_folder_whose_name_is_not_utf8_is_written_and_read(
    tiny_run, tmp_path
):
    """torch.onnx, onnx and onnxruntime take only names that are UTF-8: the export is
    made in memory and written by the package's own writers, and read as bytes."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from transformer import OnnxTranslator, export_onnx

    odd = export_onnx(tiny_run, tmp_path / os.fsdecode(b"onnx_\xff"))
    plain = export_onnx(tiny_run, tmp_path / "onnx")
    assert OnnxTranslator(odd).translate([SENTENCE]) == OnnxTranslator(plain).translate(
        [SENTENCE]
    )


def swap_graphs(encoder: Path) -> None:
    """Swap an export's two graphs and write its SHA256SUMS again."""
    decoder, spare = encoder.parent / "decoder.onnx", encoder.parent / "spare"
    encoder.rename(spare)
    decoder.rename(encoder)
    spare.rename(decoder)
    write_digests(encoder.parent, EXPORTED)


def test_damaged_onnx_exports_are_refused_by_name_and_never_read_endlessly(
    tiny_run, tmp_path
):
    pytest.importorskip("onnxruntime")
    from transformer import OnnxTranslator, export_onnx
    from transformer.engine.digests import write_digests
    from transformer.engine.onnx_export import EXPORTED

    good = export_onnx(tiny_run, tmp_path / "good")
    assert OnnxTranslator(good).translate(s for s in [SENTENCE]) == OnnxTranslator(
        good
    ).translate([SENTENCE])
    damages = [
        (
            "translator.json",
            lambda p: p.write_text("{}"),
            "is not an export of format 2",
        ),
        ("translator.json", fifo, "translator.json is a named pipe"),
        (
            "source.model",
            lambda p: link(p, "/dev/zero"),
            "source.model is a character device",
        ),
        (
            "encoder.onnx",
            lambda p: p.write_bytes(b"garbage"),
            "encoder.onnx is damaged: its SHA-256 is not the one",
        ),
        (  # garbage with its digest written, as no export writes it
            "encoder.onnx",
            lambda p: (p.write_bytes(b"garbage"), write_digests(p.parent, EXPORTED)),
            "encoder.onnx is not an ONNX graph",
        ),
        (
            "target.model",
            lambda p: (p.write_bytes(b"garbage"), write_digests(p.parent, EXPORTED)),
            "target.model is not a sentencepiece model",
        ),
        ("decoder.onnx", lambda p: p.unlink(), "decoder.onnx is missing"),
        (
            "encoder.onnx",
            lambda p: shutil.copyfile(p.with_name("decoder.onnx"), p),
            "encoder.onnx is damaged: its SHA-256 is not the one",
        ),
        (  # another vocabulary's tokenizer (as a swap of tatoeba's two is)
            "source.model",
            lambda p: shutil.copyfile(
                ROOT / "models" / "tatoeba-en-zh" / "tgt_tokenizer.model", p
            ),
            "source.model is damaged: its SHA-256",
        ),
        (
            "target.model",
            lambda p: p.write_bytes(b"garbage"),
            "target.model is damaged: its SHA-256 is not the one written into "
            "SHA256SUMS when it was saved (a copy gone wrong, a bit flipped on the "
            "disk); export again with `transformer export-onnx`",
        ),
        ("target.model", lambda p: p.write_bytes(b""), "target.model is damaged"),
        (
            "translator.json",
            lambda p: edit_json(p, max_len=100_000),
            "translator.json is damaged: its SHA-256",
        ),
        ("SHA256SUMS", lambda p: p.unlink(), "SHA256SUMS is missing: "),
        (
            "SHA256SUMS",
            lambda p: p.write_text(p.read_text().split("\n")[0] + "\n"),
            "SHA256SUMS has no line for decoder.onnx",
        ),
        (
            "translator.json",
            lambda p: edit_json(p, format=1),
            "is not an export of format 2 (its format: 1, missing []): export again",
        ),
        (
            "translator.json",
            lambda p: edit_json(p, max_len="128"),
            "holds settings no export writes",
        ),
        (
            "translator.json",
            lambda p: edit_json(p, bos_id=10**6),
            "holds settings no export writes",
        ),
        (
            "translator.json",
            lambda p: edit_json(p, max_len_a=math.nan),
            "holds settings no export writes",
        ),
        (  # as if its graphs were another export's, SHA256SUMS made again
            "translator.json",
            lambda p: edit_json(p, d_model=48) or write_digests(p.parent, EXPORTED),
            "do not fit together or its translator.json (encoder.onnx's memory "
            "has 32 along axis -1, translator.json's d_model is 48)",
        ),
        (
            "translator.json",
            lambda p: (
                edit_json(p, tgt_vocab_size=2000) or write_digests(p.parent, EXPORTED)
            ),
            "decoder.onnx's logits has 1000 along axis -1",
        ),
        (  # the two graphs swapped, SHA256SUMS made again: a ValueError of unpacking
            "encoder.onnx",
            swap_graphs,
            "encoder.onnx has 2 outputs, not 1",
        ),
        (  # the fourteenth trial: special ids other than the tokenizers' were taken
            "translator.json",
            lambda p: edit_json(p, eos_id=5) or write_digests(p.parent, EXPORTED),
            "translator.json's eos_id is 5, source.model's 3",
        ),
    ]
    for i, (name, damage, phrase) in enumerate(damages):
        copy = tmp_path / f"damaged-{i}"
        shutil.copytree(good, copy)
        damage(copy / name)
        with pytest.raises(InputError, match=re.escape(phrase)):
            OnnxTranslator(copy)


def test_the_onnx_translator_warns_once_of_a_sentence_it_cuts_as_translate_does(
    tiny_run, tmp_path
):
    pytest.importorskip("onnxruntime")
    from transformer import OnnxTranslator, export_onnx

    onnx = OnnxTranslator(export_onnx(tiny_run, tmp_path / "onnx"))
    long = " ".join(["Ein Hund läuft."] * 40)  # more than max_len=64 tokens
    with pytest.warns(UserWarning) as caught:
        out = onnx.translate([SENTENCE, long])
    assert len(caught) == 1 and "sentence 2 has" in str(caught[0].message)
    assert "the model reads at most 64: it was cut to its first 64" in str(
        caught[0].message
    )
    assert len(out) == 2


def test_a_line_of_megabytes_is_cut_before_it_is_tokenised_with_one_warning(
    tiny_run, monkeypatch, capsys
):
    """One 20 MB line took 1.27 GB to tokenise whole, to translate its first tokens:
    the text is cut first (the model reads max_len=64 tokens; no piece is longer than
    CHARS_PER_TOKEN characters), and the one warning says so, with the line's tokens
    estimated from the part tokenised."""
    from transformer.search_checks import CHARS_PER_TOKEN
    from transformer.tokenizer import Tokenizer

    seen = []
    real = Tokenizer.encode_batch
    monkeypatch.setattr(
        Tokenizer,
        "encode_batch",
        lambda self, texts: seen.extend(map(len, texts)) or real(self, texts),
    )
    line = ("Ein Hund läuft über die Wiese. " * 70_000).encode()  # 2.2 MB
    status, out, err = run_main(
        ["translate", "--model", tiny_run], line + b"\n", capsys, monkeypatch
    )
    assert status == 0 and out.count("\n") == 1, err
    assert max(seen) <= CHARS_PER_TOKEN * 65
    assert err.count("\n") == 1 and err.startswith("warning: line 1 has ")
    told = int(re.search(r"line 1 has (\d+) tokens", err).group(1))
    assert told > 100_000  # estimated for the whole line, not the part tokenised
    assert "the model reads at most 64, so only its first 64 were translated" in err


def test_an_export_killed_midway_leaves_nothing_the_next_export_does_not_remove(
    tiny_run, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("onnx")
    out = tmp_path / "onnx"
    kill = (
        "import os, signal, sys\n"
        "import transformer.engine.onnx_export as e\n"
        "real = e._export_graphs\n"
        "def killed(m, out):\n"
        "    real(m, out)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "e._export_graphs = killed\n"
        "from transformer.engine.cli import main\n"
        f"sys.exit(main(['export-onnx', '--model', {str(tiny_run)!r}, "
        f"'--out', {str(out)!r}]))\n"
    )
    p = subprocess.run([sys.executable, "-c", kill], capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    assert [q.name[:10] for q in tmp_path.iterdir()] == [".onnx.tmp-"]
    alive = tmp_path / f".onnx.tmp-{os.getpid()}-x"  # a live export's: kept
    alive.mkdir()
    status, _, err = run_main(
        ["export-onnx", "--model", tiny_run, "--out", out], None, capsys, monkeypatch
    )
    assert status == 0, err
    assert sorted(q.name for q in tmp_path.iterdir()) == [alive.name, "onnx"]


def test_standard_input_beyond_the_limit_is_refused_before_it_fills_the_memory(
    tiny_run, monkeypatch, capsys
):
    monkeypatch.setattr(command_input, "STDIN_LIMIT", 3 << 20)
    endless = (
        b"Ein Hund l\xc3\xa4uft.\n" * 400_000
    )  # 6.8 MB, no NUL: `yes "Ein Hund." | transformer translate`
    assert_one_line_error(
        *run_main(["translate", "--model", tiny_run], endless, capsys, monkeypatch),
        "standard input holds more than 3 MB: translate it in parts",
    )


def test_a_resume_whose_every_tokenizer_is_a_pipe_or_dev_zero_stops_without_waiting_or_reading(
    tiny_run, tmp_path
):
    """The checkpoint a resumed run reads its tokenizer from is checked like the rest of it: a named pipe would
    make the copy wait forever and /dev/zero would never end."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    for i, checkpoint in enumerate(sorted((run / "checkpoints").glob("step-*"))):
        fifo(checkpoint / "tokenizer.model") if i % 2 else link(
            checkpoint / "tokenizer.model", "/dev/zero"
        )
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path, out_dir=str(run)))
    p = cli_process(
        ["train", "--config", config, "--resume", "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "Traceback" not in err.decode(), err.decode()
    assert (
        err.decode().splitlines()[-1].startswith("error: no intact checkpoint under")
    ), err.decode()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="Linux's /proc")
@pytest.mark.parametrize(
    "delay, sent, status, line",
    [
        (0.0, signal.SIGINT, 130, "interrupted"),
        (0.5, signal.SIGINT, 130, "interrupted"),
        # it ended with 143 and no line (the twelfth trial)
        (0.5, signal.SIGTERM, 143, "terminated (SIGTERM)"),
    ],
)
def test_ctrl_c_while_the_command_is_still_importing_torch_is_one_line_and_130(
    delay, sent, status, line
):
    """A Ctrl-C (or SIGTERM) while torch is imported (its library mapped, `delay`
    seconds before) ends as one during the work does. (One within Python's own start,
    before any of the package runs, is the interpreter's to report.)"""
    p = cli_process(
        ["translate", SENTENCE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    maps = Path(f"/proc/{p.pid}/maps")
    end = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < end:
        with contextlib.suppress(OSError):
            if "libtorch" in maps.read_text():
                break
        time.sleep(0.005)
    time.sleep(delay)
    p.send_signal(sent)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (status, -sent), (p.returncode, err.decode())
    assert err.decode().strip() == line, err.decode()


@pytest.mark.parametrize(
    "number, fix",
    [
        (errno.EROFS, "the disk is read-only; choose a folder on a writable one"),
        (errno.EACCES, "no permission; choose another folder, or fix its permissions"),
        (errno.ENAMETOOLONG, "choose a shorter path (a name under 255 bytes)"),
    ],
)
def test_a_path_the_user_named_that_cannot_be_written_says_what_to_do(
    tmp_path, monkeypatch, capsys, number, fix
):
    out = tmp_path / "onnx"

    def refused(model, out_dir, replace=False):
        raise OSError(number, os.strerror(number), str(out_dir / "encoder.onnx"))

    monkeypatch.setattr(commands, "export_onnx", refused)
    assert_one_line_error(
        *run_main(
            ["export-onnx", "--model", "x", "--out", out], None, capsys, monkeypatch
        ),
        f"{out / 'encoder.onnx'}: {os.strerror(number)}: {fix}",
    )


SIGTERM_CASES = """
import os, signal, threading
from transformer.engine.signals import Terminated, sigterm_interrupts
heard = []
try:
    with sigterm_interrupts():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:  # the clean-up: a second SIGTERM must not cut it
            os.kill(os.getpid(), signal.SIGTERM)
            heard.append("cleaned up")
except Terminated:
    heard.append("terminated")
heard.append(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)  # restored
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a caller that ignores SIGTERM
with sigterm_interrupts():
    os.kill(os.getpid(), signal.SIGTERM)
heard.append(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)  # left as it was
signal.signal(signal.SIGTERM, signal.SIG_DFL)
def elsewhere():
    with sigterm_interrupts():  # not the main thread: nothing is set
        heard.append(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
thread = threading.Thread(target=elsewhere)
thread.start()
thread.join()
print(heard)
"""


def test_sigterm_is_heard_once_restored_after_and_left_alone_where_a_caller_chose():
    p = subprocess.run(
        [sys.executable, "-c", SIGTERM_CASES],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['cleaned up', 'terminated', True, True, True]"


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="Linux's /proc")
def test_sigterm_while_translate_waits_for_its_input_is_one_line_and_143(tiny_run):
    """SIGTERM raises where the work is, as Ctrl-C does (the training run's Ctrl-C test
    below shows that what a run saved is then resumed): one line, status 143."""
    p = cli_process(
        ["translate", "--model", tiny_run],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdin.write(SENTENCE.encode() + b"\n")
    p.stdin.flush()  # and no end: the command waits for more, in a read of the pipe
    wchan, end = Path(f"/proc/{p.pid}/wchan"), time.monotonic() + 120
    while p.poll() is None and time.monotonic() < end:
        with contextlib.suppress(OSError):
            if "pipe" in wchan.read_text():
                break
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and err.decode() == "terminated (SIGTERM)\n", err
    assert out == b""


def test_ctrl_c_during_training_ends_with_one_line_and_the_run_resumes(
    tmp_path, course_data
):
    data = tiny_config(tmp_path, optim__epochs=200)
    config = write_config(tmp_path / "c.toml", data)
    p = cli_process(
        ["train", "--config", config, "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # as in a terminal: a process inherits an ignored SIGINT, and a test worker
        # may ignore it (the run then never hears the Ctrl-C and the test times out)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    latest_pointer = Path(data["out_dir"]) / "checkpoints" / "latest"
    end = time.monotonic() + 120
    while not latest_pointer.exists() and time.monotonic() < end and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.decode().strip().splitlines()[-1] == (
        "interrupted; `--resume` continues from the last checkpoint, if one was written (if not, start again)"
    ), err.decode()
    assert "Traceback" not in err.decode()
    step = load_training_state(latest(Path(data["out_dir"])))["step"]
    resumed = cli_process(
        [
            "train",
            "--config",
            config,
            "--resume",
            "--max-steps",
            str(step + 1),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0 and f"done: step {step + 1}" in out.decode(), (
        err.decode()
    )


def test_a_run_killed_before_its_first_checkpoint_leaves_a_folder_a_new_run_can_start_in(
    tiny_train_config, tmp_path, course_data
):
    """SIGTERM or a power cut before the first checkpoint leaves tokenizer/ and metrics.csv and no checkpoint:
    --resume has nothing to resume, so a new run must be allowed to start over them."""
    from transformer.engine.trainer import train

    out = tmp_path / "run"
    (out / "tokenizer").mkdir(parents=True)
    (out / "tokenizer" / "tokenizer.model").write_bytes(b"half")
    (out / "metrics.csv").write_text("kind,step\nstep,1\n")
    result = train(tiny_train_config(tmp_path, "run", optim__max_steps=3))
    assert (
        result.step == 3
        and len([r for r in read_metrics(out) if r["kind"] == "step"]) == 3
    )


# ---------------------------------------------------------------- third trial: a run folder never gets stuck


def test_a_first_save_cut_short_leaves_a_folder_a_new_run_starts_over_in(
    tmp_path, monkeypatch, capsys, course_data
):
    """A kill during the first checkpoint save leaves a temporary folder (and maybe a pointer to nothing):
    `--resume` says "nothing to resume ... start without --resume", and that command then works."""
    config = write_config(
        tmp_path / "c.toml", tiny_config(tmp_path, optim__max_steps=2)
    )
    checkpoints = tmp_path / "out" / "checkpoints"
    (checkpoints / ".step-00000002.tmp-abc123").mkdir(parents=True)
    (checkpoints / ".step-00000002.tmp-abc123" / "model.safetensors").write_bytes(
        b"half"
    )
    (checkpoints / "latest").write_text("step-00000002")
    (tmp_path / "out" / "metrics.csv").write_text("kind,step\nstep,1\n")
    status, out, err = run_main(
        ["train", "--config", config, "--resume", "--no-progress"],
        None,
        capsys,
        monkeypatch,
    )
    assert_one_line_error(status, out, err, "nothing to resume")
    assert "start without --resume" in err
    status, out, err = run_main(
        ["train", "--config", config, "--no-progress"], None, capsys, monkeypatch
    )
    assert status == 0 and "done: step 2" in out, err
    assert "held no finished checkpoint" in err and "Traceback" not in err
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "best",
        "latest",
        "step-00000002",
    ]


def test_a_sigkill_during_the_first_checkpoint_save_leaves_a_folder_one_command_continues(
    tmp_path, course_data
):
    """A real SIGKILL in the middle of the first save (the weights written, the training state not): the command
    the refusal names (here a new run: nothing was saved) then trains to the end."""
    config = write_config(
        tmp_path / "c.toml", tiny_config(tmp_path, optim__max_steps=2)
    )
    kill = (
        "import os, signal, sys\n"
        "import transformer.engine.checkpoints as c\n"
        "c.save_training_state = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "from transformer.engine.cli import main\n"
        f"sys.exit(main(['train', '--config', {str(config)!r}, '--no-progress']))\n"
    )
    p = subprocess.run([sys.executable, "-c", kill], capture_output=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    assert [p.name[:15] for p in (tmp_path / "out" / "checkpoints").iterdir()] == [
        ".step-00000002."
    ]
    for argv in (["--resume"], []):
        p = cli_process(
            ["train", "--config", config, "--no-progress", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = p.communicate(timeout=120)
        if argv:
            assert p.returncode == 2 and "start without --resume" in err.decode(), (
                err.decode()
            )
        else:
            assert p.returncode == 0 and "done: step 2" in out.decode(), err.decode()


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, course_data) -> Path:
    """configs/tiny.toml trained without a stop: what every resumed run must equal."""
    from transformer.engine.trainer import train

    work = tmp_path_factory.mktemp("straight")
    train(TrainConfig.from_dict(tiny_config(work)))
    return work / "out"


def without_timings(run: Path) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")}
        for r in read_metrics(run)
    ]


def assert_same_run(run: Path, straight: Path) -> None:
    a, b = (load_file(str(latest(r) / "model.safetensors")) for r in (run, straight))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert without_timings(run) == without_timings(straight)


def test_damaged_rows_of_metrics_csv_are_named_and_the_resume_equals_a_straight_run(
    straight_run, tmp_path, monkeypatch, capsys
):
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    train = ["train", "--config", config, "--no-progress"]
    assert run_main(train + ["--max-steps", "5"], None, capsys, monkeypatch)[0] == 0
    # what the interrupted run (or a full disk) left after step 5: garbage, a step that is not a
    # number, NUL bytes, and last a row cut short
    with open(tmp_path / "out" / "metrics.csv", "ab") as f:
        f.write(
            b"garbage,that,is,not,a,row\nstep,x,1,,,,,,,,,,,\n\0\0\0\0\n"
            + b"step,7,"
            + b"9" * 200_000
            + b"\n"  # over csv's field limit: csv.Error
            + b"step,6,1,4.21"
        )
    status, out, err = run_main(train + ["--resume"], None, capsys, monkeypatch)
    assert status == 0, err
    assert (
        err.count("metrics.csv: line 8 and 4 more damaged") == 1
        and "Traceback" not in err
    ), err
    assert_same_run(tmp_path / "out", straight_run)


# ---------------------------------------------------------------- third trial: a full disk is one line


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "the-file-being-written")


def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_the_resume_equals_a_straight_run(
    straight_run, tmp_path, monkeypatch, capsys
):
    import transformer.engine.checkpoints as checkpoints

    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    train = ["train", "--config", config, "--no-progress"]
    assert run_main(train + ["--max-steps", "3"], None, capsys, monkeypatch)[0] == 0
    saved = listing(tmp_path / "out" / "checkpoints")
    with monkeypatch.context() as m:
        m.setattr(checkpoints, "save_training_state", disk_full)
        status, out, err = run_main(train + ["--resume"], None, capsys, monkeypatch)
    assert_one_line_error(
        status,
        out,
        err,
        "is full (No space left on device) while writing the-file-being-written: the "
        "checkpoints written before are intact; free some space (or move out_dir), then "
        "run the same command with --resume",
    )
    assert listing(tmp_path / "out" / "checkpoints") == saved
    assert run_main(train + ["--resume"], None, capsys, monkeypatch)[0] == 0
    assert_same_run(tmp_path / "out", straight_run)


FULL_DISK_CASES = [  # (id, what fills the disk, command, phrase)
    (
        "the tokenizer at the start",
        "transformer.tokenizer.atomic_write_bytes",
        "train",
        "no checkpoint was written yet, and what the run made is removed; free some "
        "space (or set another out_dir), then start the run again without --resume",
    ),
    (
        "a row of metrics.csv",
        "transformer.engine.metrics.MetricsLog.log",
        "train",
        "then start the run again without --resume",
    ),
    (
        "evaluate's translations",
        "transformer.engine.evaluate.atomic_files",
        "evaluate",
        "no file there was changed (each is written whole or not at all); free some "
        "space, or give --out-dir on another disk, then run the same command again",
    ),
    (
        "export-onnx's graphs",
        "transformer.engine.onnx_export.atomic_write_bytes",
        "export-onnx",
        "(an export is written whole or not at all); free some space, then export again",
    ),
]


@pytest.mark.parametrize("case", [c[0] for c in FULL_DISK_CASES])
def test_a_full_disk_is_one_line_that_says_what_is_safe_and_what_to_run(
    case, tiny_run, tmp_path, monkeypatch, capsys
):
    _, target, command, phrase = next(c for c in FULL_DISK_CASES if c[0] == case)
    monkeypatch.setattr(target, disk_full)
    monkeypatch.chdir(tmp_path)
    if command == "train":
        config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
        argv = ["train", "--config", config, "--no-progress"]
    elif command == "export-onnx":
        pytest.importorskip("onnx")
        argv = ["export-onnx", "--model", tiny_run, "--out", tmp_path / "onnx"]
    else:
        argv = ["evaluate", "--model", tiny_run, "--split", "val", "--limit", "2"]
        argv += ["--out-dir", tmp_path / "eval"]
    before = listing(tmp_path, tiny_run)
    assert_one_line_error(*run_main(argv, None, capsys, monkeypatch), phrase)
    after = listing(tmp_path, tiny_run)
    assert {k: v for k, v in after.items() if "/eval" not in k} == before


# ---------------------------------------------------------------- third trial: nothing written outside out_dir


def linked_into_out(name: str):
    """out/<name> a link to a folder of the user's, which holds a file of that kind."""

    def setup(work: Path, run: Path) -> list:
        mine = work / "my-files"
        mine.mkdir()
        (mine / "tokenizer.model").write_bytes(b"the user's own tokenizer")
        (work / "out").mkdir()
        (work / "out" / name).symlink_to(mine, target_is_directory=True)
        return config_case()(work, run)

    return setup


TRAIN_CASES += [
    (
        "out_dir/tokenizer a link",
        linked_into_out("tokenizer"),
        "tokenizer is a link to",
    ),
    (
        "out_dir/checkpoints a link",
        linked_into_out("checkpoints"),
        "a run writes only inside its out_dir",
    ),
]


def test_an_out_dir_under_the_home_folder_is_written_there_and_reported_so(
    tmp_path, monkeypatch, capsys, course_data
):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    config = tiny_config(tmp_path, optim__max_steps=1)
    config["out_dir"] = "~/x"
    path = write_config(tmp_path / "c.toml", config)
    status, out, err = run_main(
        ["train", "--config", path, "--no-progress"], None, capsys, monkeypatch
    )
    assert status == 0, err
    assert (
        not (tmp_path / "~").exists()
        and (tmp_path / "home" / "x" / "checkpoints").is_dir()
    )
    assert f"checkpoint {tmp_path / 'home' / 'x' / 'checkpoints'}" in out


def test_after_a_nan_the_command_the_message_names_works(
    tmp_path, monkeypatch, capsys, course_data
):
    from transformer.errors import NonFiniteLossError

    monkeypatch.chdir(tmp_path)
    config = write_config(
        tmp_path / "c.toml", tiny_config(tmp_path, optim__max_steps=1)
    )
    train = ["train", "--config", config, "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(
            train_module,
            "train_step",
            lambda *a, **k: (_ for _ in ()).throw(NonFiniteLossError("loss=nan")),
        )
        status, out, err = run_main(train, None, capsys, monkeypatch)
    assert (
        status == 3
        and err.startswith("error: training stopped at step 1")
        and "Traceback" not in err
    ), err
    command = re.search(r"start a new run with (--out-dir \S+)", err).group(1).split()
    status, out, err = run_main(train + command, None, capsys, monkeypatch)
    assert status == 0 and "done: step 1" in out, err


def test_train_given_something_not_a_config_names_what_it_was_given():
    from transformer.engine.trainer import train

    for given in ({"out_dir": "runs/x"}, "configs/tiny.toml", None):
        with pytest.raises(
            InputError,
            match=f"train\\(\\) was given a {type(given).__name__}, not a TrainConfig",
        ):
            train(given)


# ---------------------------------------------------------------- third trial: a resume on other data


def edit_a_pair(corpus: Path) -> None:
    lines = (corpus / "train.en").read_text().splitlines(keepends=True)
    lines[7] = "A cat 7 sleeps.\n"  # as many pairs as before, one of them other
    (corpus / "train.en").write_text("".join(lines))


def cut_the_corpus(corpus: Path) -> None:
    for name in (
        "train.de",
        "train.en",
    ):  # half the pairs: the epoch's batches are others
        lines = (corpus / name).read_bytes().splitlines(keepends=True)
        (corpus / name).write_bytes(b"".join(lines[: len(lines) // 2]))


@pytest.mark.parametrize(
    "change, phrase",
    [
        (edit_a_pair, "the run was trained on 20 training and 20 validation pairs"),
        (cut_the_corpus, "the config's corpus now gives 10 and 10"),
        (lambda corpus: None, None),  # the same data: the resume goes on
    ],
    ids=["a pair edited", "a shorter corpus mid-epoch", "unchanged"],
)
def test_a_resume_on_other_data_at_the_same_paths_is_refused_and_names_a_new_run(
    change, phrase, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    # 20 pairs in batches of about 4: the run stops mid-epoch, at step 2 of 5
    argv = parallel_corpus(
        GERMAN, ENGLISH, data__max_len=16, data__vocab_size=64, optim__max_tokens=40
    )(tmp_path, None)
    train = argv + ["--no-progress"]
    status, out, err = run_main(train + ["--max-steps", "2"], None, capsys, monkeypatch)
    assert status == 0, err
    change(tmp_path / "corpus")
    before = listing(tmp_path)
    status, out, err = run_main(train + ["--resume"], None, capsys, monkeypatch)
    if phrase is None:
        assert status == 0 and "done: step" in out, err
        return
    assert_one_line_error(status, out, err, phrase)
    assert "the data changed since " in err and "put the files back" in err, err
    assert listing(tmp_path) == before
    command = re.search(r"\((--out-dir \S+)\)$", err.strip()).group(1).split()
    status, out, err = run_main(
        train + ["--max-steps", "2"] + command, None, capsys, monkeypatch
    )
    assert status == 0 and "done: step 2" in out, err


# ---------------------------------------------------------------- third trial: memory, bounded before it is used


def gzip_of_nul_bytes(work: Path, run: Path) -> list:
    """train.de.gz: 200 MB of NUL bytes, packed into about 200 kB."""
    (work / "corpus").mkdir()
    with gzip.open(work / "corpus" / "train.de.gz", "wb", compresslevel=1) as f:
        for _ in range(200):
            f.write(bytes(1 << 20))
    (work / "corpus" / "train.en").write_bytes(ENGLISH)
    files = [str(work / "corpus" / n) for n in ("train.de.gz", "train.en")]
    return config_case(
        data__corpus="parallel", data__train_files=files, data__valid_files=files
    )(work, run)


TRAIN_CASES += [
    (
        "a gzip of 200 MB of NUL bytes",
        gzip_of_nul_bytes,
        "train.de.gz, line 1 holds a NUL byte: it is binary data or UTF-16",
    ),
    (
        "a corpus of more lines than the limit",
        parallel_corpus(b"a\n" * 10_000_001, b"b\n" * 10_000_001),
        "train.de holds more than 10,000,000 lines or 1,024 MB of text, more than a "
        "run reads into memory: take a part of it (head -n 1000000 FILE > part), or "
        "raise transformer.engine.corpus_text.MAX_CORPUS_LINES",
    ),
]


def test_a_corpus_whose_text_is_over_the_byte_limit_is_refused_before_it_is_read_whole(
    tmp_path, monkeypatch, capsys
):
    import transformer.engine.corpus_text as corpus_text

    monkeypatch.setattr(corpus_text, "MAX_CORPUS_BYTES", 8 << 20)
    argv = parallel_corpus(b"Ein Hund.\n" * (2 << 20), b"A dog.\n" * (2 << 20))(
        tmp_path, None
    )
    status, out, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(status, out, err, "train.de holds more than")
    assert "8 MB of text" in err


def test_a_model_max_len_of_twenty_million_is_refused_before_the_table_is_built(
    tmp_path, monkeypatch, capsys
):
    """The positional table alone is 20,000,000 x 32 float32s (2.56 GB), built in float64
    (about 16 bytes an entry at its peak): on a machine with 4 GB free, one line."""
    import transformer.memory as memory

    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 4 << 30)
    argv = config_case(model__max_len=20_000_000)(tmp_path, None)
    status, out, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(
        status, out, err, "needs about 10.2 GB, but cpu memory has 4.3 GB available"
    )


# ---------------------------------------------------------------- fifth trial: a run's training state, metrics.csv's
# header, a gzip named otherwise


def with_metrics_header(header: str):
    """A copy of the run, its metrics.csv's first line replaced by `header`, then --resume."""

    def setup(work: Path, run: Path) -> list:
        argv = existing_run("--resume")(work, run)
        metrics = work / "out" / "metrics.csv"
        lines = metrics.read_text().split("\n", 1)
        metrics.write_text(header + "\n" + lines[1])
        return argv

    return setup


TRAIN_CASES += [
    (
        "--resume, training-state format 7",
        resumed_with_state(lambda s: {**s, "format": 7}),
        "training_state.json is in format 7, and this copy of the package reads formats "
        "1 to 2: a newer one wrote it",
    ),
    (
        "--resume, training-state format '2'",
        resumed_with_state(lambda s: {**s, "format": "2"}),
        "training_state.json is damaged (format='2', which must be a whole number, at least 1)",
    ),
    (
        "--resume, step 10**12",
        resumed_with_state(lambda s: {**s, "step": 10**12}),
        "(step=1000000000000, but the schedule's state has taken 26 steps)",
    ),
    (
        "--resume, epoch 99",
        resumed_with_state(lambda s: {**s, "epoch": 99}),
        "(step=26, but epoch=99 and batch=0 at 13 batches an epoch make step 1287)",
    ),
    (
        "--resume, batch 10**6",
        resumed_with_state(lambda s: {**s, "batch": 10**6}),
        "(batch=1000000, but an epoch of this run has 13 batches)",
    ),
    (
        "--resume, elapsed_s NaN",
        resumed_with_state(lambda s: {**s, "elapsed_s": math.nan}),
        "(elapsed_s=nan must be a finite number >= 0)",
    ),
    (
        "--resume, elapsed_s negative",
        resumed_with_state(lambda s: {**s, "elapsed_s": -5.0}),
        "(elapsed_s=-5.0 must be a finite number >= 0)",
    ),
    (
        "--resume, Adam's second moments negative",
        resumed_with_tensors(negative_second_moments),
        "training_state.safetensors is damaged (Adam's exp_avg_sq holds",
    ),
    (
        "--resume, training_state.json edited, SHA256SUMS not",
        resumed_with_state(lambda s: {**s, "step": 10**12}, digests=False),
        "training_state.json is damaged: its SHA-256 is not the one written into "
        "SHA256SUMS",
    ),
    (
        "--resume, one byte of training_state.safetensors flipped",
        resumed_with_tensors(flip_a_byte, digests=False),
        "training_state.safetensors is damaged: its SHA-256 is not the one",
    ),
    (
        "--resume, SHA256SUMS without the training state's lines",
        lambda w, r: (
            existing_run("--resume")(w, r),
            [
                write_digests(c, DIGESTED)
                for c in (w / "out" / "checkpoints").glob("step-*")
            ],
        )[0],
        "SHA256SUMS has no line for training_state.json",
    ),
    (
        "--resume, metrics.csv's header edited",
        with_metrics_header(",".join(MetricsLog.FIELDS).replace("loss", "lss", 1)),
        "metrics.csv: its first line is not the header a run writes ('lss' is not a "
        "column it names once): put back the line kind,step,",
    ),
    (
        "--resume, metrics.csv's header gone",
        with_metrics_header("step,1,1,9.1,9.2,1e-05,3.0,512,100.0,,,,,0.5"),
        "metrics.csv: its first line is not the header a run writes",
    ),
    (
        "a gzip file named without .gz",
        parallel_corpus(gzip.compress(GERMAN), ENGLISH),
        "train.de is gzip-compressed (it starts with gzip's two bytes 1f 8b): name it "
        "train.de.gz, or gunzip it",
    ),
]


def test_a_damaged_latest_training_state_is_named_and_the_resume_continues_from_an_older_one(
    straight_run, tmp_path, monkeypatch, capsys, caplog
):
    """One flipped byte in the latest checkpoint's Adam moments: the resume names it, goes back to the
    checkpoint before, and ends where a run that never stopped ends (nothing lost)."""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    train = ["train", "--config", config, "--no-progress"]
    assert run_main(train + ["--max-steps", "20"], None, capsys, monkeypatch)[0] == 0
    damaged = latest(tmp_path / "out")
    assert damaged.name == "step-00000020"
    state = damaged / "training_state.safetensors"
    data = bytearray(state.read_bytes())
    data[-5] ^= 1  # inside the last tensor's bytes
    state.write_bytes(bytes(data))
    status, out, err = run_main(train + ["--resume"], None, capsys, monkeypatch)
    assert status == 0 and "Traceback" not in err, err
    warned = caplog.text  # the package's log (a terminal shows it on standard error)
    assert f"checkpoint {state} is damaged" in warned, warned
    assert "resuming from step-00000013, the newest intact checkpoint" in warned
    assert_same_run(tmp_path / "out", straight_run)


def test_two_exports_into_one_new_folder_at_once_the_second_to_finish_is_refused(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """Two `export-onnx --out X` racing, made deterministic: while the first one writes its files, the second
    runs whole and lands in X. The first must not replace it: one line, exit 2, the second's files intact."""
    import transformer.engine.onnx_export as onnx_export

    out, write = tmp_path / "onnx", onnx_export._write_export
    calls = []

    def meanwhile(checkpoint, folder):
        calls.append(folder)
        write(checkpoint, folder)
        if len(calls) == 1:  # the other export, started after this one's check
            onnx_export.export_onnx(tiny_run, out)

    monkeypatch.setattr(onnx_export, "_write_export", meanwhile)
    argv = ["export-onnx", "--model", tiny_run, "--out", out]
    status, stdout, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(status, stdout, err, "was made and filled while this export")
    assert len(calls) == 2 and sorted(p.name for p in out.iterdir()) == sorted(
        EXPORTED + ("SHA256SUMS",)
    )
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"]  # no temporary folder left
    # an empty folder given (allowed) and filled by someone while the export is written
    empty = tmp_path / "empty"
    empty.mkdir()

    def filled(checkpoint, folder):
        write(checkpoint, folder)
        (empty / "theirs.txt").write_text("theirs")

    monkeypatch.setattr(onnx_export, "_write_export", filled)
    argv = ["export-onnx", "--model", tiny_run, "--out", empty]
    status, stdout, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(status, stdout, err, "was made and filled while this export")
    assert [p.name for p in empty.iterdir()] == ["theirs.txt"]


def test_tensorboard_true_without_the_package_is_one_line_before_anything_is_written(
    tmp_path, monkeypatch, capsys
):
    import transformer.engine.run_setup as run_setup

    monkeypatch.setattr(run_setup, "find_spec", lambda name: None)
    argv = config_case(tensorboard=True)(tmp_path, None) + ["--no-progress"]
    before = listing(tmp_path)
    assert_one_line_error(
        *run_main(argv, None, capsys, monkeypatch),
        "tensorboard = true, but the tensorboard package is not installed: pip install "
        "tensorboard, or set tensorboard = false",
    )
    assert listing(tmp_path) == before
    assert TrainConfig().tensorboard == "auto"  # the default asks for nothing


def test_a_config_s_out_dir_may_be_a_pathlib_path_and_is_stored_as_text(tmp_path):
    config = TrainConfig(out_dir=tmp_path / "run")
    assert config.out_dir == str(tmp_path / "run")
    assert dataclasses.replace(config, out_dir=Path("x")).out_dir == "x"
    assert TrainConfig.from_json(config.to_json()) == config


def test_an_os_error_is_one_line_only_when_it_is_about_a_path_the_user_named(
    tmp_path, monkeypatch, capsys
):
    """A run's own folder that cannot be read is the user's to fix; an I/O error on a file of the package, or
    anywhere the command was not pointed at, is not, and keeps its traceback."""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    argv = ["train", "--config", config, "--no-progress"]

    def fails_on(name):
        def train(*args, **kwargs):
            raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(name))

        return train

    monkeypatch.setattr(
        commands, "train", fails_on(tmp_path / "out" / "checkpoints" / "x")
    )
    status, out, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(status, out, err, "Too many levels of symbolic links")
    for elsewhere in (Path(cli.__file__), tmp_path / "outside", "relative.txt"):
        monkeypatch.setattr(commands, "train", fails_on(elsewhere))
        with pytest.raises(OSError, match="Too many levels"):
            run_main(argv, None, capsys, monkeypatch)


def old_mac_tsv(work: Path, run: Path) -> list:
    """A TSV corpus whose 300 lines end in "\\r" alone: read at "\\n", one pair."""
    tsv = work / "mac.tsv"
    tsv.write_bytes(b"".join(b"Hello %d.\tHallo %d.\r" % (i, i) for i in range(300)))
    names = [str(tsv)]
    return config_case(
        data__corpus="tsv", data__train_files=names, data__valid_files=names
    )(work, run)


def old_mac_config(work: Path, run: Path) -> list:
    """A config file whose lines end in "\\r" alone: TOML reads no such line end."""
    argv = config_case()(work, run)
    argv[2].write_bytes(argv[2].read_bytes().replace(b"\n", b"\r"))
    return argv


# line 3 of the source holds a "\r"; the target was made from the source by a
# program that ends lines at "\r" (Python's text mode), so it has one line more
SPLIT = GERMAN.replace(b"Hund 2 ", b"Hund\r2 ")
SPLIT_ENGLISH = SPLIT.decode().replace("Ein Hund", "A dog").replace("\r", "\n")

TRAIN_CASES += [  # the fifth trial (issue 54)
    ("a TSV corpus with old Mac line endings", old_mac_tsv, "old Mac line endings"),
    ("a config file with old Mac line endings", old_mac_config, "old Mac line endings"),
    (
        "a parallel corpus one of whose lines holds a carriage return",
        parallel_corpus(SPLIT, SPLIT_ENGLISH.encode()),
        "train.de holds a carriage return (\\r) inside it, which a program that "
        "ends lines at \\r reads as two lines",
    ),
]


def step_linked_to_another_run(work: Path, run: Path) -> list:
    """out/checkpoints/<latest step> replaced by a link to another run's copy of it."""
    argv = existing_run("--resume")(work, run)
    step = latest(work / "out")
    shutil.copytree(step, work / "other" / step.name)
    shutil.rmtree(step)
    step.symlink_to(work / "other" / step.name, target_is_directory=True)
    return argv


TRAIN_CASES += [  # the sixth trial (issue 54)
    (
        "--resume with a step folder that is a link to another run's",
        step_linked_to_another_run,
        "is a symbolic link (to ",
    ),
]


def test_a_resume_on_a_read_only_filesystem_says_so_rather_than_chmod(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """chmod cannot make a folder on a read-only file system (mount -o ro) writable:
    the message says where the run is, and to copy it."""
    argv = existing_run("--resume")(tmp_path, tiny_run) + ["--no-progress"]
    real = os.statvfs

    def read_only(path):
        fields = list(real(path))
        fields[8] |= os.ST_RDONLY  # f_flag
        return os.statvfs_result(fields)

    monkeypatch.setattr(os, "statvfs", read_only)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path, tiny_run)
    status, out, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(
        status, out, err, "is on a read-only filesystem: copy the run"
    )
    assert "chmod" not in err
    assert listing(tmp_path, tiny_run) == before


# ---------------------------------------------------------------- every TRAIN_CASES row, the later trials' too
# (defined last: the rows added with `TRAIN_CASES +=` above are parametrized only if they come before it)


@pytest.mark.parametrize("case", [c[0] for c in TRAIN_CASES])
def test_a_bad_config_corpus_or_run_folder_is_one_line_and_exit_2_and_writes_nothing(
    case, tiny_run, tmp_path, monkeypatch, capsys
):
    _, setup, phrase = next(c for c in TRAIN_CASES if c[0] == case)
    argv = setup(tmp_path, tiny_run) + ["--no-progress"]
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path, tiny_run)
    assert_one_line_error(*run_main(argv, None, capsys, monkeypatch), phrase)
    assert listing(tmp_path, tiny_run) == before


def test_the_tensor_doors_raise_the_packages_errors_and_the_length_rule_is_checked_first():
    """attention's and tiled_attention's refusals are TransformerErrors (an
    InputTypeError is also a TypeError); translate refuses a bad output-length rule
    at its door, even for an empty list, before anything is tokenised."""
    import torch

    from transformer import attention
    from transformer.attention_cost import tiled_attention
    from transformer.errors import InputError, InputTypeError, TransformerError

    x = torch.ones(2, 3)
    with pytest.raises(InputError, match="at least two dimensions"):
        attention(torch.ones(3), x, x)
    with pytest.raises(InputTypeError, match="floating-point") as err:
        attention(x.long(), x, x)
    assert isinstance(err.value, TypeError) and isinstance(err.value, TransformerError)
    with pytest.raises(InputError, match="block=0"):
        tiled_attention(x, x, x, block=0)
    ckpt = load_translator("multi30k-de-en")
    for kwargs in ({"max_len_a": -1.0}, {"max_len_b": 0}):
        with pytest.raises(InputError, match="a \\* S \\+ b tokens"):
            translate(ckpt, [], **kwargs)


def test_the_fourth_trials_config_and_translate_faults_are_one_line(tmp_path):
    """An empty config file, a seed torch would fold to 32 bits, an out_dir that is
    not UTF-8 text, and an on_truncate that is not a function are refused at once."""
    import os

    from transformer.engine.config import TrainConfig

    empty = tmp_path / "empty.toml"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match="holds no settings"):
        TrainConfig.from_toml(empty)
    with pytest.raises(ConfigError, match="low 32 bits"):
        TrainConfig(seed=2**40)
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        TrainConfig(out_dir=os.fsdecode(b"o/\xfe"))
    ckpt = load_translator("multi30k-de-en")
    with pytest.raises(InputError, match="on_truncate must be a function"):
        translate(ckpt, ["Ein Hund."], on_truncate="x")


def test_a_resume_with_nothing_left_to_train_says_so(
    tiny_train_config, tmp_path, capsys
):
    from transformer.engine.trainer import train

    config = tiny_train_config(tmp_path, optim__max_steps=2)
    train(config)
    capsys.readouterr()
    train(
        dataclasses.replace(
            config, optim=dataclasses.replace(config.optim, max_steps=1)
        ),
        resume=True,
    )
    err = capsys.readouterr().err
    assert "at step 2" in err and "nothing is left to train" in err
    assert "has reached optim.max_steps=1" in err, err
    # all its epochs trained, under a larger max_steps: the epochs are what is used up
    whole = tiny_train_config(tmp_path / "whole", optim__epochs=1)
    train(whole)
    capsys.readouterr()
    longer = dataclasses.replace(whole.optim, max_steps=10**6)
    train(dataclasses.replace(whole, optim=longer), resume=True)
    err = capsys.readouterr().err
    assert "has reached all optim.epochs=1 of its epochs" in err, err


# ---------------------------------------------------------------------------------------
# Chapter 14's door: attention_maps refuses as translate does (transformer/checks.py).
# ---------------------------------------------------------------------------------------


@functools.cache
def shipped_de_en():
    """The shipped German-English model, loaded once for the tests that only read it."""
    return load_translator("multi30k-de-en")


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        ((None, "Ein Hund."), {}, "InputError", "checkpoint must be a loaded model"),
        (("de", 3), {}, "InputTypeError", "sentence must be a str, not int"),
        (("de", ["Ein Hund."]), {}, "InputTypeError", "not list"),
        (("de", "Ein Hund."), {"translation": 3}, "InputTypeError", "translation must"),
        (("de", "   "), {}, "InputError", "the sentence is empty"),
        (("de", "a\ud800"), {}, "InputError", "sentence is not valid Unicode"),
        (
            ("de", "Ein Hund."),
            {"translation": "\udcff"},
            "InputError",
            "translation is",
        ),
        (("de", "Ein Hund."), {"beam_size": 0}, "InputError", "beam_size=0"),
        (  # the beam was ignored without a word: nothing is translated
            ("de", "Ein Hund."),
            {"translation": "A dog.", "beam_size": 4},
            "InputError",
            "beam_size=4 beside a translation",
        ),
    ],
)
def test_attention_maps_refuses_at_its_door_with_the_packages_errors(
    args, kwargs, error, words
):
    import transformer.errors as errors
    from transformer.visualize import attention_maps

    ckpt = shipped_de_en() if args[0] == "de" else args[0]
    with pytest.raises(getattr(errors, error), match=re.escape(words)):
        attention_maps(ckpt, *args[1:], **kwargs)


@pytest.mark.parametrize(
    "sentences, dpi, error, words",
    [  # a str was explored character by character; [] an IndexError; dpi=0 matplotlib's
        ("Ein Hund.", 96, "InputTypeError", "a list of strings, got str"),
        ([], 96, "InputError", "sentences is empty"),
        (["Ein Hund.", 3], 96, "InputTypeError", "sentences[1] is int"),
        (["Ein Hund."], 0, "InputError", "dpi=0: give a whole number from 10 to 600"),
        (["Ein Hund."], 96.5, "InputError", "dpi=96.5"),
        (["Ein Hund."], "decoder-only", "InputError", "decoder-only model"),
    ],
)
def test_the_attention_explorer_refuses_at_its_door(sentences, dpi, error, words):
    """Before a widget is built: a decoder-only model read model.encoder (an
    AttributeError)."""
    pytest.importorskip("ipywidgets")
    import dataclasses

    import transformer.errors as errors
    from transformer.engine.model_config import ModelConfig, build_model
    from transformer.explorer import attention_explorer

    ckpt = shipped_de_en()
    if dpi == "decoder-only":
        size = ckpt.src_tokenizer.vocab_size
        one_stack = ModelConfig(size, size, 8, 2, 0, 1, 16, share_embeddings=True)
        ckpt, dpi = dataclasses.replace(ckpt, model=build_model(one_stack)), 96
    with pytest.raises(getattr(errors, error), match=re.escape(words)):
        attention_explorer(ckpt, sentences, dpi=dpi)


@pytest.mark.parametrize(
    "change, error, words",
    [  # drawn without a word with too few labels; a list of weights an AttributeError
        ({"source": ["a", "b"]}, "InputError", "but 2 source and 3 target pieces"),
        ({"cross": torch.rand(1, 2, 3, 4)}, "InputError", "cross is (1, 2, 3, 4)"),
        ({"encoder": [[1.0]]}, "InputTypeError", "encoder must be a float tensor"),
        (
            {"decoder": torch.ones(1, 2, 3, 3, dtype=torch.long)},
            "InputTypeError",
            "got (1,",
        ),
        ({"target": "abc"}, "InputTypeError", "target must be a list of str pieces"),
    ],
)
def test_attention_maps_made_by_hand_are_refused_unless_labels_and_weights_agree(
    change, error, words
):
    import transformer.errors as errors
    from transformer.visualize import AttentionMaps

    fields = dict(sentence="s", translation="t", source=list("xyz"), target=list("abc"))
    fields |= {k: torch.rand(1, 2, 3, 3) for k in ("encoder", "decoder", "cross")}
    AttentionMaps(**fields)  # agreeing: taken
    with pytest.raises(getattr(errors, error), match=re.escape(words)):
        AttentionMaps(**(fields | change))


def test_attention_maps_takes_numpy_integers_and_a_byte_order_mark_as_translate_does():
    import numpy as np

    from transformer.visualize import attention_maps

    ckpt = load_translator("multi30k-de-en")
    plain = attention_maps(ckpt, "Ein Hund.", beam_size=1)
    numpy = attention_maps(ckpt, "\ufeffEin Hund.", beam_size=np.int64(1))
    assert (numpy.translation, numpy.source) == (plain.translation, plain.source)


# ---- The fifth new-user trial (issue 54): the faults mended at once ------------------


def test_a_numpy_integer_of_any_width_is_a_beam_size():
    """np.int8(4) overflowed the beam's memory estimate (an OverflowError deep inside);
    the doors take any integer and compute with Python's."""
    import numpy as np

    from transformer.engine.shipped import load_translator
    from transformer.translation import translate

    ckpt = load_translator("multi30k-de-en")
    plain = translate(ckpt, ["Ein Hund läuft."], beam_size=4)
    for kind in (np.int8, np.uint8, np.int16, np.uint64):
        assert translate(ckpt, ["Ein Hund läuft."], beam_size=kind(4)) == plain, kind


def test_a_file_too_large_for_its_disk_is_one_line_like_a_full_disk(tmp_path):
    """EFBIG (a FAT32 drive, `ulimit -f`) was a traceback; it is the full disk's one
    line, saying why."""
    import errno

    from transformer.engine.full_disk import disk_is_full, full_disk_is_one_line
    from transformer.errors import DiskFullError

    too_large = OSError(errno.EFBIG, "File too large", str(tmp_path / "x"))
    assert disk_is_full(too_large)
    with pytest.raises(
        DiskFullError, match="takes no file this large .*File too large"
    ):
        with full_disk_is_one_line(tmp_path, lambda folder: "free space and rerun"):
            raise too_large


def test_standard_input_open_for_writing_only_is_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "transformer", "translate"],
        stdin=open(os.devnull, "w"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result
    assert result.stderr.startswith("error: standard input cannot be read")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# ---- The fifth new-user trial (issue 54), the rest of its faults ---------------------


def fails_at_call(n: int, real, error: OSError):
    """`real`, except that its `n`-th call raises `error`."""
    calls = []

    def fake(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            raise error
        return real(*args, **kwargs)

    return fake


def test_an_export_whose_own_folder_beside_out_cannot_be_made_names_out_s_folder(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """A read-only mount: the export's temporary folder beside --out (a path the user
    did not name) could not be made, and that was a traceback."""
    pytest.importorskip("onnx")

    def read_only(*args, dir=None, **kwargs):
        name = str(Path(dir) / ".onnx.tmp-1-x")
        raise OSError(errno.EROFS, "Read-only file system", name)

    monkeypatch.setattr("transformer.files.tempfile.mkdtemp", read_only)
    argv = ["export-onnx", "--model", tiny_run, "--out", tmp_path / "onnx"]
    assert_one_line_error(
        *run_main(argv, None, capsys, monkeypatch),
        f"cannot write into {tmp_path}, where {tmp_path / 'onnx'} would be made "
        "(Read-only file system): export into a folder you can write to",
    )
    assert not (tmp_path / "onnx").exists()


def test_evaluate_writes_its_two_files_as_a_pair_and_its_full_disk_line_is_true(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """<split>.hyp and <split>.json were two separate writes: a disk that filled
    between them left a new .hyp beside the old .json, under a line that said no file
    was changed. Now val.json names the digest of the val.hyp it scores, a full disk
    changes neither, and a rename that fails between them is said as it is."""
    import hashlib

    out = tmp_path / "eval"
    argv = ["evaluate", "--model", tiny_run, "--split", "val", "--limit", "2"]
    argv += ["--out-dir", out]
    assert run_main(argv, None, capsys, monkeypatch)[0] == 0
    report = json.loads((out / "val.json").read_text())
    digest = hashlib.sha256((out / "val.hyp").read_bytes()).hexdigest()
    assert report["hyp_sha256"] == digest
    before = listing(out)
    full = OSError(errno.ENOSPC, "No space left on device")
    with monkeypatch.context() as m:  # the disk fills as val.json is synced
        m.setattr(os, "fsync", fails_at_call(2, os.fsync, full))
        status, stdout, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(status, stdout, err, "no file there was changed")
    assert listing(out) == before
    with monkeypatch.context() as m:  # val.hyp renamed, then val.json's rename fails
        m.setattr(os, "replace", fails_at_call(2, os.replace, full))
        status, stdout, err = run_main(argv, None, capsys, monkeypatch)
    assert_one_line_error(
        status,
        stdout,
        err,
        "val.hyp is new, but val.json could not replace the old one, which may score "
        "other translations; free some space, then run the same command again",
    )
    assert sorted(p.name for p in out.iterdir()) == ["val.hyp", "val.json"]


def test_train_with_standard_output_closed_stops_before_it_trains(tmp_path):
    """`transformer train ... >&-` trained to the end, then could not say so."""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "transformer", "train", "--config", config],
        preexec_fn=lambda: os.close(1),
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr == (
        "error: standard output is closed: redirect it to a file instead (> out.txt)\n"
    ), result.stderr
    assert not (tmp_path / "out").exists()


def test_train_from_python_with_standard_error_on_a_full_disk_trains_and_keeps_its_run(
    tmp_path, monkeypatch
):
    """`train(config)` called from Python, where no command line wraps standard error:
    the progress bar's failed writes were taken for out_dir's disk being full."""
    data = tiny_config(tmp_path, progress=True, optim__max_steps=2)
    full = open("/dev/full", "w")
    monkeypatch.setattr(sys, "stderr", full)
    try:
        result = train_module.train(TrainConfig.from_dict(data))
    finally:
        with contextlib.suppress(OSError):  # what the bar left in its buffer
            full.close()
    assert result.step == 2 and list((tmp_path / "out" / "checkpoints").glob("step-*"))


def test_train_with_standard_error_on_a_full_disk_trains_and_keeps_its_run(tmp_path):
    """`transformer train ... 2>/dev/full` (standard error on a full disk, the run
    folder on another): the progress bar's failed writes stopped the run, were taken
    for out_dir's disk being full, and the run was removed."""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path, progress=True))
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "transformer", "train", "--config", config]
            + ["--max-steps", "2"],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=full,
            text=True,
            timeout=180,
        )
    assert result.returncode == 0 and result.stdout.startswith("done: step 2"), (
        result.stdout
    )
    assert list((tmp_path / "out" / "checkpoints").glob("step-*"))


def test_a_resume_in_a_run_folder_that_cannot_be_written_names_it_and_what_to_do(
    tmp_path, monkeypatch, capsys
):
    """A read-only run folder: the resume named `.metrics.csv.<random>.part` and gave
    no advice. (The folder is made read-only by refusing every open for writing in it,
    as a read-only mount does, whoever runs the test.)"""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    train = ["train", "--config", config, "--no-progress"]
    assert run_main(train + ["--max-steps", "2"], None, capsys, monkeypatch)[0] == 0
    out, real_open = tmp_path / "out", os.open
    before = listing(out)

    def read_only_open(path, flags, *args, **kwargs):
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if writes and not isinstance(path, int):
            name = Path(os.path.abspath(os.fsdecode(path)))
            if name == out or out in name.parents:
                raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    assert_one_line_error(
        *run_main(train + ["--resume"], None, capsys, monkeypatch),
        f"out_dir={out}: {out} cannot be written (Read-only file system), and the run "
        f"writes metrics.csv and its checkpoints there: make it writable (chmod -R u+w "
        f"{out}), or copy the run to a folder you can write to and give that as "
        "--out-dir",
    )
    monkeypatch.undo()
    assert listing(out) == before


@functools.cache  # built once: each case reads its own entry
def chapter_door_cases():
    """(id, call, error, phrase): the chapters' public functions, called as a reader
    calls them, refuse with the package's errors (an `InputError` is still a
    `ValueError`, an `InputTypeError` a `TypeError`, so callers that catch those
    still catch them)."""
    from transformer.attention_cost import key_value_heads, kv_cache_bytes
    from transformer.engine.config import TrainConfig
    from transformer.engine.evaluate import evaluate_pairs
    from transformer.engine.trainer import train
    from transformer.errors import ConfigError
    import tomllib
    from transformer.attention_cost import tiled_attention
    from transformer.averaging import average_weights
    from transformer.blocks import layer_stack
    from transformer.data import TokenBudgetBatchSampler, TranslationDataset, collate
    from transformer.embedding import sinusoidal_positional_encoding
    from transformer.engine.corpora import load_multi30k, load_tatoeba, split_pairs
    from transformer.engine.corpora import load_tsv
    from transformer.engine.corpora import load_parallel
    from transformer.tokenizer import Tokenizer, train_tokenizer
    from transformer.decoder_only import sample
    from transformer.engine.model_config import ModelConfig, build_model
    from transformer.errors import InputTypeError
    from transformer.evaluation import corpus_bleu, corpus_chrf
    from decimal import Decimal
    from transformer.loss import label_smoothed_loss
    from transformer.masking import causal_mask, padding_mask
    from transformer.model import Transformer
    from transformer.modern import modern_parts, rotary_angles
    from transformer.multihead import MultiHeadAttention
    from transformer.attention import attention
    from transformer.decoding import beam_search, greedy_decode
    from transformer.visualize import plot_attention, zeroed_head
    from transformer.search_checks import check_sampling

    logits, target = torch.randn(1, 2, 5), torch.tensor([[1, 2]])
    q = torch.randn(1, 2, 4)
    tok = functools.cache(lambda: Tokenizer.load(TOKENIZER))

    def folder_of_notes() -> Path:
        folder = Path(tempfile.mkdtemp())
        (folder / "notes.txt").write_text("mine")
        return folder

    decoder_only = build_model(
        ModelConfig(30, 30, 8, 2, 0, 1, 16, share_embeddings=True)
    ).eval()
    src = torch.tensor([[5, 6, 7]])
    seq2seq = build_model(ModelConfig(30, 30, 8, 2, 1, 1, 16)).eval()
    cases = [
        (
            "load_parallel of a list of paths (TypeError of pathlib)",
            lambda: load_parallel(["a.de"], "a.en"),
            InputTypeError,
            "a corpus file is named by a str or a path, got list",
        ),
        (
            "Tokenizer of a path (TypeError of bytes)",
            lambda: Tokenizer("/x/tokenizer.model"),
            InputTypeError,
            "use Tokenizer.load(path)",
        ),
        (
            "train_tokenizer(model_type='wordpiece') (sentencepiece's ValueError)",
            lambda: train_tokenizer(
                ["ein hund"] * 10, "/nonexistent/t", 20, model_type="wordpiece"
            ),
            InputError,
            "model_type='wordpiece': sentencepiece trains bpe, unigram, char or word",
        ),
        # the ninth trial's M7 and M8: chapter 09's dataset and sampler called directly
        (
            "TranslationDataset(None, ...) (TypeError: not iterable)",
            lambda: TranslationDataset(None, tok(), tok(), 64),
            InputTypeError,
            "pairs must be a list of (source, target) pairs, got NoneType",
        ),
        (
            "TranslationDataset of a pair of None",
            lambda: TranslationDataset([("Ein Hund.", None)], tok(), tok(), 64),
            InputTypeError,
            "pairs[0] is ('Ein Hund.', None): give a (source, target) pair of str",
        ),
        (
            "TranslationDataset of a lone surrogate (named by its pair)",
            lambda: TranslationDataset([("a", "b"), ("c", "\udcff")], tok(), tok(), 64),
            InputError,
            "pairs[1] is not valid Unicode",
        ),
        (
            "TranslationDataset with a str for a tokenizer",
            lambda: TranslationDataset([("a", "b")], "tok.model", tok(), 64),
            InputTypeError,
            "src_tokenizer must be a Tokenizer (Tokenizer.load(path)), got str",
        ),
        (
            "TranslationDataset(max_len='64') (TypeError of <)",
            lambda: TranslationDataset([("a", "b")], tok(), tok(), "64"),
            InputTypeError,
            "max_len='64': a whole number of tokens",
        ),
        (
            "TranslationDataset(max_len=2.5)",
            lambda: TranslationDataset([("a", "b")], tok(), tok(), 2.5),
            InputTypeError,
            "max_len=2.5: a whole number of tokens",
        ),
        # the tenth trial
        (
            "split_pairs(None) (TypeError)",
            lambda: split_pairs(None),
            InputTypeError,
            "pairs must be a list of (source, target) pairs, got NoneType",
        ),
        (
            "split_pairs('abc') (split its characters)",
            lambda: split_pairs("abc"),
            InputTypeError,
            "pairs must be a list of (source, target) pairs, got str",
        ),
        (
            "split_pairs of pairs of ints",
            lambda: split_pairs([(1, 2)]),
            InputTypeError,
            "pairs[0] is (1, 2): give a (source, target) pair of str",
        ),
        (
            "split_pairs(seed=1.5) (taken)",
            lambda: split_pairs([("a", "b")], seed=1.5),
            InputTypeError,
            "seed=1.5: a whole number",
        ),
        (
            "split_pairs(val_fraction='0.1') (TypeError of <=)",
            lambda: split_pairs([("a", "b")], val_fraction="0.1"),
            InputTypeError,
            "val_fraction='0.1' is a str, not a number",
        ),
        (
            "split_pairs(key=5) (TypeError: not callable)",
            lambda: split_pairs([("a", "b")], key=5),
            InputTypeError,
            "key=5: give a function of a pair, or None",
        ),
        (
            "TokenBudgetBatchSampler(range(1, 10**12)) (ran for hours)",
            lambda: TokenBudgetBatchSampler(range(1, 10**12), 10**6),
            InputError,
            "lengths as a list needs about 64,000.0 GB",
        ),
        (
            "encode_batch of range(10**20) (MemoryError)",
            lambda: tok().encode_batch(range(10**20)),
            InputError,
            "texts as a list needs about",
        ),
        (
            "set_epoch('1') (TypeError when iterated)",
            lambda: TokenBudgetBatchSampler([3], 10).set_epoch("1"),
            InputTypeError,
            "epoch='1': a whole number >= 0",
        ),
        # the eleventh trial
        (
            "evaluate_pairs into a model's folder, split 'model_config' (replaced it)",
            lambda: evaluate_pairs(
                load_translator("multi30k-de-en"),
                [("Ein Hund.", "A dog.")],
                "model_config",
                out_dir=ROOT / "models" / "multi30k-de-en",
            ),
            InputError,
            "holds a model or a run: evaluation results go in a folder of their own",
        ),
        (
            "TrainConfig.from_dict with bytes for out_dir (trained into a folder b')",
            lambda: TrainConfig.from_dict(
                {
                    **tomllib.loads((ROOT / "configs" / "tiny.toml").read_text()),
                    "out_dir": b"/x",
                }
            ),
            ConfigError,
            "a setting is b'/x', a bytes: a config holds text, numbers",
        ),
        (
            "train(config, resume='no') (resumed)",
            lambda: train(
                TrainConfig.from_toml(ROOT / "configs" / "tiny.toml"), resume="no"
            ),
            InputTypeError,
            "resume='no': True or False",
        ),
        (
            "zeroed_head of a decoder-only model's cross-attention (AttributeError)",
            lambda: zeroed_head(decoder_only, "cross", 0, 0).__enter__(),
            InputError,
            "a decoder-only model (chapter 18) has one stack and no cross-attention",
        ),
        (
            "train_tokenizer(num_threads=True) (sentencepiece cannot parse it)",
            lambda: train_tokenizer(
                ["ein hund"] * 10, "/nonexistent/t", 20, num_threads=True
            ),
            InputError,
            "num_threads=True: a whole number from 1 to 1024",
        ),
        (
            "train_tokenizer(normalization=None)",
            lambda: train_tokenizer(
                ["ein hund"] * 10, "/nonexistent/t", 20, normalization=None
            ),
            InputError,
            "normalization=None: one of identity, nfkc",
        ),
        (
            "train_tokenizer(character_coverage='1') (taken)",
            lambda: train_tokenizer(
                ["ein hund"] * 10, "/nonexistent/t", 20, character_coverage="1"
            ),
            InputTypeError,
            "character_coverage='1' is a str, not a number",
        ),
        (
            "train_tokenizer(add_dummy_prefix='no') (taken as yes)",
            lambda: train_tokenizer(
                ["ein hund"] * 10, "/nonexistent/t", 20, add_dummy_prefix="no"
            ),
            InputTypeError,
            "add_dummy_prefix='no': True or False",
        ),
        (
            "set_epoch(2**64) (an overflow when iterated)",
            lambda: TokenBudgetBatchSampler([3], 10).set_epoch(2**64),
            InputError,
            "epoch=18446744073709551616: give a whole number from 0",
        ),
        (
            "TokenBudgetBatchSampler of a 0-dim array (len() of it: TypeError)",
            lambda: TokenBudgetBatchSampler(torch.tensor(5), 10),
            InputTypeError,
            "lengths is a Tensor of no length: pass a list",
        ),
        (
            "greedy_decode with the model on meta (Tensor.item() on meta)",
            lambda: greedy_decode(copy.deepcopy(seq2seq).to("meta"), src.to("meta")),
            InputError,
            "the model is on the meta device, which holds shapes but no weights",
        ),
        (
            "train_tokenizer(vocab_size=2**31) (sentencepiece cannot parse it)",
            lambda: train_tokenizer(["ein hund"] * 10, "/nonexistent/t", 2**31),
            InputError,
            "vocab_size=2147483648: from 5",
        ),
        (
            "train_tokenizer(model_prefix with a NUL) (embedded null byte)",
            lambda: train_tokenizer(["ein hund"] * 10, "/tmp/a\0b", 20),
            InputError,
            "holds the control character",
        ),
        (
            "load_translator(a Checkpoint) (printed the whole model)",
            lambda: load_translator(load_translator("multi30k-de-en")),
            InputError,
            "model is a loaded Checkpoint already: use it as it is",
        ),
        (
            "TokenBudgetBatchSampler(None, 100)",
            lambda: TokenBudgetBatchSampler(None, 100),
            InputTypeError,
            "lengths must be a list of whole numbers, got NoneType",
        ),
        (
            "TokenBudgetBatchSampler of a NaN length (int(nan): ValueError)",
            lambda: TokenBudgetBatchSampler([3, float("nan")], 100),
            InputTypeError,
            "lengths[1]=nan: a whole number of tokens",
        ),
        (
            "TokenBudgetBatchSampler of a length 2.5 (was cut to 2)",
            lambda: TokenBudgetBatchSampler([2.5], 100),
            InputTypeError,
            "lengths[0]=2.5: a whole number of tokens",
        ),
        (
            "TokenBudgetBatchSampler(seed=2**70) (an overflow when iterated)",
            lambda: TokenBudgetBatchSampler([3], 100, seed=2**70),
            InputError,
            "seed=1180591620717411303424: give a whole number from 0 to 2**63 - 1",
        ),
        (
            "TokenBudgetBatchSampler(seed='a')",
            lambda: TokenBudgetBatchSampler([3], 100, seed="a"),
            InputTypeError,
            "seed='a': a whole number",
        ),
        (
            "TokenBudgetBatchSampler(shuffle='no') (shuffled)",
            lambda: TokenBudgetBatchSampler([3], 100, shuffle="no"),
            InputTypeError,
            "shuffle='no': True or False",
        ),
        (
            "TokenBudgetBatchSampler(max_tokens='100')",
            lambda: TokenBudgetBatchSampler([3], "100"),
            InputTypeError,
            "max_tokens='100': a whole number",
        ),
        (
            "train_tokenizer(None, ...) (TypeError: not iterable)",
            lambda: train_tokenizer(None, "/nonexistent/t", 20),
            InputTypeError,
            "sentences must be a list of strings, got NoneType",
        ),
        (
            "train_tokenizer of a lone surrogate (UnicodeEncodeError)",
            lambda: train_tokenizer(["a\ud800"], "/nonexistent/t", 20),
            InputError,
            "sentences[0] is not valid Unicode: character 2 is a lone surrogate",
        ),
        (
            "train_tokenizer(model_prefix=None): wrote ./None.model",
            lambda: train_tokenizer(["ein hund"], None, 20),
            InputTypeError,
            "model_prefix=None: the path of the model without its .model",
        ),
        (
            "train_tokenizer(model_prefix='dir/'): wrote a hidden dir/.model",
            lambda: train_tokenizer(["ein hund"], "/nonexistent/", 20),
            InputTypeError,
            "model_prefix='/nonexistent/': the path of the model without its .model",
        ),
        (  # the sixteenth trial
            "train_tokenizer(model_prefix='x.model'): wrote x.model.model",
            lambda: train_tokenizer(["ein hund"], "/nonexistent/x.model", 20),
            InputTypeError,
            "model_prefix='/nonexistent/x.model': the path of the model without its",
        ),
        (
            "train_tokenizer(vocab_size=2.5): 'leaves no room beside the 4 specials'",
            lambda: train_tokenizer(["ein hund"], "/nonexistent/t", 2.5),
            InputTypeError,
            "vocab_size=2.5: a whole number of pieces",
        ),
        (
            "corpus_bleu of a dict of references: scored against its keys",
            lambda: corpus_bleu(["a"], {"a": 1}),
            InputTypeError,
            "references is a dict, and going through one gives its keys: pass a list",
        ),
        (
            "corpus_bleu(lowercase='yes'): taken as true",
            lambda: corpus_bleu(["a"], ["a"], lowercase="yes"),
            InputTypeError,
            "lowercase='yes': True or False",
        ),
        (
            "TrainConfig.from_toml of TOML text: a message of two lines",
            lambda: TrainConfig.from_toml('name = "x"\n'),
            ConfigError,
            "config file 'name = \"x\"\\n' does not exist (the configs live in",
        ),
        (
            "corpus_bleu(tokenize='nope') (KeyError)",
            lambda: corpus_bleu(["a"], ["a"], tokenize="nope"),
            InputError,
            "tokenize='nope': the sacreBLEU tokenizers that need no extra package",
        ),
        (
            "corpus_bleu(tokenize='spm'): sacreBLEU downloads a model (URLError offline)",
            lambda: corpus_bleu(["a"], ["a"], tokenize="spm"),
            InputError,
            "are 13a, intl, zh, char, none (13a for English, zh for Chinese)",
        ),
        (
            "modern_parts(norm='batch'): it built LayerNorm",
            lambda: modern_parts(norm="batch", max_len=8),
            InputError,
            "norm='batch': choose one of layer, rms",
        ),
        (
            "modern_parts(feed_forward='gelu'): it built the ReLU layers",
            lambda: modern_parts(feed_forward="gelu", max_len=8),
            InputError,
            "feed_forward='gelu': choose one of relu, swiglu",
        ),
        (
            "modern_parts(bias='no')",
            lambda: modern_parts(bias="no", max_len=8),
            InputError,
            "bias='no': True or False",
        ),
        (
            "tiled_attention(causal='no')",
            lambda: tiled_attention(q, q, q, causal="no"),
            InputTypeError,
            "causal='no': True or False",
        ),
        (
            "MultiHeadAttention(10, 3)",
            lambda: MultiHeadAttention(10, 3),
            InputError,
            "d_model=10 is not divisible by num_heads=3",
        ),
        (
            "causal_mask(-1)",
            lambda: causal_mask(-1),
            InputError,
            "T=-1: a sequence length cannot be negative",
        ),
        (
            "padding_mask of one sentence",
            lambda: padding_mask(target[0], 0),
            InputError,
            "tokens must have shape (B, S)",
        ),
        (
            "a sinusoid of odd width",
            lambda: sinusoidal_positional_encoding(8, 7),
            InputError,
            "must be a positive even number",
        ),
        (
            "a stack of no layers",
            lambda: layer_stack(lambda: torch.nn.Identity(), 0),
            InputError,
            "a stack needs at least one layer",
        ),
        (
            "label smoothing 1",
            lambda: label_smoothed_loss(logits, target, 1.0),
            InputError,
            "smoothing=1.0 must be in [0, 1)",
        ),
        (
            "average_weights([])",
            lambda: average_weights([]),
            InputError,
            "no checkpoints to average",
        ),
        (  # the thirteenth trial: each a raw error or a wrong mean before
            "average_weights of a dict (KeyError: 0)",
            lambda: average_weights({"w": torch.ones(2)}),
            InputTypeError,
            "state_dicts is a dict",
        ),
        (
            "average_weights([None]) (TypeError)",
            lambda: average_weights([None]),
            InputTypeError,
            "state_dicts[0] must be a model's state_dict()",
        ),
        (
            "average_weights of a tensor (IndexError)",
            lambda: average_weights([torch.ones(2)]),
            InputTypeError,
            "state_dicts[0] must be a model's state_dict()",
        ),
        (
            "average_weights of floats (AttributeError)",
            lambda: average_weights([{"w": 1.0}]),
            InputTypeError,
            "names to tensors), got dict",
        ),
        (
            "average_weights of integer tensors (the mean of 1 and 2 was 1)",
            lambda: average_weights(
                [{"w": torch.tensor([1])}, {"w": torch.tensor([2])}]
            ),
            InputError,
            "state_dicts[0]['w'] is torch.int64: only floating-point weights",
        ),
        (
            "average_weights of complex tensors (the imaginary part dropped)",
            lambda: average_weights([{"w": torch.ones(1, dtype=torch.complex64)}]),
            InputError,
            "is torch.complex64",
        ),
        ("collate([])", lambda: collate([], 0), InputError, "empty batch"),
        (
            "max_tokens=0",
            lambda: TokenBudgetBatchSampler([3], 0),
            InputError,
            "max_tokens=0 must be positive",
        ),
        (
            "rotary pairs of an odd width",
            lambda: rotary_angles(8, 3),
            InputError,
            "rotate pairs of dimensions",
        ),
        (
            "key_value_heads(8, 3)",
            lambda: key_value_heads(8, 3),
            InputError,
            "must divide num_heads",
        ),
        (
            "kv_cache_bytes of a negative length",
            lambda: kv_cache_bytes(ModelConfig(30, 30), -5, 7),
            InputError,
            "target_len=-5 must be an integer >= 0",
        ),
        (
            "kv_cache_bytes of numbers of no bytes",
            lambda: kv_cache_bytes(ModelConfig(30, 30), 5, 7, bytes_per_number=0),
            InputError,
            "bytes_per_number=0 must be an integer >= 1",
        ),
        (
            "kv_cache_bytes of a dict",
            lambda: kv_cache_bytes({"d_model": 16}, 5, 7),
            InputTypeError,
            "config must be a ModelConfig",
        ),
        (
            "load_tsv, one column twice",
            lambda: load_tsv("x.tsv", 1, 1),
            InputError,
            "must be two different columns",
        ),
        (
            "load_multi30k('test')",
            lambda: load_multi30k("test"),
            InputError,
            "unknown Multi30k split 'test'",
        ),
        (
            "load_tatoeba('dev')",
            lambda: load_tatoeba("dev"),
            InputError,
            "unknown Tatoeba split 'dev'",
        ),
        (
            "load_tatoeba('val', seed='a')",
            lambda: load_tatoeba("val", seed="a"),
            InputError,
            "seed='a' must be an integer >= 0",
        ),
        (
            "load_tatoeba('val', seed=-1)",
            lambda: load_tatoeba("val", seed=-1),
            InputError,
            "seed=-1 must be an integer >= 0",
        ),
        (
            "train_tokenizer('ein hund', ...)",
            lambda: train_tokenizer("ein hund", "unused", 20),
            InputError,
            "sentences must be a list of strings, got str: wrap one sentence in a list",
        ),
        (
            "split_pairs, all held out",
            lambda: split_pairs([], 0, 0.5, 0.5),
            InputError,
            "must be >= 0 and sum to < 1",
        ),
        (
            "corpus_bleu([], [])",
            lambda: corpus_bleu([], []),
            InputError,
            "hypotheses and references are empty: nothing to score",
        ),
        (
            "corpus_bleu of two strings",
            lambda: corpus_bleu("abc", "abc"),
            InputTypeError,
            "hypotheses must be a list of strings, got str",
        ),
        (
            "corpus_chrf, references a string",
            lambda: corpus_chrf(["a"], "a"),
            InputTypeError,
            "references must be a list of strings, got str",
        ),
        (
            "corpus_bleu of a number",
            lambda: corpus_bleu([3], ["a"]),
            InputTypeError,
            "hypotheses[0] is int, not a str",
        ),
        (
            "corpus_bleu, a reference that is a number",
            lambda: corpus_bleu(["a"], [3]),
            InputError,
            "or a non-empty list of them per sentence",
        ),
        (
            "sample, temperature a Decimal",
            lambda: sample(decoder_only, src, temperature=Decimal("0.5")),
            InputTypeError,
            "temperature=Decimal('0.5') is a decimal.Decimal, not a number",
        ),
        (
            "sample, temperature a 0-dim tensor",
            lambda: sample(decoder_only, src, temperature=torch.tensor(0.5)),
            InputTypeError,
            "temperature=tensor(0.5000) is a torch.Tensor, not a number",
        ),
        (
            "Transformer(ModelConfig) without its parts",
            lambda: Transformer(ModelConfig(30, 30)),
            InputTypeError,
            "a ModelConfig chooses the model's parts",
        ),
        # the eighth trial's: devices, memory, a pick, yes/no settings, columns
        (
            "attention with K on meta: uninitialised values on the CPU, no error",
            lambda: attention(q, q.to("meta"), q),
            InputError,
            "Q, K, V (and mask) are on cpu, meta, cpu: put them on one device",
        ),
        (
            "attention with a mask on meta (RuntimeError of torch)",
            lambda: attention(q, q, q, torch.ones(2, 2, dtype=torch.bool).to("meta")),
            InputError,
            "are on cpu, cpu, cpu, meta",
        ),
        (
            "attention over 300,000 keys (the allocator's RuntimeError)",
            lambda: attention(*[torch.randn(1, 1, 8).expand(1, 300_000, 8)] * 3),
            InputError,
            "attention's scores needs about",
        ),
        (
            "greedy_decode of a source on meta (Tensor.item() on meta)",
            lambda: greedy_decode(seq2seq, src.to("meta")),
            InputError,
            "src is on meta, the model on cpu: move the ids there",
        ),
        (
            "a CPU generator for a model on CUDA (multinomial's RuntimeError)",
            lambda: check_sampling(1.0, None, 1.0, torch.Generator(), "cuda"),
            InputError,
            "generator is on cpu, the model on cuda: make it there",
        ),
        (
            "greedy_decode(pick=3) (int is not callable)",
            lambda: greedy_decode(seq2seq, src, pick=3),
            InputTypeError,
            "pick=3: a function from log-probabilities (b, |V|) to token ids",
        ),
        (
            "greedy_decode with a pick that returns floats (gather's RuntimeError)",
            lambda: greedy_decode(seq2seq, src, pick=lambda lp: lp.argmax(-1).float()),
            InputError,
            "pick returned torch.float32 (1,): it must return one token id per row",
        ),
        (
            "greedy_decode with a pick beyond the vocabulary (index out of bounds)",
            lambda: greedy_decode(seq2seq, src, pick=lambda lp: lp.argmax(-1) + 10**6),
            InputError,
            "pick chose a token id outside the vocabulary (ids 0 to 29)",
        ),
        (
            "greedy_decode(use_cache='no'): ran, with the cache",
            lambda: greedy_decode(seq2seq, src, use_cache="no"),
            InputTypeError,
            "use_cache='no': True or False",
        ),
        (
            "beam_search(early_stop='x'): ran",
            lambda: beam_search(seq2seq, src, early_stop="x"),
            InputTypeError,
            "early_stop='x': True or False",
        ),
        (
            "load_tsv with a column given as a str ('<' between str and int)",
            lambda: load_tsv("t.tsv", 0, "1"),
            InputTypeError,
            "src_col=0, tgt_col='1': give two ints",
        ),
        (
            "load_tsv(src_col=True): read column 1 as the source",
            lambda: load_tsv("t.tsv", True, 0),
            InputTypeError,
            "src_col=True, tgt_col=0: give two ints",
        ),
        (
            "plot_attention(None) (AttributeError)",
            lambda: plot_attention(None, "cross"),
            InputTypeError,
            "maps: what attention_maps returns, not <class 'NoneType'>",
        ),
        (
            "zeroed_head(None, ...) (AttributeError)",
            lambda: zeroed_head(None, "encoder", 0, 0).__enter__(),
            InputTypeError,
            "model must be a Transformer, got NoneType",
        ),
    ]
    if importlib.util.find_spec("onnxruntime"):
        from transformer import OnnxTranslator

        cases.append(
            (
                "OnnxTranslator(None)",
                lambda: OnnxTranslator(None),
                InputTypeError,
                "directory must be the path of a folder",
            )
        )
        from transformer.engine.onnx_export import export_onnx

        cases.append(
            (
                "export_onnx(model, None) (TypeError of pathlib)",
                lambda: export_onnx("multi30k-de-en", None),
                InputTypeError,
                "out_dir=None: give the folder to write, a path",
            )
        )
        cases.append(
            (
                "export_onnx --replace into a folder of the user's (emptied it)",
                lambda: export_onnx("multi30k-de-en", folder_of_notes(), replace=True),
                InputError,
                "holds files that are not an export's (notes.txt): --replace replaces "
                "only an earlier export",
            )
        )
        cases.append(
            (
                "OnnxTranslator('') (looked in the current folder)",
                lambda: OnnxTranslator(""),
                InputTypeError,
                "directory must be the path of a folder export_onnx wrote",
            )
        )
        cases.append(
            (
                "export_onnx(model, '~nosuchuser/x') (made a folder called ~nosuchuser)",
                lambda: export_onnx("multi30k-de-en", "~nosuchuser/x"),
                InputError,
                "out_dir=~nosuchuser/x: ~nosuchuser names no home folder here",
            )
        )
    return cases


@pytest.mark.parametrize("case", [c[0] for c in chapter_door_cases()])
def test_a_chapter_s_public_function_refuses_with_the_packages_errors(case):
    from transformer.errors import InputTypeError

    _, call, error, phrase = next(c for c in chapter_door_cases() if c[0] == case)
    with pytest.raises(error) as refused:
        call()
    assert phrase in str(refused.value) and "\n" not in str(refused.value)
    assert isinstance(
        refused.value, TypeError if error is InputTypeError else ValueError
    )


TOKENIZER = ROOT / "models" / "multi30k-de-en" / "tokenizer.model"


@pytest.mark.parametrize(
    "call, error, phrase",
    [
        ("load(None)", "InputTypeError", "Tokenizer.load takes the path of a .model"),
        (
            "load('/nonexistent/t.model')",
            "CheckpointNotFoundError",
            "no tokenizer model",
        ),
        ("load(TOKENIZER.parent)", "InputError", "is a folder, not a regular file"),
        ("tok.save(None)", "InputTypeError", "Tokenizer.save takes the path"),
        ("tok.save(tmp)", "InputError", "is a folder: give the path of a .model file"),
        ("tok.save('/proc/x.model')", "InputError", "/proc/x.model cannot be written"),
        ("tok.encode('a\\ud800')", "InputError", "the text is not valid Unicode"),
        ("tok.pieces(3)", "InputTypeError", "pieces takes one str, got int"),
        ("tok.encode_batch('Ein Hund.')", "InputTypeError", "use encode for one"),
        (
            "tok.encode_batch(['a', None])",
            "InputTypeError",
            "texts[1] is NoneType, not a str",
        ),
        ("tok.encode_batch(['\\udcff'])", "InputError", "texts[0] is not valid"),
        ("tok.decode(None)", "InputError", "decode takes one sequence of int ids"),
        ("tok.decode_batch(None)", "InputTypeError", "decode_batch takes rows"),
        (
            "tok.decode(torch.tensor([5, 6], device='meta'))",
            "InputError",
            "the ids are on the meta device",
        ),
        ("tok.save('~nosuchuser/x.model')", "InputError", "~nosuchuser names no home"),
        ("load('a\\0b')", "InputError", "holds a NUL byte: no file has one"),
        (
            "tok.decode_batch(torch.tensor([5, 6, 3]))",
            "InputError",
            "decode_batch takes rows of int ids (a 2-D tensor or a list of lists)",
        ),
        (
            "tok.pieces(None)",
            "InputTypeError",
            "pieces takes one str, got NoneType: one",
        ),
        ("tok.id_to_piece(10**6)", "InputError", "id 1000000 is outside this"),
        ("tok.id_to_piece(-1)", "InputError", "id -1 is outside this"),
        ("tok.id_to_piece('a')", "InputTypeError", "id 'a' is not an int"),
    ],
)
def test_a_tokenizers_methods_refuse_with_the_packages_errors(
    call, error, phrase, tmp_path
):
    """The ninth trial's M5: each was sentencepiece's or Python's own error."""
    import transformer.errors as errors
    from transformer.tokenizer import Tokenizer

    tok, load = Tokenizer.load(TOKENIZER), Tokenizer.load
    names = dict(tok=tok, load=load, TOKENIZER=TOKENIZER, tmp=tmp_path, torch=torch)
    with pytest.raises(getattr(errors, error)) as refused:
        eval(call, names)
    assert phrase in str(refused.value) and "\n" not in str(refused.value)
    assert tok.id_to_piece(torch.tensor(5)) == tok.id_to_piece(5)


def test_paths_with_a_tilde_are_the_home_folders_at_every_door(tmp_path, monkeypatch):
    """The tenth trial: Tokenizer.save and train_tokenizer made a folder called ~ here,
    and Tokenizer.load and load_tsv said a file under ~ did not exist."""
    from transformer.engine.corpora import load_tsv, split_pairs_for
    from transformer.tokenizer import Tokenizer, train_tokenizer

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    saved = Tokenizer.load(TOKENIZER).save("~/a/t.model")
    assert saved == tmp_path / "home" / "a" / "t.model" and saved.is_file()
    assert Tokenizer.load("~/a/t.model").sha256 == Tokenizer.load(TOKENIZER).sha256
    trained = train_tokenizer(["ein hund läuft"] * 20, "~/b/tok", 20)
    assert trained.model_path == tmp_path / "home" / "b" / "tok.model"
    (tmp_path / "home" / "p.tsv").write_text("Ein Hund.\tA dog.\n")
    assert load_tsv("~/p.tsv") == [("Ein Hund.", "A dog.")]
    (tmp_path / "home" / "a.de").write_text("Ein Hund.\n")
    (tmp_path / "home" / "a.en").write_text("A dog.\n")
    parallel = types.SimpleNamespace(corpus="parallel", data_dir="")
    files = ["~/a.de", "~/a.en"]  # a config's train_files
    assert split_pairs_for(parallel, "train", files) == [("Ein Hund.", "A dog.")]
    assert not (tmp_path / "~").exists()


def test_a_path_through_a_link_and_dot_dot_is_written_where_the_system_finds_it(
    tmp_path, monkeypatch
):
    """odd/rellink -> ../run: "../odd/rellink/../x" is tmp/x to the system, but tempfile
    shortened it by its text to tmp/odd/x and the rename failed (the tenth trial)."""
    from transformer.files import atomic_folder, atomic_write_bytes

    (tmp_path / "odd").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "odd" / "rellink").symlink_to("../run")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    atomic_write_bytes("../odd/rellink/../x.bin", b"1")
    with atomic_folder("../odd/rellink/../folder") as tmp:
        (tmp / "a").write_text("a")
    assert (tmp_path / "x.bin").read_bytes() == b"1"
    assert (tmp_path / "folder" / "a").read_text() == "a"


def test_a_dataset_of_a_generator_is_the_dataset_of_its_list():
    """A generator of pairs was read twice: its targets were silently empty."""
    from transformer.data import TranslationDataset
    from transformer.tokenizer import Tokenizer

    tok = Tokenizer.load(TOKENIZER)
    pairs = [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    lazy = TranslationDataset((p for p in pairs), tok, tok, 64)
    assert lazy.tgt_ids == TranslationDataset(pairs, tok, tok, 64).tgt_ids != []


def test_kv_cache_bytes_counts_numpy_integers_as_python_ones():
    """np.int32(2**25) steps wrapped to 0 bytes without a word (the eleventh trial)."""
    import numpy as np

    from transformer.attention_cost import kv_cache_bytes
    from transformer.engine.model_config import ModelConfig

    config = ModelConfig(30, 30)
    assert kv_cache_bytes(config, np.int32(2**25), np.int8(10), np.int16(300)) == (
        kv_cache_bytes(config, 2**25, 10, 300)
    )


def test_load_translator_takes_device_auto_as_the_command_line_does():
    from transformer.engine.shipped import load_translator

    assert load_translator("multi30k-de-en", device="auto").model is not None


def test_corpus_bleu_takes_any_iterable_of_strings_as_a_list():
    """A generator of hypotheses was a TypeError from len(): it is read as a list."""
    from transformer.evaluation import corpus_bleu, corpus_chrf

    hyps, refs = ["A dog runs in the snow ."], ["A dog runs in the snow ."]
    for score in (corpus_bleu, corpus_chrf):
        assert score(iter(hyps), (r for r in refs)) == score(hyps, refs)


def test_the_memory_check_counts_the_process_s_own_limit():
    """Under `ulimit -v` (`prlimit --as`, a batch system's limit) the system's free
    memory is not what an allocation can take: a beam that needed more died in torch's
    allocator instead of being refused in one line."""
    import resource

    limit = 3 << 30
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from transformer.memory import available_memory as a; print(a())",
        ],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert 0 < int(result.stdout) < limit, result.stdout


def test_build_model_refuses_a_model_larger_than_the_memory_in_one_line():
    """A billion-piece vocabulary (4 TB of weights) under a 3 GB address-space limit
    was torch's allocator error; the paper's base model still fits."""
    import resource

    limit = 3 << 30
    code = (
        "from transformer import ModelConfig, build_model\n"
        "from transformer.errors import ConfigError\n"
        "build_model(ModelConfig(37000, 37000))\n"
        "try:\n"
        "    build_model(ModelConfig(10**9, 10**9))\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
        "tiny = dict(d_model=8, num_heads=2, d_ff=8, num_decoder_layers=1)\n"
        "try:  # 4 MB of weights, 4.5 GB of layers: minutes, then a SystemError\n"
        "    build_model(ModelConfig(10, 10, **tiny, num_encoder_layers=100_000))\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        r"(the model that the config describes \(its float32 weights, its layers\) "
        r"needs about (4,100|6)\.\d GB, but cpu memory has [\d.]+ GB available: lower "
        r"d_model, d_ff, the layer counts, max_len or the vocabulary sizes\n){2}",
        result.stdout,
    ), result.stdout


def test_memory_that_runs_out_during_a_training_step_is_one_line(
    tmp_path, monkeypatch, capsys, course_data
):
    """The estimate before a run counts weights, gradients and Adam's moments, not a
    batch's activations: the paper's base model under a 4 GB limit passed it and then
    died in torch's allocator, with a traceback."""

    def too_much(*args, **kwargs):
        torch.empty(1 << 62, dtype=torch.uint8)  # an allocation the system refuses

    monkeypatch.setattr(train_module, "train_step", too_much)
    monkeypatch.chdir(tmp_path)
    argv = config_case()(tmp_path, None) + ["--no-progress"]
    before = listing(tmp_path)
    assert_one_line_error(
        *run_main(argv, None, capsys, monkeypatch),
        "training ran out of cpu memory (an allocation was refused): lower "
        "optim.max_tokens",
    )
    assert listing(tmp_path) == before


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_memory_check_counts_the_cgroup_s_limit(tmp_path, monkeypatch, version):
    """A container's (or a batch job's) memory limit is a cgroup's: the system's
    free memory was all that was counted. The cgroup above the process's own limits
    it too; "max" (v2) is no limit."""
    import transformer.memory as memory

    if version == "v2":
        proc = "0::/job/task\n"
        own = tmp_path / "job" / "task"
        names = ("memory.max", "memory.current")
    else:
        proc = "5:cpu,cpuacct:/job/task\n4:memory:/job/task\n"
        own = tmp_path / "memory" / "job" / "task"
        names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    own.mkdir(parents=True)
    (tmp_path / "cgroup").write_text(proc)
    for folder, (limit, used) in [(own, (5000, 1000)), (own.parent, (3000, 500))]:
        (folder / names[0]).write_text(f"{limit}\n")
        (folder / names[1]).write_text(f"{used}\n")
    monkeypatch.setattr(memory, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(memory, "CGROUP_ROOT", tmp_path)
    assert memory.available_memory("cpu") == 2500  # the parent's 3000 less 500
    (own.parent / names[0]).write_text("max\n" if version == "v2" else "9" * 19)
    assert memory.available_memory("cpu") == 4000
    # the page cache the kernel can free (inactive files) is counted as free, as the
    # system's MemAvailable counts it: a container that has read a few GB of files
    # is not full
    key = "inactive_file" if version == "v2" else "total_inactive_file"
    (own / "memory.stat").write_text(f"anon 100\n{key} 600\nactive_file 300\n")
    assert memory.available_memory("cpu") == 4600


def test_evaluate_of_the_current_folder_names_its_files_for_it(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """`cd run && transformer evaluate --model .`: the default folder is
    evaluation/<the model's name>, as for any other path ("." had no name, so the
    files went to evaluation/ itself; ".." would have been the folder above)."""
    run = tmp_path / "myrun"
    shutil.copytree(tiny_run, run)
    monkeypatch.chdir(run)
    argv = ["evaluate", "--model", ".", "--split", "val", "--limit", "2", "--beam", "1"]
    status, _, err = run_main(argv, None, capsys, monkeypatch)
    assert status == 0, err
    assert (run / "evaluation" / "myrun" / "val.hyp").is_file()


# ---- Left by the tenth and eleventh trials (issue 54): the command line -------------


def test_evaluate_refuses_a_default_folder_holding_another_models_scores(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """Two runs whose folders share a name (x/run, y/run) would write the same default
    evaluation/run/: the second overwrote the first's scores. Now it is refused, naming
    --out-dir, and the first's files stay; a run's step folder is <run>-<step>, and a
    later evaluation of the same run replaces its earlier one."""
    for parent in ("x", "y"):
        shutil.copytree(tiny_run, tmp_path / parent / "run")
    monkeypatch.chdir(tmp_path)
    options = ["--split", "val", "--limit", "2", "--beam", "1"]
    status, _, err = run_main(
        ["evaluate", "--model", "x/run", *options], None, capsys, monkeypatch
    )
    assert status == 0, err
    before = listing(tmp_path / "evaluation")
    assert_one_line_error(
        *run_main(
            ["evaluate", "--model", "y/run", *options], None, capsys, monkeypatch
        ),
        "evaluation/run/val.json holds the scores of",
    )
    assert listing(tmp_path / "evaluation") == before
    status, _, err = run_main(
        ["evaluate", "--model", "x/run", *options], None, capsys, monkeypatch
    )
    assert status == 0, err  # the same run again: its scores are replaced
    step = latest(tmp_path / "y" / "run")
    status, out, err = run_main(
        ["evaluate", "--model", step, *options], None, capsys, monkeypatch
    )
    assert status == 0, err
    assert (tmp_path / "evaluation" / f"run-{step.name}" / "val.json").is_file()
    # the fifteenth trial: a folder given by --out-dir was overwritten without a word
    mine = ["--out-dir", "evaluation/run", *options]
    before = listing(tmp_path / "evaluation")
    assert_one_line_error(
        *run_main(["evaluate", "--model", "y/run", *mine], None, capsys, monkeypatch),
        "not of this model: pass another --out-dir",
    )
    assert listing(tmp_path / "evaluation") == before


def test_the_done_line_of_a_resume_with_nothing_left_to_train_says_so(
    tmp_path, monkeypatch, capsys
):
    """A run stopped by --max-steps inside its first epoch, resumed with the same limit:
    the line read `done: step 3, ; checkpoint ...` (no epoch row, an empty summary)."""
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    argv = ["train", "--config", config, "--max-steps", "3", "--no-progress"]
    assert run_main(argv, None, capsys, monkeypatch)[0] == 0
    status, out, err = run_main([*argv, "--resume"], None, capsys, monkeypatch)
    assert status == 0 and "nothing is left to train" in err, err
    assert re.fullmatch(
        r"done: step 3, nothing left to train; checkpoint \S+step-00000003\n", out
    ), out


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_metrics_csv_deleted_or_replaced_during_a_run_is_written_again_whole(
    tmp_path, how, capsys
):
    """Its rows went on into the deleted file (or the one replaced), silently lost."""
    log = MetricsLog(tmp_path, tensorboard=False)
    log.log("step", 1, loss=2.5)
    if how == "deleted":
        (tmp_path / "metrics.csv").unlink()
    else:
        (tmp_path / "other.csv").write_text("mine\n")
        os.replace(tmp_path / "other.csv", tmp_path / "metrics.csv")
    log.log("step", 2, loss=2.25)
    log.log("step", 3, loss=2.0)
    log.close()
    assert [r["loss"] for r in read_metrics(tmp_path)] == [2.5, 2.25, 2.0]
    err = capsys.readouterr().err
    assert err.count("was deleted or replaced during the run") == 1, err


def stats_cases():
    """(id, call, error, phrase): chapter 12's statistics at their doors
    (transformer/stats_checks.py). Each was a raw error, a silent wrong number or a
    hang before."""
    from transformer import stats

    three = stats.SeedPairs([1.0, 2.0, 3.0], [0.01] * 3, 1.0, [20.0] * 3, [21, 22, 23])
    stat = stats.bleu_statistics(["a dog runs"], ["a dog runs"])
    return [
        (
            "holm(None) (TypeError)",
            lambda: stats.holm(None),
            "InputTypeError",
            "NoneType",
        ),
        ("holm('0.5')", lambda: stats.holm("0.5"), "InputTypeError", "pass [p]"),
        (
            "holm_levels, level 2",
            lambda: stats.holm_levels([0.1], 2),
            "InputError",
            "level=2",
        ),
        (
            "mean_sd([nan, 1]) was (nan, nan)",
            lambda: stats.mean_sd([math.nan, 1]),
            "InputError",
            "values[0]=nan",
        ),
        (
            "mean_sd('ab')",
            lambda: stats.mean_sd("ab"),
            "InputTypeError",
            "list of numbers",
        ),
        (
            "permutation_p of 30 and 30 (hangs)",
            lambda: stats.permutation_p([1.0] * 30, [2.0] * 30),
            "InputError",
            "1.18e+17 splits",
        ),
        (
            "t_p_value(nan) was 0.0",
            lambda: stats.t_p_value(math.nan, 3),
            "InputError",
            "not NaN",
        ),
        (
            "t_p_value, dof 0 (ZeroDivisionError)",
            lambda: stats.t_p_value(1.0, 0),
            "InputError",
            "dof=0",
        ),
        (
            "t_p_value, dof 10**9 (hangs)",
            lambda: stats.t_p_value(1.0, 10**9),
            "InputError",
            "from 1 to 10,000",
        ),
        (
            "t_quantile(1.5) was 1e6",
            lambda: stats.t_quantile(1.5, 3),
            "InputError",
            "level=1.5",
        ),
        (
            "paired_bleu_test of a list",
            lambda: stats.paired_bleu_test([["a"], ["b"]], ["c"]),
            "InputTypeError",
            "systems must map",
        ),
        (
            "paired_bleu_test, no sentence (RuntimeError)",
            lambda: stats.paired_bleu_test({"a": [], "b": []}, []),
            "InputError",
            "a sentence or more",
        ),
        (
            "paired_bleu_test of a str",
            lambda: stats.paired_bleu_test({"a": "x", "b": "y"}, "z"),
            "InputTypeError",
            "got str",
        ),
        (
            "paired_bleu_test, resamples 0",
            lambda: stats.paired_bleu_test(
                {"a": ["x"], "b": ["y"]}, ["z"], resamples=0
            ),
            "InputError",
            "resamples=0",
        ),
        (
            "paired_bleu_test, resamples 10**15",
            lambda: stats.paired_bleu_test(
                {"a": ["x"], "b": ["y"]}, ["z"], resamples=10**15
            ),
            "InputError",
            "lower resamples",
        ),
        (
            "paired_bootstrap of float32 statistics",
            lambda: stats.paired_bootstrap(stat.float(), stat.float()),
            "InputTypeError",
            ".double() converts",
        ),
        (
            "paired_bootstrap of NaN statistics (gap 0, p = 1)",
            lambda: stats.paired_bootstrap(stat * math.nan, stat),
            "InputError",
            "NaN, infinite or negative counts",
        ),
        (
            "bleu_statistics of 3 translations and 2 references (a row dropped)",
            lambda: stats.bleu_statistics(["a", "b", "c"], ["a", "b"]),
            "InputError",
            "translations: 3, references: 2",
        ),
        (
            "paired_bootstrap of unequal N",
            lambda: stats.paired_bootstrap(stat, torch.cat([stat, stat])),
            "InputError",
            "the same N >= 1",
        ),
        (
            "paired_over_seeds([1], [2]) (TypeError)",
            lambda: stats.paired_over_seeds([1.0], ["2"]),
            "InputError",
            "runs[0] must be a pair",
        ),
        (
            "compare(a list) (AttributeError)",
            lambda: stats.compare([]),
            "InputError",
            "family must map",
        ),
        (
            "compare, a key of one name",
            lambda: stats.compare({"a": three}),
            "InputError",
            "family's keys are (a, b)",
        ),
        (
            "compare, a NaN gap",
            lambda: stats.compare(
                {("a", "b"): dataclasses.replace(three, gaps=[1.0, math.nan, 3.0])}
            ),
            "InputError",
            "gaps[1]=nan",
        ),
        (
            "compare, two p-values for three seeds",
            lambda: stats.compare(
                {("a", "b"): dataclasses.replace(three, p_values=[0.1, 0.2])}
            ),
            "InputError",
            "2 p-values for 3 seeds",
        ),
        (
            "compare, level 0",
            lambda: stats.compare({("a", "b"): three}, level=0),
            "InputError",
            "level=0",
        ),
        (
            "compare(level=0.95), a coverage for a level (taken)",
            lambda: stats.compare({("a", "b"): three}, level=0.95),
            "InputError",
            "a level lies in (0, 0.5] (did you mean 0.05?)",
        ),
        (
            "PairedGap.interval(0.05), a level for a coverage (taken)",
            lambda: stats.paired_bootstrap(stat, stat, resamples=20).interval(0.05),
            "InputError",
            "a coverage lies in [0.5, 1 - 1e-12] (did you mean 0.95?)",
        ),
        (
            "permutation_p of 1 and 199,999 values (200,000 splits, about an hour)",
            lambda: stats.permutation_p([1.0], [0.0] * 199_999),
            "InputError",
            "splits to go through",
        ),
        (
            "SeedPairs of one seed: interval (it said dof=0)",
            lambda: dataclasses.replace(three, gaps=[1.0]).interval(),
            "InputError",
            "a standard deviation needs two",
        ),
        (
            "paired_bootstrap of statistics on another device",
            lambda: stats.paired_bootstrap(stat.to("meta"), stat.to("meta")),
            "InputError",
            "a is on meta: the test counts on the cpu, .cpu()",
        ),
        (
            "PairedGap.interval(2)",
            lambda: stats.paired_bootstrap(stat, stat, resamples=20).interval(2),
            "InputError",
            "level=2",
        ),
        # the fifteenth trial's: each a raw error, a silent wrong number or bad advice
        (
            "bleu_of of a list (TypeError)",
            lambda: stats.bleu_of([1, 2, 3]),
            "InputTypeError",
            "totals must be summed BLEU statistics, a tensor (..., 10)",
        ),
        (
            "bleu_of of NaN counts (was 0)",
            lambda: stats.bleu_of(stat[0] * math.nan),
            "InputError",
            "totals holds NaN, infinite or negative counts",
        ),
        (
            "bleu_of of a (3,) tensor (was 0)",
            lambda: stats.bleu_of(torch.zeros(3)),
            "InputError",
            "real and (..., 10)",
        ),
        (
            "holm of a 2-d tensor",
            lambda: stats.holm(torch.zeros(2, 2)),
            "InputError",
            "p_values is a tensor of shape (2, 2): give a 1-d tensor",
        ),
        (
            "holm of a str among numbers (said: must lie in [0, 1])",
            lambda: stats.holm([0.1, "0.2"]),
            "InputTypeError",
            "p_values[1] is a str: p-values are numbers",
        ),
        (
            "mean_sd([1e308, 1e308]) was (inf, inf)",
            lambda: stats.mean_sd([1e308, 1e308]),
            "InputError",
            "values[0]=1e+308: a score beyond ±1e+150 could overflow",
        ),
        (  # the review: a t quantile past 1e15 was cut there without a word
            "t_quantile(1 - 1e-15, 1)",
            lambda: stats.t_quantile(1 - 1e-15, 1),
            "InputError",
            "a coverage lies in [0.5, 1 - 1e-12]",
        ),
        (  # and a gap beyond ±1e150 reached mean_sd through compare, unnamed
            "compare of gaps beyond 1e150",
            lambda: stats.compare(
                {
                    ("a", "b"): stats.SeedPairs(
                        [1e200] * 3, [], 1.0, [1.0] * 3, [2.0] * 3
                    )
                }
            ),
            "InputError",
            "b against a: gaps[0]=1e+200: a score beyond",
        ),
        (  # a family of 2 judges at 0.025: 20 resamples can never get there
            "compare of two comparisons tested with 20 resamples",
            lambda: stats.compare(
                dict.fromkeys(
                    [("a", "b"), ("a", "c")],
                    stats.SeedPairs(
                        [1.0] * 3,
                        [0.05] * 3,
                        1.0,
                        [1.0] * 3,
                        [2.0] * 3,
                        [stats.paired_bootstrap(stat, stat, resamples=20)] * 3,
                    ),
                )
            ),
            "InputError",
            "in a family of 2 at level 0.05, no p-value falls below Holm's levels "
            "with fewer than 40",
        ),
        (  # a meta tensor was torch's RuntimeError
            "bleu_of a meta tensor",
            lambda: stats.bleu_of(torch.zeros(10, device="meta")),
            "InputError",
            "totals is on the meta device, which holds no numbers",
        ),
        (
            "paired_bootstrap(resamples=1) gave the interval (-inf, inf)",
            lambda: stats.paired_bootstrap(stat, stat, resamples=1),
            "InputError",
            "resamples=1: a whole number of test sets, at least 20",
        ),
        (
            "paired_bootstrap of negative counts",
            lambda: stats.paired_bootstrap(-stat, -stat),
            "InputError",
            "a holds NaN, infinite or negative counts",
        ),
        (
            "compare of one pair in both orders (Holm counted it twice)",
            lambda: stats.compare({("a", "b"): three, ("b", "a"): three}),
            "InputError",
            "b and a are compared twice (in both orders)",
        ),
    ]


def test_a_level_far_out_of_range_gets_no_advice_that_is_refused_too():
    """t_quantile(1e-300, 3) said 'did you mean 1?', and 1 is refused as well."""
    from transformer import stats

    with pytest.raises(InputError) as info:
        stats.t_quantile(1e-300, 3)
    assert str(info.value) == "level=1e-300: a coverage lies in [0.5, 1 - 1e-12]"
    with pytest.raises(InputError, match=r"did you mean 0\.95\?"):
        stats.t_quantile(0.05, 3)


def test_holm_and_mean_sd_take_a_1d_tensor_as_its_numbers():
    """holm(tensor([0.01, 0.04])) said the p-values were not in [0, 1]."""
    from transformer import stats

    p = torch.tensor([0.01, 0.04], dtype=torch.float64)
    assert stats.holm(p) == stats.holm([0.01, 0.04])
    assert stats.mean_sd(p) == stats.mean_sd([0.01, 0.04])


@pytest.mark.parametrize("case", [c[0] for c in stats_cases()])
def test_the_statistics_refuse_at_their_doors_with_the_packages_errors(case):
    import transformer.errors as errors

    _, call, error, phrase = next(c for c in stats_cases() if c[0] == case)
    with pytest.raises(getattr(errors, error)) as info:
        call()
    assert phrase in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_average_weights_takes_a_generator_and_names_in_another_order():
    """A generator was 'not subscriptable'; the same names in another order were
    refused as 'different tensors'."""
    from transformer.averaging import average_weights

    a = {"x": torch.tensor([1.0]), "y": torch.tensor([2.0])}
    b = {"y": torch.tensor([4.0]), "x": torch.tensor([3.0])}
    mean = average_weights(sd for sd in (a, b))
    assert mean == {"x": torch.tensor([2.0]), "y": torch.tensor([3.0])}


def test_the_statistics_take_generators_numpy_numbers_and_a_mapping_proxy():
    """What the doors take: the same results as from lists."""
    import types

    import numpy as np

    from transformer import stats

    assert stats.mean_sd(x for x in (1.0, 2.0, 4.0)) == stats.mean_sd([1.0, 2.0, 4.0])
    assert stats.holm(np.array([0.01, 0.04])) == stats.holm([0.01, 0.04])
    refs = ["a dog runs on grass", "two cats sleep"]
    systems = {"a": ["a dog runs", "two cats sleep"], "b": refs}
    plain = stats.paired_bleu_test(systems, refs, resamples=20)
    proxy = stats.paired_bleu_test(
        types.MappingProxyType(systems), iter(refs), resamples=20
    )
    assert [str(c) for c in proxy] == [str(c) for c in plain]
    runs = [(systems["a"], systems["b"])] * 2
    assert (
        stats.paired_over_seeds(runs, iter(refs), resamples=20).gaps
        == [plain[1].bleu - plain[0].bleu] * 2
    )


@pytest.mark.parametrize(
    "env, phrase",
    [  # each a traceback, a wrong message, or (RANK=5 of 2) a hang before
        ({"RANK": "abc"}, "RANK='abc' is no whole number >= 0: torchrun sets it"),
        ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is no whole number >= 1"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' is no whole number >= 1"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK='-1' is no whole number >= 0"),
        ({"RANK": "\u0663", "WORLD_SIZE": "4"}, "RANK='\u0663' is no whole number"),
        (
            {"RANK": "1"},
            "RANK=1 with WORLD_SIZE=1: the ranks run from 0 to WORLD_SIZE - 1 = 0",
        ),
        ({"RANK": "5", "WORLD_SIZE": "2"}, "RANK=5 with WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "WORLD_SIZE=2, but MASTER_ADDR is not set"),
    ],
)
def test_torchruns_variables_set_by_hand_are_one_line_that_names_them(
    env, phrase, tmp_path, monkeypatch, capsys
):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    before = listing(tmp_path)
    argv = ["train", "--config", config, "--no-progress"]
    assert_one_line_error(*run_main(argv, None, capsys, monkeypatch), phrase)
    assert listing(tmp_path) == before


def test_a_run_waiting_for_a_torchrun_process_that_never_comes_hears_sigterm(tmp_path):
    """RANK=0 of WORLD_SIZE=2 with no rank 1: torch's wait ran in C++, where no Python
    handler runs, so SIGTERM and Ctrl-C did nothing and only SIGKILL ended it (the
    twelfth trial). SIGTERM is sent once rank 0 listens for the others."""
    import socket

    with socket.socket() as s:  # a port no one listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = write_config(tmp_path / "c.toml", tiny_config(tmp_path))
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    env |= {"MASTER_PORT": str(port), "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "transformer", "train", "--config", config],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def listens() -> bool:  # /proc/net/tcp(6): a socket on the port in state LISTEN
        rows = (
            line.split()
            for t in ("tcp", "tcp6")
            if Path(f"/proc/net/{t}").is_file()
            for line in Path(f"/proc/net/{t}").read_text().splitlines()[1:]
        )
        return any(r[1].endswith(f":{port:04X}") and r[3] == "0A" for r in rows)

    end = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < end and not listens():
        time.sleep(0.05)
    time.sleep(0.3)  # inside the wait
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "terminated (SIGTERM)" in err, err
    assert out == "" and not (tmp_path / "out").exists()


def test_the_wait_for_torchruns_other_processes_is_said_and_their_errors_raised(
    monkeypatch, capsys
):
    """After JOIN_NOTE_S seconds the wait says what it waits for; what the join raises
    in its thread is raised in the caller's."""
    import threading

    import transformer.engine.distributed as distributed

    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed, "JOIN_NOTE_S", 0.3)
    slow = threading.Event()
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda b: slow.wait(1))
    info = distributed.DistInfo(0, 2, 0)
    distributed.join_process_group(torch.device("cpu"), info)
    assert capsys.readouterr().err.startswith(
        "waiting at 127.0.0.1:29500 for the other processes of WORLD_SIZE=2"
    )

    def refused(backend):
        raise RuntimeError("the store refused")

    monkeypatch.setattr(distributed.dist, "init_process_group", refused)
    with pytest.raises(RuntimeError, match="the store refused"):
        distributed.join_process_group(torch.device("cpu"), info)
    # the fifteenth trial: a port set by hand that is none was int()'s traceback
    for port in ("abc", "99999", "0"):
        monkeypatch.setenv("MASTER_PORT", port)
        with pytest.raises(ConfigError, match=f"MASTER_PORT='{port}' is no port"):
            distributed.join_process_group(torch.device("cpu"), info)
    monkeypatch.setenv("MASTER_PORT", "29500")  # and an address that is none was
    monkeypatch.setenv("MASTER_ADDR", "no.such.host.invalid")  # waited on
    with pytest.raises(ConfigError, match="MASTER_ADDR='no.such.host.invalid' cannot"):
        distributed.join_process_group(torch.device("cpu"), info)


def test_the_twelfth_trials_minor_faults_at_the_python_doors(tiny_run, tmp_path):
    """Each a raw error, a message that misled, or a write into the current folder."""
    from transformer.decoder_only import sample
    from transformer.decoding import beam_search
    from transformer.engine.evaluate import evaluate_pairs

    ckpt = load_checkpoint(tiny_run)
    src = torch.tensor([[5, 6, 7]])
    pairs = [("Ein Hund.", "A dog.")]
    cases = [
        (  # AttributeError: 'Checkpoint' object has no attribute 'config'
            lambda: beam_search(ckpt, src),
            InputTypeError,
            "model must be a Transformer, got Checkpoint: pass the checkpoint's .model",
        ),
        (  # AttributeError: 'list' object has no attribute 'device'
            lambda: sample(ckpt.model, [[5, 6, 7]]),
            InputError,
            "src must be a (B, S) tensor of token ids (int64), got list",
        ),
        (lambda: sample(None, None), InputTypeError, "model must be a Transformer"),
        (  # wrote val.hyp and val.json into the current folder
            lambda: evaluate_pairs(ckpt, pairs, "val", out_dir=""),
            InputError,
            "out_dir='' is empty: give a name",
        ),
        (  # "... or a run's folder), got str": a run's folder was what it got
            lambda: evaluate_pairs(str(tiny_run), pairs, "val"),
            InputError,
            f"got the path {str(tiny_run)!r:.60}: load it first",
        ),
    ]
    for call, error, phrase in cases:
        with pytest.raises(error) as info:
            call()
        assert phrase in str(info.value), str(info.value)
    assert not list(Path.cwd().glob("val.*"))


def test_a_model_rule_in_a_config_file_reads_as_a_sentence(tmp_path):
    """It read "cfg.toml: model.a decoder-only model (num_encoder_layers = 0) ...": the
    setting's prefix glued onto a rule's sentence."""
    path = tmp_path / "c.toml"
    path.write_text("[model]\nnum_encoder_layers = 0\nshare_embeddings = false\n")
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_toml(path)
    assert f"{path}: [model]: a decoder-only model (num_encoder_layers = 0)" in str(
        info.value
    ), str(info.value)


def test_sentencepieces_advice_names_this_packages_settings(
    tmp_path, monkeypatch, capsys
):
    """It named "--character_coverage option", a flag of sentencepiece's own command
    line: train_tokenizer has an argument of that name, a run's config has not."""
    from transformer.tokenizer import train_tokenizer

    with pytest.raises(InputError) as info:
        train_tokenizer(["abcdefghijklmnop qrstuvwxyz"] * 50, tmp_path / "t", 8)
    assert "decrease character_coverage (an argument here)" in str(info.value)
    config = write_config(
        tmp_path / "c.toml", tiny_config(tmp_path, data__vocab_size=5)
    )
    argv = ["train", "--config", config, "--no-progress"]
    status, out, err = run_main(argv, None, capsys, monkeypatch)
    assert status == 2 and "raise data.vocab_size" in err, err
    assert "character_coverage" not in err, err


def test_a_missing_data_file_of_a_relative_name_says_where_it_was_looked_for(
    tmp_path, monkeypatch, capsys
):
    """`cd elsewhere; transformer train --config ../proj/c.toml` said only that
    corp/train.de does not exist: a relative name is read from the current folder."""
    files = ["corp/train.de", "corp/train.en"]
    data = tiny_config(
        tmp_path,
        data__corpus="parallel",
        data__train_files=files,
        data__valid_files=files,
    )
    config = write_config(tmp_path / "c.toml", data)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    argv = ["train", "--config", config, "--no-progress"]
    assert_one_line_error(
        *run_main(argv, None, capsys, monkeypatch),
        f"a relative name is read from the current folder, from {tmp_path / 'elsewhere'}",
    )


# ---- Left by the fifteenth trial (issue 54) ------------------------------------------


def test_a_data_variable_that_names_a_file_is_refused_not_passed_over(
    tmp_path, monkeypatch
):
    """TRANSFORMER_DATA=/dev/null (or a file) was skipped without a word, and the
    corpora came from elsewhere."""
    from transformer.engine.corpus_files import data_search_path
    from transformer.errors import CorpusNotFoundError

    for name in ("/dev/null", str(tmp_path / "notes.txt")):
        (tmp_path / "notes.txt").write_text("mine")
        monkeypatch.setenv("TRANSFORMER_DATA", name)
        with pytest.raises(
            CorpusNotFoundError, match=f"TRANSFORMER_DATA={name} is not"
        ):
            data_search_path()
    monkeypatch.setenv("TRANSFORMER_DATA", str(tmp_path))
    assert data_search_path()[0] == tmp_path


def test_tiled_attention_gives_nan_where_attention_does_not_a_silent_zero():
    """A NaN in Q or an infinite key gave zeros in tiled_attention, NaN in attention
    and in SDPA: a divergence was hidden."""
    from transformer import attention, tiled_attention

    g = torch.Generator().manual_seed(0)
    Q, K, V = (
        torch.randn(2, n, 8, generator=g, dtype=torch.float64) for n in (5, 7, 7)
    )
    Qn, Ki, Qi = Q.clone(), K.clone(), Q.clone()
    Qn[0, 1, 0], Ki[1, 2, 3] = math.nan, math.inf
    # every score of a row -inf (the review: it was taken for a row with no key)
    Qi[0, 2], Kp = -math.inf, K.abs() + 0.1
    for q, k in ((Qn, K), (Q, Ki), (Qi, Kp)):
        tiled, plain = tiled_attention(q, k, V, block=2), attention(q, k, V)[0]
        assert torch.equal(tiled.isnan(), plain.isnan()) and tiled.isnan().any()
        assert torch.allclose(tiled.nan_to_num(), plain.nan_to_num())


@pytest.mark.parametrize(
    "state_dicts, phrase",
    [  # each averaged without a word before, or named the wrong fault
        ([{}, {}], "state_dicts[0] is empty: the state dicts hold no weights"),
        (
            [{"x": torch.tensor([1.0])}, {"x": torch.tensor([math.nan])}],
            "state_dicts[1]['x'] holds NaN or infinite weights",
        ),
        (
            [{"x": torch.tensor([1.0])}, {"x": torch.tensor([1.0]).double()}],
            "state_dicts[1]['x'] is torch.float64 on cpu, but the first",
        ),
        (
            [{"x": torch.tensor([1.0])}, {"x": torch.tensor([1.0], device="meta")}],
            "state_dicts[1]['x'] is torch.float32 on meta, but the first",
        ),
    ],
)
def test_average_weights_refuses_empty_non_finite_and_mixed_state_dicts(
    state_dicts, phrase
):
    from transformer.averaging import average_weights

    with pytest.raises(InputError) as info:
        average_weights(state_dicts)
    assert phrase in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_average_weights_returns_weights_without_a_graph():
    """A parameter's tensors gave an average with a grad_fn, holding the graph."""
    from transformer.averaging import average_weights

    w = torch.nn.Linear(2, 2)
    mean = average_weights([dict(w.named_parameters())] * 2)
    assert all(t.grad_fn is None and not t.requires_grad for t in mean.values())


def test_an_unknown_model_config_keyword_is_the_config_files_one_line():
    """ModelConfig(..., foo=1) raised Python's raw TypeError."""
    from transformer import ModelConfig

    with pytest.raises(ConfigError) as info:
        ModelConfig(10, 10, foo=1)
    assert str(info.value).startswith(
        "unknown setting(s) ['foo'] in ModelConfig; the known settings there are "
        "['src_vocab_size', 'tgt_vocab_size', 'd_model'"
    )


def test_a_symlink_loop_on_the_way_of_a_config_or_an_out_dir_is_named(
    tmp_path, monkeypatch, capsys
):
    """`--config l1/x.toml` said the file "does not exist", `--out-dir l1/run` that no
    folder could be made in "." (l1 and l2 point at each other)."""
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    monkeypatch.chdir(tmp_path)
    tiny = str(ROOT / "configs" / "tiny.toml")
    for argv in (["--config", "l1/x.toml"], ["--config", tiny, "--out-dir", "l1/r"]):
        assert_one_line_error(
            *run_main(["train", *argv], None, capsys, monkeypatch),
            "a symbolic link on its way points back to itself (a loop)",
        )


def test_tiled_attention_is_refused_only_for_what_it_holds(monkeypatch):
    """The sixteenth trial: tiled attention was refused for the (T, S) scores it never
    holds (attention's estimate), on lengths it computes in a few hundred MB."""
    import transformer.memory as memory
    from transformer import attention, tiled_attention

    monkeypatch.setattr(memory, "available_memory", lambda device="cpu": 300 << 20)
    x = torch.randn(1, 6000, 8)  # scores 6000 x 6000 floats: 432 MB, three times
    with pytest.raises(InputError, match="attention.s scores needs about 0.4 GB"):
        attention(x, x, x)
    assert tiled_attention(x, x, x, block=256).shape == (1, 6000, 8)


def test_a_checkpoint_pruned_while_it_is_read_is_read_again_from_the_newer(
    tiny_run, tmp_path, monkeypatch
):
    """The sixteenth trial: evaluating a run that saves as it trains failed 8 times in
    9 ("disappeared while it was read: try again", and again): the run had pruned the
    checkpoint that `latest` named when the load began. Now the load follows `latest`
    again, up to three times."""
    import transformer.engine.loading as loading

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    newest = latest(run)
    older = run / "checkpoints" / "step-00000001"
    shutil.copytree(newest, older)
    (run / "checkpoints" / "latest").write_text(older.name)
    read = loading.read_model_config

    def pruned_as_it_is_read(directory):
        if directory.name == older.name:  # the run saves, points latest on, prunes
            (run / "checkpoints" / "latest").write_text(newest.name)
            shutil.rmtree(older)
        return read(directory)

    monkeypatch.setattr(loading, "read_model_config", pruned_as_it_is_read)
    assert load_checkpoint(run).path == newest
    with pytest.raises(CheckpointError):  # a checkpoint folder named itself: said
        shutil.copytree(newest, older)
        load_checkpoint(older)


def test_a_misspelt_option_of_evaluate_checkpoint_names_that_function(tiny_run):
    """The sixteenth trial: beams=3 was a TypeError naming evaluate_pairs(), a function
    the user never called."""
    from transformer.engine.evaluate import evaluate_checkpoint

    with pytest.raises(TypeError, match=r"^evaluate_checkpoint\(\) got an unexpected"):
        evaluate_checkpoint(load_checkpoint(tiny_run), "val", beams=3)


def test_attention_maps_says_when_it_cuts_a_text_to_the_models_length(tiny_run):
    """The sixteenth trial: a long translation was cut to the model's length without a
    word (translate warns), and the maps' labels stopped where the text went on."""
    from transformer.visualize import attention_maps

    ckpt = load_checkpoint(tiny_run)
    with pytest.warns(UserWarning, match="the translation has .* tokens but the model"):
        maps = attention_maps(ckpt, SENTENCE, "dog " * 500)
    assert len(maps.target) == ckpt.model.config.max_len


def test_the_sixteenth_trials_last_minor_faults(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """The explorer said "the sentence is empty" of one of many, and drew 1,000
    sentences' maps for half an hour without a word; translate --model of an ONNX
    export said "no checkpoint found"; `transformer --version` was refused."""
    pytest.importorskip("ipywidgets")
    from transformer.explorer import MOST_SENTENCES, attention_explorer

    ckpt = load_checkpoint(tiny_run)
    with pytest.raises(InputError, match=r"^sentences\[1\] is empty: give it a word"):
        attention_explorer(ckpt, [SENTENCE, "  "])
    with pytest.raises(InputError, match=f"give at most {MOST_SENTENCES}$"):
        attention_explorer(ckpt, [SENTENCE] * (MOST_SENTENCES + 1))
    export = tmp_path / "export"
    export.mkdir()
    for name in ("translator.json", "encoder.onnx"):
        (export / name).write_text("{}")
    assert_one_line_error(
        *run_main(
            ["translate", "--model", export, SENTENCE], None, capsys, monkeypatch
        ),
        "is an ONNX export (transformer export-onnx), not a checkpoint: translate with",
    )
    with pytest.raises(SystemExit) as info:
        run_main(["--version"], None, capsys, monkeypatch)
    assert info.value.code == 0 and capsys.readouterr().out.startswith("transformer ")


def test_pruning_removes_only_the_checkpoints_a_run_made(tiny_run, tmp_path, caplog):
    """The seventeenth trial: keep_last removed every checkpoints/step-* beyond it,
    a user's copy (step-00000013-good), a folder of notes (which took a place of
    keep_last, so a real checkpoint went instead), a file put into a step and a tool's
    analysis/ with it. Now only a folder a run made, untouched, is removed."""
    from transformer.engine.checkpoints import prune_checkpoints

    checkpoints = tmp_path / "run" / "checkpoints"
    shutil.copytree(tiny_run / "checkpoints", checkpoints)
    newest = latest(tmp_path / "run")
    plain, noted = (checkpoints / f"step-0000000{i}" for i in (1, 2))
    for step in (plain, noted, checkpoints / "step-00000013-good"):
        shutil.copytree(newest, step)
    (noted / "analysis").mkdir()
    (noted / "analysis" / "head_ablation.json").write_text("{}")
    (checkpoints / "step-notes").mkdir()
    (checkpoints / "step-notes" / "a.txt").write_text("mine")
    with caplog.at_level("WARNING"):
        prune_checkpoints(checkpoints, keep_last=1)
    left = sorted(p.name for p in checkpoints.iterdir())
    assert not plain.exists() and newest.name in left
    assert {"step-00000002", "step-00000013-good", "step-notes"} <= set(left)
    assert f"{noted} holds files a run does not write: kept" in caplog.text
