"""The course's tools: ship_model refuses what it would destroy and replaces whole; check_in_jupyterlab stops
a server and its kernel that ignore SIGTERM; gqa_decoding measures the shipped shape and a cache of the
formula's size; onnx_decoding_speed's ratios carry their interval and test."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer.engine.loading import load_checkpoint
from transformer.engine.model_files import MODEL_FORMAT

from helpers import ROOT, latest, listing, load_tool

# ---------------------------------------------------------------- tools


def gone(pid: int) -> bool:
    try:
        return (
            Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        )  # a zombie is gone too
    except FileNotFoundError:
        return True


@pytest.mark.skipif(
    not hasattr(os, "killpg") or not Path("/proc").is_dir(),
    reason="process groups and /proc",
)
def test_check_in_jupyterlab_kills_a_server_and_its_kernel_that_ignore_sigterm(capsys):
    pytest.importorskip("playwright.sync_api")
    tool = load_tool("check_in_jupyterlab")
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
        "time.sleep(60)"
    )  # a process that ignores SIGTERM, as a server slow to stop does
    server_code = (
        "import subprocess, sys; kernel = subprocess.Popen([sys.executable, '-c', %r], "
        "stdout=subprocess.PIPE); kernel.stdout.readline(); print(kernel.pid, flush=True); exec(%r)"
    ) % (stubborn, stubborn)
    server = subprocess.Popen(
        [sys.executable, "-c", server_code],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    kernel = int(server.stdout.readline())
    assert server.stdout.readline() == b"up\n"
    start = time.monotonic()
    tool.stop(server, grace=1)
    assert server.poll() is not None and time.monotonic() - start < 10
    end = time.monotonic() + 5
    while not gone(kernel) and time.monotonic() < end:
        time.sleep(0.05)
    assert gone(kernel)
    assert "did not stop within 1 s" in capsys.readouterr().err


def ship_args(run, out) -> list[str]:
    """`ship_model.py ship` of the run's latest checkpoint into `out`."""
    return [
        "ship",
        "--run",
        str(run),
        "--checkpoints",
        latest(run).name,
        "--to",
        str(out),
    ]


