"""The shipped search setting confirmed on sentences that played no part in choosing it: chapter 13.

    python tools/heldout_decoding.py          # 3 to 8 min on one thread

Chapter 13 chose each shipped model's search setting (beam 4, length penalty alpha = 1.0) by reading
its validation table, and tests the table's rows on the same validation sentences, which favours the
chosen row. This script asks one question fixed before it ran, on the test splits, which the choice
never saw: does the shipped setting differ from the paper's default (beam 4, alpha = 0.6; Vaswani et
al. 2017, section 6.1)? It decodes every test split of each shipped model under both settings (the
shipped averaged weights, one thread) and writes the translations to
`notebooks/results/13_heldout_decoding.json`, which chapter 13 reads and tests with chapter 12's
paired bootstrap, Holm over the two models.

One thread: on one machine a re-run gives the same file.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from transformer.translation import translate
from transformer.evaluation import group_references
from transformer.files import atomic_write_text
from transformer.engine.shipped import load_translator
from transformer.engine.command_input import run_tool
from transformer.errors import InputError


OUT = Path(__file__).resolve().parents[1] / "notebooks" / "results"
OUT = OUT / "13_heldout_decoding.json"
SETTINGS = {"shipped": (4, 1.0), "paper": (4, 0.6)}  # name: (beam, alpha)
SPLITS = {  # the held-out splits: every test split of the model's corpus
    "multi30k-de-en": ["test_2016_flickr", "test_2017_flickr", "test_2018_flickr"],
    "tatoeba-en-zh": ["test"],
}


def decode(name: str) -> dict:
    ckpt = load_translator(name)
    if (ckpt.decoding["beam_size"], ckpt.decoding["alpha"]) != SETTINGS["shipped"]:
        raise InputError(
            f"{ckpt.path / 'decoding.json'} is not the shipped setting "
            f"{SETTINGS['shipped']}, which this tool measures: restore it (git checkout "
            f"-- {ckpt.path / 'decoding.json'})"
        )
    splits = {}
    for split in SPLITS[name]:
        sources, references = group_references(ckpt.pairs(split))
        rows = {}
        for setting, (beam, alpha) in SETTINGS.items():
            start = time.perf_counter()
            hyps = translate(ckpt, sources, beam_size=beam, alpha=alpha)
            seconds = time.perf_counter() - start
            rows[setting] = {"beam": beam, "alpha": alpha, "hypotheses": hyps}
            print(f"{name} {split} {setting}: {len(hyps)} sentences, {seconds:.0f} s")
        splits[split] = {"references": references, "settings": rows}
    return splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    torch.set_num_threads(1)
    report = {
        "what": "the shipped search setting against the paper's default on the test "
        "splits (tools/heldout_decoding.py)",
        "question": "BLEU of the shipped setting minus the paper's default, pooled "
        "over each model's test splits; chapter 12's paired bootstrap, Holm over the "
        "two models",
        "threads": 1,
        "models": {name: decode(name) for name in SPLITS},
    }
    out = atomic_write_text(
        OUT, json.dumps(report, ensure_ascii=False, indent=1) + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    run_tool(main)
