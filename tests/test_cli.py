"""The command line: `transformer translate` and `transformer evaluate`, and every bad input they must refuse.

Each bad input ends in one `error: ...` line on standard error and exit status 2, never a traceback.
The commands run as a user runs them, in a subprocess, on a checkpoint of configs/tiny.toml; the refusals
that need no process of their own (bad numbers, a missing or damaged model folder, `--help`) run the same
`main(argv)` in this one, its standard streams captured (`in_process`): seconds faster each, since a new
process spends them importing torch.
"""

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.engine.cli import main
from transformer.engine.command_input import read_input_lines, stdin_lines
from transformer.errors import CommandError

ROOT = Path(__file__).resolve().parents[1]


def transformer(
    *args, stdin: bytes | str | None = None, cwd=None
) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "transformer", *args],
        input=data,
        capture_output=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )


def in_process(*args: str) -> subprocess.CompletedProcess:
    """`transformer ARGS` as `main(ARGS)` in this process, standard output and error
    captured as bytes (standard input empty): what the subprocess would report."""
    out, err = io.BytesIO(), io.BytesIO()
    streams = (
        io.TextIOWrapper(io.BytesIO(), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", write_through=True),
    )
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        try:
            status = main(list(args))
        except SystemExit as e:  # argparse's --help and its own refusals
            status = e.code
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    with contextlib.suppress(ValueError):
        streams[1].flush(), streams[2].flush()
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert (
        "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1
    ), err
    for fragment in fragments:
        assert fragment in err, err


def test_read_lines_keeps_empty_lines_and_refuses_bytes_that_are_not_utf8():
    assert read_input_lines(b"a\n\nb\n") == ["a", "", "b"]
    assert read_input_lines(b"a\r\nb") == ["a", "b"]
    assert read_input_lines("ein\u2028Satz\x1cmehr\n".encode()) == [
        "ein\u2028Satz\x1cmehr"
    ]  # one input line, one output line
    with pytest.raises(CommandError, match="not UTF-8: byte 0xe4 at offset 1"):
        read_input_lines("Männer".encode("latin-1"))


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="a pseudo-terminal (POSIX)")
def test_translate_at_a_terminal_says_how_to_end_its_input_and_one_ctrl_d_ends_it(
    monkeypatch, capsys
):
    """At a terminal the input is read line by line: the hint comes before the wait,
    and one Ctrl-D at the start of a line ends the input (a read that filled its
    block waited for a second one). Piped input gets no hint."""
    import pty
    import select

    hint = (
        "reading sentences from standard input, one per line; end with Ctrl-D "
        "at the start of a line (Ctrl-Z Enter on Windows)"
    )
    keyboard, terminal = pty.openpty()
    code = (
        "from transformer.engine.command_input import stdin_lines; "
        "print(stdin_lines(), flush=True)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    try:
        ready, _, _ = select.select([p.stderr], [], [], 60)
        assert ready and p.stderr.readline().strip() == hint
        os.write(keyboard, "Ein Hund.\nZwei Männer.\n".encode())
        os.write(keyboard, b"\x04")  # Ctrl-D at the start of a line
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
        os.close(keyboard)
    assert out.strip() == "['Ein Hund.', 'Zwei Männer.']"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Ein Hund.\n")))
    assert stdin_lines() == ["Ein Hund."] and capsys.readouterr().err == ""


def test_help_of_every_command_works():
    for command in ("translate", "evaluate", "train"):
        result = in_process(command, "--help")
        assert (
            result.returncode == 0
            and b"usage: transformer " + command.encode() in result.stdout
        )


def test_translate_gives_one_line_per_input_line_in_order_with_empty_lines_kept(
    tiny_run,
):
    lines = "Ein Hund läuft.\n\nZwei Männer stehen auf der Straße.\nEin Kind spielt.\n"
    result = transformer(
        "translate",
        "--model",
        str(tiny_run),
        "--beam",
        "2",
        "--batch-size",
        "2",
        stdin=lines,
    )
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode().split("\n")
    assert (
        len(out) == 5 and out[-1] == "" and out[1] == ""
    )  # four lines, each ended by a newline
    # each alone, and greedy: the same command in this process (`in_process`)
    single = [
        in_process("translate", "--model", str(tiny_run), "--beam", "2", text)
        .stdout.decode()
        .rstrip("\n")
        for text in ("Ein Hund läuft.", "Ein Kind spielt.")
    ]
    assert [out[0], out[3]] == single
    greedy = in_process(
        "translate",
        "--model",
        str(tiny_run),
        "--beam",
        "1",
        "--max-len",
        "3",
        "Ein Hund läuft.",
    )
    assert greedy.returncode == 0 and len(greedy.stdout.decode().split()) <= 3


def test_translate_cuts_a_too_long_line_with_one_warning_that_names_it(tiny_run):
    long = " ".join(["Hund"] * 300)
    result = transformer(
        "translate",
        "--model",
        str(tiny_run),
        "--beam",
        "1",
        stdin=f"Ein Hund.\n{long}\n",
    )
    assert result.returncode == 0
    err = result.stderr.decode().strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("warning: line 2 has ")
        and "at most 64" in err[0]
    )
    assert len(result.stdout.decode().splitlines()) == 2