def test_ship_model_refuses_an_existing_folder_and_replaces_it_whole_when_asked(
    tiny_run, tmp_path, capsys
):
    tool = load_tool("ship_model")
    out = tmp_path / "shipped"
    out.mkdir()
    for stale in (
        "src_tokenizer.model",
        "tgt_tokenizer.model",
        "README.md",
        "model.safetensors",
        "averaged_checkpoints.json",
    ):
        (out / stale).write_text("from an older model")
    before = listing(tmp_path)
    args = ship_args(tiny_run, out)
    assert tool.main(args) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and err.count("\n") == 1 and "pass --replace" in err
    )
    assert listing(tmp_path) == before
    assert tool.main(args + ["--replace"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "shipped"
    ]  # no temporary or old folder beside it
    names = {p.name for p in out.iterdir()}
    assert "tokenizer.model" in names and not names & {
        "src_tokenizer.model",
        "tgt_tokenizer.model",
        "README.md",
    }
    assert load_checkpoint(out).src_tokenizer.vocab_size == 1000
    from safetensors import safe_open

    with safe_open(
        str(out / "model.safetensors"), framework="pt"
    ) as f:  # the weights carry their config
        written = json.loads((out / "model_config.json").read_text())
        assert (
            written.pop("format") == MODEL_FORMAT
        )  # the file's layout, then the settings
        assert json.loads(f.metadata()["model_config"]) == written


def test_ship_model_keeps_only_named_hand_written_records_and_checks_the_names_before_writing(
    tiny_run, tmp_path, capsys
):
    tool = load_tool("ship_model")
    out = tmp_path / "shipped"
    args = ship_args(tiny_run, out)
    assert tool.main(args) == 0
    (out / "experiments").mkdir()
    (out / "experiments" / "tried.json").write_text('{"val": 1.0}')
    (out / "README.md").write_text("the old card")
    (out / "decoding.json").write_text(
        '{"beam_size": 99, "alpha": 9.0}'
    )  # the old model's setting
    before = listing(tmp_path)
    for keep, replace, message in [
        (["experiments"], False, "pass --replace"),
        (["decoding.json"], True, "ship writes decoding.json for the new model"),
        (["../shipped"], True, "directly inside"),
        (["experiments/tried.json"], True, "directly inside"),
        (["analysis"], True, "does not exist (nothing to keep)"),
    ]:
        status = tool.main(args + ["--replace"] * replace + ["--keep", *keep])
        err = capsys.readouterr().err
        assert (
            status == 2
            and err.startswith("error: ")
            and err.count("\n") == 1
            and message in err
        ), (keep, err)
        assert listing(tmp_path) == before  # refused before anything was written
    assert tool.main(args[:-1] + [str(tmp_path / "new"), "--keep", "experiments"]) == 2
    assert (
        "pass --replace too" in capsys.readouterr().err and listing(tmp_path) == before
    )
    assert tool.main(args + ["--replace", "--keep", "experiments"]) == 0
    assert (out / "experiments" / "tried.json").read_text() == '{"val": 1.0}'
    assert not (out / "README.md").exists()  # not named: gone with the old model
    assert json.loads((out / "decoding.json").read_text()) == {
        "beam_size": 4,
        "alpha": 0.6,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shipped"]


@pytest.mark.parametrize(
    "target, words",
    [  # each was replaced without a word (the thirteenth trial): a file, the run itself
        ("a file", "is a file, not a folder"),
        ("the run", "is the run it reads"),
        ("a step of the run", "lies in it or holds it"),
        ("the folder above the run", "lies in it or holds it"),
        ("a folder of the user's", "holds none (no model.safetensors"),
        ("the current folder", "is the current folder or holds it"),
        ("a link to a shipped model", "is a link: give the folder it points to"),
        # the fifteenth: another run's checkpoint (it could not be resumed), a model
        # from elsewhere, and a link loop (a traceback)
        ("another run's checkpoint", "lies in a checkpoints/ folder, which a training"),
        ("a downloaded model", "holds none (no model.safetensors"),
        ("a path through a link loop", "points back to itself (a loop)"),
    ],
)
def test_ship_model_replaces_only_a_model_shipped_before(
    target, words, tiny_run, tmp_path, capsys, monkeypatch
):
    tool = load_tool("ship_model")
    run = tmp_path / "runs" / "run"
    shutil.copytree(tiny_run, run)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (tmp_path / "config.toml").write_text("mine")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    (tmp_path / "shipped").mkdir()  # a model shipped before, and a link to it
    (tmp_path / "shipped" / "model.safetensors").write_text("weights")
    (tmp_path / "link").symlink_to(tmp_path / "shipped")
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other)
    (tmp_path / "downloaded").mkdir()
    for name in ("model.safetensors", "config.json"):
        (tmp_path / "downloaded" / name).write_text("theirs")
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    out = {
        "a file": tmp_path / "config.toml",
        "the run": run,
        "a step of the run": latest(run),
        "the folder above the run": tmp_path / "runs",
        "a folder of the user's": mine,
        "the current folder": Path("."),
        "a link to a shipped model": tmp_path / "link",
        "another run's checkpoint": latest(other),
        "a downloaded model": tmp_path / "downloaded",
        "a path through a link loop": tmp_path / "l1" / "model",
    }[target]
    before = listing(tmp_path)
    assert tool.main(ship_args(run, out) + ["--replace"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--beam", "0"], "'0': give a whole number >= 1"),
        (["--alpha", "inf"], "'inf': give a length penalty from 0 to 10"),
    ],
)
def test_ship_model_checks_its_decoding_options_before_it_works(
    argv, words, tiny_run, tmp_path, capsys
):
    """They were found in the temporary folder, by a message naming it and advice that
    could not be followed."""
    tool = load_tool("ship_model")
    with pytest.raises(SystemExit) as info:
        tool.main(ship_args(tiny_run, tmp_path / "out") + argv)
    assert info.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ship_model_measures_again_what_was_measured_on_fewer_sentences_or_other_weights(
    tiny_run, tmp_path, capsys
):
    """--limit 2 then --limit 3 reused the first scores ("measured before"), as a step
    rewritten with other weights did; a selection.json that is not one was a
    traceback."""
    tool = load_tool("ship_model")
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "selection.json").write_text('{"rows": 5}')
    measure = ["measure", "--run", str(run), "--last", "1", "--limit"]
    assert tool.main(measure + ["2"]) == 0
    first = capsys.readouterr()
    assert "is not an earlier measurement" in first.err
    assert "measured before" not in first.out
    assert tool.main(measure + ["2"]) == 0
    assert capsys.readouterr().out.count("measured before") == 10
    assert tool.main(measure + ["3"]) == 0
    assert "measured before" not in capsys.readouterr().out
    # a step's weights are named by their digests: other weights, another measurement
    sums = latest(run) / "SHA256SUMS"
    same = tool.weights_id([latest(run)])
    sums.write_text(sums.read_text().replace("0", "1", 1))
    assert tool.weights_id([latest(run)]) != same


