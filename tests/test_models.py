"""The shipped models: small, float16 on disk, loadable without pickle or network, and their stored scores true."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from transformer.engine.corpora import load_multi30k
from transformer.engine.shipped import SHIPPED_MODELS, load_translator, models_dir
from transformer.translation import translate
from transformer.evaluation import corpus_bleu

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [name for name in SHIPPED_MODELS if (models_dir() / name).is_dir()]


def test_the_german_english_model_is_shipped():
    assert "multi30k-de-en" in SHIPPED, (
        f"models/multi30k-de-en is missing from {models_dir()}"
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_is_under_25_mb_float16_on_disk_and_loads_as_float32_without_pickle(
    name, monkeypatch
):
    directory = models_dir() / name
    assert sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) < 25e6
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F16"}

    def refuse(*args, **kwargs):
        raise AssertionError("a shipped model must load without pickle")

    for module, attr in ((pickle, "load"), (pickle, "loads"), (torch, "load")):
        monkeypatch.setattr(module, attr, refuse)
    ckpt = load_translator(name)
    assert (
        all(p.dtype == torch.float32 for p in ckpt.model.parameters())
        and not ckpt.model.training
    )
    for f in (
        "model_config.json",
        "train_config.json",
        "metrics.csv",
        "README.md",
        "selection.json",
    ):
        assert (directory / f).is_file(), f


def test_the_readme_example_translates_with_the_default_model():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer",
            "translate",
            "Ein Mann fährt mit dem Fahrrad.",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip().lower()
    assert out.startswith("a man") and ("bike" in out or "bicycle" in out), out


def test_the_stored_test_set_scores_are_those_of_the_stored_translations_and_the_shipped_weights():
    directory = models_dir() / "multi30k-de-en" / "eval"
    ckpt = load_translator("multi30k-de-en")
    for split in ("test_2016_flickr", "test_2017_flickr", "test_2018_flickr"):
        report = json.loads((directory / f"{split}.json").read_text())
        hyps = (directory / f"{split}.hyp").read_text(encoding="utf-8").splitlines()
        pairs = load_multi30k(split)
        assert len(hyps) == len(pairs) == report["sentences"]
        stored = {s["metric"]: s["score"] for s in report["scores"]}
        assert corpus_bleu(hyps, [t for _, t in pairs]).score == pytest.approx(
            stored["BLEU"], abs=1e-9
        )
        again = translate(
            ckpt,
            [s for s, _ in pairs[:20]],
            beam_size=report["beam_size"],
            alpha=report["alpha"],
        )
        assert (
            sum(a == b for a, b in zip(again, hyps)) >= 19
        )  # a float near-tie may flip one sentence
