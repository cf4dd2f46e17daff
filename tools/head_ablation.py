"""Head ablation of a shipped translator: greedy BLEU on a test split with each attention head zeroed in turn.

    python tools/head_ablation.py                       # multi30k-de-en on test_2016_flickr
    python tools/head_ablation.py --model multi30k-de-en --split test_2016_flickr

Writes `<model>/analysis/head_ablation.json`: the baseline BLEU (every head on) and, for each of the
3 x N x h heads (encoder self-attention, decoder self-attention, cross-attention), the BLEU of the
whole split and of its first 100 sentences with that head zeroed (`transformer.visualize.zeroed_head`).
Chapter 14 loads the table and recomputes some of its first-100 numbers live. Greedy decoding, one
thread: about 36 x 5 s for the shipped de-en model.
"""

import argparse
import json
import time

import torch

from transformer.shipped import load_translator
from transformer.corpora import split_pairs_for
from transformer.evaluation import group_references
from transformer.files import atomic_write_bytes
from transformer.visualize import KINDS, ablation_bleu

FIRST = 100  # the subset the chapter re-checks live


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="multi30k-de-en")
    parser.add_argument("--split", default="test_2016_flickr")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ckpt = load_translator(args.model)
    sources, references = group_references(
        split_pairs_for(ckpt.train_config.data, args.split)
    )
    references = (
        [r[0] for r in references]
        if all(len(r) == 1 for r in references)
        else references
    )

    def scores(kind=None, layer=0, head=0) -> dict:
        return {
            "bleu": round(
                ablation_bleu(ckpt, sources, references, kind, layer, head), 2
            ),
            "bleu_first_100": round(
                ablation_bleu(
                    ckpt, sources[:FIRST], references[:FIRST], kind, layer, head
                ),
                2,
            ),
        }

    start = time.perf_counter()
    report = {
        "model": args.model,
        "split": args.split,
        "sentences": len(sources),
        "decoding": "greedy (beam 1)",
        "what": "corpus BLEU (sacreBLEU 13a) with one attention head's output zeroed before W^O",
        "baseline": scores(),
        "heads": [],
    }
    config = ckpt.model.config
    for kind in KINDS:
        layers = (
            config.num_encoder_layers
            if kind == "encoder"
            else config.num_decoder_layers
        )
        for layer in range(layers):
            for head in range(config.num_heads):
                row = {
                    "kind": kind,
                    "layer": layer,
                    "head": head,
                    **scores(kind, layer, head),
                }
                report["heads"].append(row)
                print(row, flush=True)
    report["seconds"] = round(time.perf_counter() - start)
    out = ckpt.path / "analysis" / "head_ablation.json"
    out.parent.mkdir(exist_ok=True)
    atomic_write_bytes(out, (json.dumps(report, indent=1) + "\n").encode("utf-8"))
    print("wrote", out)


if __name__ == "__main__":
    main()