def test_tools_never_overwrite_a_file_or_delete_a_folder_of_the_users(
    tmp_path, monkeypatch
):
    """The fourteenth trial: glossary_finetune.py --out overwrote any file (a system
    file once), training_chapter_run.py would have, gpu_wheels.py --out deleted any
    folder. A result is written only over an earlier result, wheels only over wheels."""
    from transformer.errors import InputError
    from transformer.files import result_file

    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    with pytest.raises(InputError, match="is no earlier result"):
        result_file(mine)
    with pytest.raises(InputError, match="is not a file"):
        result_file(tmp_path)
    earlier = tmp_path / "r.json"
    earlier.write_text('{"what": "an earlier result"}')
    assert result_file(earlier) == earlier
    assert result_file(tmp_path / "new.json") == tmp_path / "new.json"
    (tmp_path / "l1").symlink_to(tmp_path / "l2")  # a loop was found after the work
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    with pytest.raises(InputError, match="points back to itself"):
        result_file(tmp_path / "l1" / "r.json")
    folder = tmp_path / "v"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "thesis.txt").write_text("mine")
    monkeypatch.setattr(sys, "argv", ["gpu_wheels.py", "--out", str(folder)])
    with pytest.raises(SystemExit) as info:
        load_tool("gpu_wheels").main()
    assert (
        info.value.code == 2 and (folder / "sub" / "thesis.txt").read_text() == "mine"
    )


def test_modern_block_runs_shipped_budget_trains_the_fast_recipe_with_either_block(
    tmp_path,
):
    from transformer.engine.config import TrainConfig

    tool = load_tool("modern_block_runs")
    budget = tool.BUDGETS["shipped"]
    fast = TrainConfig.from_toml(tool.ROOT / "configs" / "multi30k-fast.toml")
    modern = tool.run_config(budget, "all", 1, 1.0, tmp_path)
    paper = tool.run_config(budget, "baseline", 1, 1.0, tmp_path)
    assert modern.model == fast.model and modern.optim == fast.optim
    assert modern.data == fast.data and modern.precision == fast.precision
    assert (paper.model.norm, paper.model.positions, paper.model.feed_forward) == (
        "layer",
        "sinusoidal",
        "relu",
    )
    assert paper.model.bias and paper.optim == fast.optim
    swept = tool.run_config(budget, "baseline", 0, 2.0, tmp_path)
    assert swept.optim.lr_factor == 2 * fast.optim.lr_factor
    names = [budget.run_name(*run) for run in budget.runs]
    assert len(set(names)) == len(names)  # no two runs share a folder
    for arm in ("baseline", "all"):  # three seeds of each at the recipe's rate
        assert {s for v, s, x in budget.runs if v == arm and x == 1.0} == {0, 1, 2}
    small = tool.BUDGETS["small"]
    assert small.run_name("rms", 2, 1.0) == "rms-s2"  # the folders already shipped
    assert (small.hypotheses / "rms-s2" / "val.hyp").is_file()
    # float32 where bf16 would crawl: its own folder, and the config says float32
    in_fp32 = tool.run_config(budget, "baseline", 0, 2.0, tmp_path, "fp32")
    assert in_fp32.precision == "fp32" and fast.precision == "bf16"
    assert Path(in_fp32.out_dir).name == "baseline-lr2-s0-fp32"
    assert in_fp32.optim == swept.optim and in_fp32.model == swept.model


