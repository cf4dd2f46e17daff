"""Head ablation of a shipped translator: greedy BLEU on a test split with each attention head zeroed in turn.

    python tools/head_ablation.py                       # multi30k-de-en on test_2016_flickr
    python tools/head_ablation.py --model multi30k-de-en --split test_2016_flickr

Writes `<model>/analysis/head_ablation.json`: the baseline BLEU (every head on) and, for each of the
3 x N x h heads (encoder self-attention, decoder self-attention, cross-attention), the BLEU of the
whole split and of its first 100 sentences with that head zeroed (`transformer.visualize.zeroed_head`),
and the p-value of a paired bootstrap test of the whole split's translations against the baseline's
on the same sentences (`transformer.stats.paired_bleu_test`: the paired bootstrap centred on the
observed gap, whose p-values chapter 12 checks under a true null; seeded, 10,000 resamples). The p-values are not corrected for the 3 x N x h comparisons: chapter 14 does that (Holm).
Chapter 14 loads the table and recomputes some of its first-100 numbers live. Greedy decoding, one
thread: about 37 x 20 s for the shipped de-en model, plus a few minutes for the tests.
"""

import argparse
import contextlib
import json
import time

import torch

from transformer.engine.shipped import load_translator
from transformer.errors import TransformerError
from transformer.engine.corpora import split_pairs_for
from transformer.translation import translate
from transformer.stats import paired_bleu_test
from transformer.evaluation import corpus_bleu, group_references
from transformer.files import atomic_write_bytes
from transformer.visualize import KINDS, ablation_bleu, zeroed_head
from transformer.engine.command_input import run_tool

FIRST = 100  # the subset the chapter re-checks live
RESAMPLES = 10_000  # bootstrap test sets per paired test: p-values in steps of 1/10001


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="multi30k-de-en")
    parser.add_argument("--split", default="test_2016_flickr")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        ckpt = load_translator(args.model)
        pairs = split_pairs_for(ckpt.train_config.data, args.split)
    except TransformerError as e:
        parser.error(str(e))
    sources, references = group_references(pairs)
    if not all(len(r) == 1 for r in references):
        raise SystemExit(
            f"{args.split} has several references for some sentences: the paired "
            "test here takes one reference per sentence"
        )
    references = [r[0] for r in references]

    def translations(kind=None, layer=0, head=0) -> list[str]:
        """The greedy translations of the whole split with one head zeroed (none when
        kind is None), as `ablation_bleu` scores them."""
        with contextlib.ExitStack() as stack:
            if kind is not None:
                stack.enter_context(zeroed_head(ckpt.model, kind, layer, head))
            return translate(ckpt, sources, beam_size=1)

    def scores(hypotheses, kind=None, layer=0, head=0) -> dict:
        return {
            "bleu": round(corpus_bleu(hypotheses, references).score, 2),
            "bleu_first_100": round(
                ablation_bleu(
                    ckpt, sources[:FIRST], references[:FIRST], kind, layer, head
                ),
                2,
            ),
        }

    start = time.perf_counter()
    baseline = translations()
    report = {
        "model": args.model,
        "split": args.split,
        "sentences": len(sources),
        "decoding": "greedy (beam 1)",
        "what": "corpus BLEU (sacreBLEU 13a) with one attention head's output zeroed before W^O",
        "test": (
            f"paired bootstrap (transformer.stats.paired_bootstrap, centred on the "
            f"observed gap, {RESAMPLES} resamples, seeded) of each row's "
            "translations against the baseline's on the same sentences; p_value is "
            "uncorrected for the number of heads"
        ),
        "resamples": RESAMPLES,
        "baseline": scores(baseline),
        "heads": [],
    }
    systems = {"baseline": baseline}
    config = ckpt.model.config
    for kind in KINDS:
        layers = (
            config.num_encoder_layers
            if kind == "encoder"
            else config.num_decoder_layers
        )
        for layer in range(layers):
            for head in range(config.num_heads):
                hypotheses = translations(kind, layer, head)
                systems[f"{kind} {layer} {head}"] = hypotheses
                row = {
                    "kind": kind,
                    "layer": layer,
                    "head": head,
                    **scores(hypotheses, kind, layer, head),
                }
                report["heads"].append(row)
                print(row, flush=True)
    tested = time.perf_counter()
    comparisons = paired_bleu_test(systems, references, resamples=RESAMPLES)
    for row, comparison in zip(report["heads"], comparisons[1:]):
        row["p_value"] = round(comparison.p_value, 5)
        print(row["kind"], row["layer"], row["head"], "p =", row["p_value"], flush=True)
    print(f"paired tests: {time.perf_counter() - tested:.0f} s")
    report["seconds"] = round(time.perf_counter() - start)
    out = ckpt.path / "analysis" / "head_ablation.json"
    out.parent.mkdir(exist_ok=True)
    atomic_write_bytes(out, (json.dumps(report, indent=1) + "\n").encode("utf-8"))
    print("wrote", out)


if __name__ == "__main__":
    run_tool(main)
