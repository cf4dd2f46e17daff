"""Translations for chapter 13's paired tests: the shipped models' validation split under the search
settings of SETTINGS, eight of the nine of their selection table (beams 6 and 8 with alpha 0.6 are not
among them).

    python tools/paired_translations.py               # 10 to 15 min on one thread

A paired test compares two systems' translations of the *same* sentences (chapter 12's
`paired_bleu_test`). The selection tables in `models/*/selection.json` keep only each row's BLEU, so
this script produces the translations once and writes them to
`notebooks/results/13_paired_translations.json`, which chapter 13 reads: for each shipped model, its
validation split decoded greedily and by beam search with those beam sizes and length penalties
(the shipped averaged weights, which are the weights those rows measured), with the
BLEU that selection.json recorded for each row. (The glossary experiment keeps its own translations,
before and after, in models/tatoeba-en-zh/experiments/glossary.json.)

One thread, seeded: on one machine a re-run gives the same file.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from transformer.translation import translate
from transformer.evaluation import corpus_bleu, group_references
from transformer.files import atomic_write_text
from transformer.engine.shipped import load_translator, models_dir
from transformer.engine.command_input import run_tool
from transformer.errors import InputError


OUT = Path(__file__).resolve().parents[1] / "notebooks" / "results"
OUT = OUT / "13_paired_translations.json"
# (beam, alpha) rows of the selection tables; beam 1 is greedy decoding
SETTINGS = [
    (1, 0.0),
    (4, 0.0),
    (4, 0.6),
    (4, 1.0),
    (4, 1.4),
    (4, 2.0),
    (6, 1.0),
    (8, 1.0),
]
MODELS = ["multi30k-de-en", "tatoeba-en-zh"]


def recorded_bleu(name: str, beam: int, alpha: float) -> float:
    """The validation BLEU that selection.json recorded for the shipped weights."""
    n = len(json.loads((models_dir() / name / "averaged_checkpoints.json").read_text()))
    rows = json.loads((models_dir() / name / "selection.json").read_text())["rows"]
    return next(
        r["bleu"]
        for r in rows
        if r["what"].startswith(f"average of last {n} ")
        and r["beam"] == beam
        and (beam == 1 or r["alpha"] == alpha)
    )


def search(name: str) -> dict:
    recorded = {}
    for beam, alpha in SETTINGS:  # before the translations: a lookup that fails
        try:  # after them lost them
            recorded[beam, alpha] = recorded_bleu(name, beam, alpha)
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            raise InputError(
                f"{models_dir() / name} has no selection.json row for beam {beam}, alpha "
                f"{alpha} of its averaged weights: restore its selection.json and "
                "averaged_checkpoints.json (git checkout)"
            ) from None
    ckpt = load_translator(name)
    sources, references = group_references(ckpt.pairs("val"))
    tokenize = "zh" if name.endswith("zh") else "13a"
    rows = []
    for beam, alpha in SETTINGS:
        start = time.perf_counter()
        hyps = translate(ckpt, sources, beam_size=beam, alpha=alpha)
        seconds = time.perf_counter() - start
        bleu = corpus_bleu(hyps, references, tokenize=tokenize).score
        rows.append(
            {
                "beam": beam,
                "alpha": alpha,
                "bleu": round(bleu, 2),
                "bleu_in_selection_json": recorded[beam, alpha],
                "seconds": round(seconds, 1),
                "hypotheses": hyps,
            }
        )
        print(f"{name} beam {beam} alpha {alpha}: BLEU {bleu:.2f} ({seconds:.0f} s)")
    return {"split": "val", "sentences": len(sources), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    torch.set_num_threads(1)
    report = {
        "what": "translations for chapter 13's paired tests "
        "(tools/paired_translations.py)",
        "threads": 1,
        "search": {name: search(name) for name in MODELS},
    }
    out = atomic_write_text(
        OUT, json.dumps(report, ensure_ascii=False, indent=1) + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    run_tool(main)