def test_gqa_decoding_measures_the_shipped_shape_and_a_cache_of_the_formulas_size():
    import torch

    from transformer.attention_cost import kv_cache_bytes
    from transformer.engine.config import TrainConfig
    from transformer.engine.model_config import ModelConfig, build_model

    tool = load_tool("gqa_decoding")
    shape = tool.shipped_shape()
    shipped = TrainConfig.from_toml(tool.SHIPPED)
    assert shape["src_vocab_size"] == shipped.data.vocab_size and shape["dropout"] == 0
    assert {k: shape[k] for k in ("d_model", "num_heads", "d_ff")} == {
        k: getattr(shipped.model, k) for k in ("d_model", "num_heads", "d_ff")
    }
    small = {**shape, "d_model": 32, "d_ff": 64, "src_vocab_size": 50}
    small["tgt_vocab_size"] = 50
    for kv in (4, 1):
        config = ModelConfig(**{**small, "kv_heads": kv})
        torch.manual_seed(0)
        model = build_model(config).eval()
        src = torch.randint(4, 50, (2, 5))
        result = tool.decode(model, src, steps=8)
        formula = kv_cache_bytes(config, 8, 5, batch=2)
        assert (
            result["cache_bytes"]
            == formula["self_attention"] + formula["cross_attention"]
        )
        assert 0 < result["last_quarter_seconds"] <= result["seconds"]


def test_onnx_decoding_speed_summarises_the_repeats_ratios_on_their_logarithms():
    import math

    tool = load_tool("onnx_decoding_speed")
    faster = tool.ratio_summary([1.9, 2.0, 2.1, 2.05, 1.95])
    assert faster["geometric_mean"] == pytest.approx(
        math.exp(sum(map(math.log, [1.9, 2.0, 2.1, 2.05, 1.95])) / 5), abs=1e-3
    )
    low, high = faster["interval_95"]
    assert 1.85 < low < faster["geometric_mean"] < high < 2.15
    assert faster["p_value"] < 1e-4 and faster["range"] == [1.9, 2.1]
    # ratios either side of 1: the test does not reject, the interval holds 1
    even = tool.ratio_summary([0.9, 1.1, 1.05, 0.95])
    assert even["p_value"] > 0.5 and even["interval_95"][0] < 1 < even["interval_95"][1]


def test_modern_block_runs_decoder_only_budget_changes_only_the_architecture(
    tmp_path,
):
    tool = load_tool("modern_block_runs")
    budget = tool.BUDGETS["decoder_only"]
    pair = tool.run_config(budget, "encoder_decoder", 0, 1.0, tmp_path)
    small = tool.run_config(tool.BUDGETS["small"], "baseline", 0, 1.0, tmp_path)
    assert pair.model == small.model and pair.optim == small.optim
    assert pair.data == small.data
    for mask in ("causal", "prefix"):
        alone = tool.run_config(budget, mask, 1, 1.0, tmp_path)
        layers = alone.model.num_encoder_layers, alone.model.num_decoder_layers
        assert layers == (0, 5)
        assert alone.model.source_mask == mask and alone.optim == small.optim
        assert Path(alone.out_dir).name == f"{mask}-s1"
    runs = {(v, s) for v, s, _ in budget.runs}
    assert runs == {(v, s) for v in tool.DECODER_ONLY for s in range(5)}
    assert json.loads(tool.SHIPPED_DECODING.read_text())["beam_size"] > 1


def test_decoder_only_speed_builds_the_runs_shapes_and_counts_the_source_in_one_sequence():
    import torch

    tool = load_tool("decoder_only_speed")
    runs = load_tool("modern_block_runs")
    pair, alone = tool.build("encoder-decoder"), tool.build("causal")
    assert len(pair.encoder.layers) == runs.SHAPE["num_encoder_layers"]
    blocks = runs.DECODER_ONLY["causal"]["num_decoder_layers"]
    assert len(alone.decoder.layers) == blocks
    assert tool.build("prefix").config.source_mask == "prefix"
    # the decoder-only model runs 2L positions through 5 blocks: more arithmetic
    assert tool.multiply_adds("causal") > tool.multiply_adds("encoder-decoder")
    src = torch.randint(4, tool.VOCAB, (2, 5))
    result = tool.generate(alone, src)
    D, blocks, positions = 128, 5, 5 + tool.STEPS  # the last token is not fed
    assert result["cache_bytes"] == 2 * blocks * 2 * positions * D * 4