def test_translate_refuses_input_that_is_not_utf8(tiny_run):
    one_line_error(
        transformer(
            "translate", "--model", str(tiny_run), stdin="Männer\n".encode("latin-1")
        ),
        "not UTF-8",
        "offset 1",
    )


def test_a_missing_or_corrupt_model_directory_is_a_one_line_error(tiny_run, tmp_path):
    one_line_error(
        in_process("translate", "--model", str(tmp_path / "nothing"), "Hallo"),
        "no model at",
    )
    broken = tmp_path / "broken"
    shutil.copytree(
        tiny_run
        / "checkpoints"
        / (tiny_run / "checkpoints" / "latest").read_text().strip(),
        broken,
    )
    weights = broken / "model.safetensors"
    weights.write_bytes(
        weights.read_bytes()[: weights.stat().st_size // 2]
    )  # truncated, as by a failed copy
    one_line_error(
        in_process("translate", "--model", str(broken), "Hallo"),
        "damaged or was cut short",
        str(broken),
    )
    (broken / "model_config.json").write_text("{not json")
    one_line_error(
        in_process("evaluate", "--model", str(broken), "--split", "val"),
        "model_config.json is damaged",
    )


def test_bad_numbers_and_an_unknown_split_are_one_line_errors(tiny_run):
    one_line_error(
        in_process("translate", "--model", str(tiny_run), "--beam", "0", "Hallo"),
        "beam_size=0: give an integer from 1",
    )
    one_line_error(
        in_process("translate", "--model", str(tiny_run), "--batch-size", "0", "Hallo"),
        "batch_size=0 must be an integer >= 1",
    )
    one_line_error(
        in_process("evaluate", "--model", str(tiny_run), "--split", "test_2099"),
        "unknown split 'test_2099'",
        "test_2016_flickr",
    )
    one_line_error(
        in_process("translate", "--model", str(tiny_run), "--device", "tpu", "Hallo")
    )


def test_evaluate_prints_signatures_and_writes_the_translations_beside_the_scores(
    tiny_run, tmp_path
):
    out = tmp_path / "eval"
    result = transformer(
        "evaluate",
        "--model",
        str(tiny_run),
        "--split",
        "val",
        "--limit",
        "20",
        "--beam",
        "2",
        "--out-dir",
        str(out),
    )
    assert result.returncode == 0, result.stderr.decode()
    text = result.stdout.decode()
    assert (
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in text
        and "chrF" in text
    )
    assert "BLEU, lowercased" in text
    assert len((out / "val.hyp").read_text(encoding="utf-8").splitlines()) == 20
    assert '"split": "val"' in (out / "val.json").read_text()


def test_an_empty_out_dir_is_refused_not_read_as_the_current_folder(tmp_path):
    """`--out-dir ""` wrote val.hyp and val.json into the current folder (Path("") is
    "."): refused, as train and export-onnx refuse an empty folder name."""
    result = in_process("evaluate", "--split", "val", "--out-dir", "")
    assert result.returncode == 2
    assert b"--out-dir: an empty name" in result.stderr