def test_english_lm_cuts_each_sentence_into_a_prompt_of_one_to_three_words_and_the_rest():
    tool = load_tool("english_lm")
    sentences = ["A dog runs .", "Two men", "Hello", "A man in a red shirt sings ."]
    pairs = tool.continuation_pairs(sentences, seed=0)
    assert len(pairs) == 3  # one word cannot be cut
    for (prompt, rest), s in zip(pairs, [sentences[0], sentences[1], sentences[3]]):
        assert f"{prompt} {rest}" == s and 1 <= len(prompt.split()) <= 3 and rest
    assert tool.continuation_pairs(sentences, seed=0) == pairs


def test_ship_model_keeps_a_kept_link_a_link(tiny_run, tmp_path):
    """--keep of a link to another folder left a copy of that folder."""
    tool = load_tool("ship_model")
    out = tmp_path / "shipped"
    assert tool.main(ship_args(tiny_run, out)) == 0
    (tmp_path / "records").mkdir()
    (out / "linked").symlink_to(tmp_path / "records")
    assert tool.main(ship_args(tiny_run, out) + ["--replace", "--keep", "linked"]) == 0
    assert (out / "linked").is_symlink()
    assert (out / "linked").resolve() == (tmp_path / "records").resolve()


BAD_ARGUMENTS = [  # tool, arguments, words of its one line
    ("attention_cost", ["--lengths", "0"], "'0': give a whole number >= 1"),
    ("attention_cost", ["--lengths", "99999999"], "needs about"),
    ("gqa_decoding", ["--steps", "3"], "'3': give a whole number >= 4"),
    ("gqa_decoding", ["--steps", "999999999"], "--steps 999999999: the model"),
    ("decoder_only_speed", ["--repeats", "0"], "give a whole number >= 1"),
    ("onnx_decoding_speed", ["--repeats", "1"], "give a whole number >= 2"),
    ("head_ablation", ["--model", "nosuch"], "no model at nosuch"),
    ("head_ablation", ["--split", "nosuch"], "unknown split 'nosuch'"),
    ("modern_block_runs", ["--only", "nosuch:0"], "with a variant of the small"),
    ("modern_block_runs", ["--only", "rms:x"], "the seed must be a whole number"),
    ("modern_block_runs", ["--only", "rms:0:nan"], "lr_scale must be a number > 0"),
    ("modern_block_runs", ["--out-dir", "{file}/x"], "Not a directory"),
    ("notebook_pages", ["measure", "{file}"], "not UTF-8 JSON"),
    ("notebook_pages", ["measure", "{json}"], "JSON, but not a Jupyter notebook"),
    ("notebook_pages", ["measure", "{tmp}"], "Is a directory"),
    ("notebook_pages", ["hide-glue", "{tmp}/nosuch.ipynb"], "No such file"),
    ("notebook_pages", ["measure", "--lines", "0"], "give a whole number >= 1"),
    ("check_in_jupyterlab", ["x.ipynb", "--timeout", "-5"], "finite number > 0"),
    ("glossary_finetune", ["--lr", "nan"], "'nan': give a finite number > 0"),
    ("glossary_finetune", ["--glossary-per-batch", "99"], "the glossary has 32"),
    ("glossary_finetune", ["--out", "{file}/r.json"], "is not a folder"),
    ("null_calibration", ["--scale", "-1"], "'-1': give a finite number > 0"),
    ("gpu_wheels", ["--out", "{file}/wheels"], "Not a directory"),
    ("training_chapter_run", ["--out", "{file}/r.json"], "is not a folder"),
    ("export_notebooks", ["--root", "{tmp}"], "no chapter notebooks"),
    ("train_it_yourself", ["--config", "{fast}"], "of another config called"),
    ("train_it_yourself", ["--config", "{blocked}"], "`transformer train` stopped"),
    ("bench/decode", ["--model", "x", "--only-growth"], "which this run skips"),
    ("bench/train_step", ["--padding", "0"], "give a whole number >= 1"),
    ("bench/train_step", ["--padding", "10"], "more than max_tokens=10"),
]


@pytest.mark.parametrize("tool, argv, words", BAD_ARGUMENTS)
def test_tools_refuse_a_bad_argument_in_one_line_before_they_work(
    tool, argv, words, tmp_path, monkeypatch, capsys
):
    from transformer.engine.command_input import run_tool

    """The fourteenth trial: these were tracebacks (from torch, argparse's int, a
    tuple unpacking), failed after the work (a file on the way of --out), or were
    taken (a renamed tiny.toml replaced the fast recipe's entry of the README's table).
    Each is one `error:` line and exit status 2, before anything is written."""
    (tmp_path / "file").write_text("mine")
    (tmp_path / "r.json").write_text("{}")
    tiny = (ROOT / "configs" / "tiny.toml").read_text()
    fast, blocked = tmp_path / "multi30k-fast.toml", tmp_path / "blocked.toml"
    fast.write_text(tiny)  # a file on the way of the run's folder: the child stops
    blocked.write_text(tiny.replace('"runs/tiny"', f'"{tmp_path}/file/run"'))
    names = {"file": tmp_path / "file", "json": tmp_path / "r.json"}
    names |= {"tmp": tmp_path, "fast": fast, "blocked": blocked}
    argv = [a.format(**names) for a in argv]
    folder, name = tool.split("/") if "/" in tool else ("tools", tool)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    monkeypatch.syspath_prepend(str(ROOT / folder))  # bench/timing.py, beside it
    results = ROOT / "notebooks" / "results", ROOT / "models"
    module = load_tool(name, folder)
    if hasattr(module, "OUT"):  # where a tool that took the argument would write
        if module.OUT.is_file():  # the results it adds to
            shutil.copy(module.OUT, tmp_path / "out.json")
        monkeypatch.setattr(module, "OUT", tmp_path / "out.json")
    for key, budget in getattr(module, "BUDGETS", {}).items():
        moved = dataclasses.replace(budget, out=tmp_path / "out.json")
        monkeypatch.setitem(module.BUDGETS, key, moved)
    before = listing(*results, tmp_path)
    with pytest.raises(SystemExit) as info:
        run_tool(module.main)
    err = capsys.readouterr().err
    assert info.value.code == 2 and words in err, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].count("error:") == 1
    assert listing(*results, tmp_path) == before


def test_ship_model_never_replaces_a_folder_made_meanwhile_nor_shows_a_full_disk(
    tiny_run, tmp_path, monkeypatch, capsys
):
    """The fifteenth trial: two ships into one new --to both said "shipped" (the first
    model was replaced without a word), a full disk was safetensors' traceback, and a
    checkpoint named twice was averaged "over 2 checkpoints"."""
    from transformer.engine.command_input import run_tool

    tool = load_tool("ship_model")
    out = tmp_path / "shipped"
    write = tool._write_model

    def another_ship_first(*args):
        write(*args)
        out.mkdir()
        (out / "model.safetensors").write_text("the other ship's")

    monkeypatch.setattr(tool, "_write_model", another_ship_first)
    assert tool.main(ship_args(tiny_run, out)) == 2
    assert "appeared while this model was written" in capsys.readouterr().err
    assert (out / "model.safetensors").read_text() == "the other ship's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shipped"]

    def full_disk(*args):
        raise Exception("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(tool, "save_model_files", full_disk)
    monkeypatch.setattr(tool, "_write_model", write)
    argv = ["ship_model.py", *ship_args(tiny_run, tmp_path / "new")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as info:
        run_tool(tool.main)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("error: the disk holding ")
    assert f"{tmp_path / 'new'} is as it was" in err  # the sixteenth: it named no path
    assert err.count("\n") == 1 and not (tmp_path / "new").exists()
    twice = ship_args(tiny_run, tmp_path / "new")
    twice[twice.index("--checkpoints") + 1 : -2] = [latest(tiny_run).name] * 2
    assert tool.main(twice) == 2
    assert "names a checkpoint twice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tool, argv",
    [
        ("modern_block_runs", ["--only", "rms:0"]),
        ("null_calibration", ["--seeds-only"]),
        ("attention_cost", ["--lengths", "64"]),
        ("attention_cost", ["--training"]),
        ("train_it_yourself", ["--config", "{config}"]),
    ],
)
def test_tools_read_the_results_they_add_to_before_they_work(
    tool, argv, tmp_path, monkeypatch, capsys
):
    """The fifteenth trial: a cut or damaged results JSON was a traceback, at the start
    or after the whole measurement (train_it_yourself's scores were lost)."""
    from transformer.engine.command_input import run_tool

    module = load_tool(tool)
    damaged = tmp_path / "results.json"
    damaged.write_text('{"runs": [')
    monkeypatch.setattr(module, "OUT", damaged, raising=False)
    for key, budget in getattr(module, "BUDGETS", {}).items():
        monkeypatch.setitem(
            module.BUDGETS, key, dataclasses.replace(budget, out=damaged)
        )
    config = ROOT / "configs" / "tiny.toml"
    argv = [a.format(config=config) for a in argv]
    monkeypatch.setattr(sys, "argv", [f"{tool}.py", *argv])
    with pytest.raises(SystemExit) as info:
        run_tool(module.main)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "cannot be read as results (not JSON)" in err, err
    assert damaged.read_text() == '{"runs": [' and len(list(tmp_path.iterdir())) == 1


def test_train_it_yourself_refuses_a_damaged_entry_before_it_trains(
    tmp_path, monkeypatch, capsys
):
    """The review: an entry that is no object (or whose recipe is none) was a
    traceback; the file is JSON, so only the entry can say it."""
    from transformer.engine.command_input import run_tool

    module = load_tool("train_it_yourself")
    for entry in ("5", '{"recipe": [1]}'):
        (tmp_path / "results.json").write_text(f'{{"tiny": {entry}}}')
        monkeypatch.setattr(module, "OUT", tmp_path / "results.json")
        argv = ["train_it_yourself.py", "--config", str(ROOT / "configs" / "tiny.toml")]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as info:
            run_tool(module.main)
        err = capsys.readouterr().err
        assert info.value.code == 2 and "entry 'tiny' is damaged" in err, err


def test_a_tool_interrupted_says_so_in_one_line(capsys):
    """The sixteenth trial: Ctrl-C in a tool or a benchmark was a traceback (exit status
    1); `transformer` says "interrupted" and exits with 130."""
    from transformer.engine.command_input import run_tool

    def measuring():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as info:
        run_tool(measuring)
    assert info.value.code == 130 and capsys.readouterr().err == "interrupted\n"
    import signal

    def stopped():  # the seventeenth trial: SIGTERM was still a traceback-free nothing
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    with pytest.raises(SystemExit) as info:
        run_tool(stopped)
    err = capsys.readouterr().err
    assert info.value.code == 143 and err == "terminated (SIGTERM)\n"


def test_attention_cost_training_refuses_lengths_it_would_ignore(monkeypatch, capsys):
    """The sixteenth trial: --training --lengths 64 measured S = 256 .. 8192 anyway and
    replaced the shipped rows."""
    from transformer.engine.command_input import run_tool

    module = load_tool("attention_cost")
    argv = ["attention_cost.py", "--training", "--lengths", "64", "--repeats", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(module, "OUT", Path("/nonexistent/never-written.json"))
    with pytest.raises(SystemExit) as info:
        run_tool(module.main)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--lengths is for the inference rows" in err


def test_tools_refuse_before_the_work_what_they_would_lose_after_it(
    tmp_path, monkeypatch, capsys
):
    """The eighteenth trial: english_lm.py replaced its folder whole, a user's notes in
    it too; paired_translations.py translated, then a selection.json without the row it
    looks up was a StopIteration traceback."""
    from transformer.engine.command_input import run_tool

    english = load_tool("english_lm")
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "my_notes.txt").write_text("mine")
    monkeypatch.setattr(english, "OUT", tmp_path / "lm")
    paired = load_tool("paired_translations")

    def no_row(*args):
        raise StopIteration

    monkeypatch.setattr(paired, "recorded_bleu", no_row)
    monkeypatch.setattr(paired, "load_translator", lambda name: 1 / 0)  # not reached
    for tool, words in (
        (english, "my_notes.txt"),
        (paired, "has no selection.json row"),
    ):
        monkeypatch.setattr(sys, "argv", ["tool.py"])
        with pytest.raises(SystemExit) as info:
            run_tool(tool.main)
        err = capsys.readouterr().err
        assert info.value.code == 2 and words in err, err
    assert (tmp_path / "lm" / "my_notes.txt").read_text() == "mine"
