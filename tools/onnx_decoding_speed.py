"""Appendix 96's timing: one sentence decoded greedily by PyTorch with its key/value cache, by
PyTorch without it, and by the cache-free ONNX graphs that `export_onnx` writes.

    python tools/onnx_decoding_speed.py               # writes notebooks/results/96_onnx_speed.json
    python tools/onnx_decoding_speed.py --repeats 3   # a quick look, printed only

The shipped German->English model, exported into a temporary folder. One sentence of 15 words, decoded
greedily to its end (EOS) by each of the three, on one thread (onnxruntime's `OnnxTranslator` runs on one
thread too); all three give the same tokens. After one unmeasured run of each, every repeat times the three
one after another, each as the fastest of three calls (the one least disturbed by the rest of the machine),
in one of the six orders of the three, every order twice over the 12 repeats (so that no arm always runs
before another).

A time ratio is taken within each repeat, where both sides met the same machine. The figures: each arm's
median time; for each ratio, its geometric mean over the repeats with a 95 % t-interval and a paired t-test
of "the ratio is 1" (both on the logarithms of the repeats' ratios). The t-interval treats the repeats as
independent; they are consecutive runs of one session on one machine, whose load drifts, so the interval
describes this machine at that time (and is too narrow if the load drifted), not another machine.

The chapter reads the JSON; its tests never time anything (a timing assert fails on a busy machine).
"""

import argparse
import itertools
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "96_onnx_speed.json"
MODEL = "multi30k-de-en"
SENTENCE = "Ein kleines Mädchen in einem roten Kleid läuft mit ihrem Hund über eine grüne Wiese."
REPEATS = 12
# (numerator, denominator) of each ratio the appendix reports
RATIOS = {
    "no_cache_over_cache": ("pytorch_no_cache", "pytorch_cache"),
    "no_cache_over_onnx": ("pytorch_no_cache", "onnx"),
    "cache_over_onnx": ("pytorch_cache", "onnx"),
}


def best_ms(fn, calls: int = 3) -> float:
    """The fastest of `calls` runs of `fn`, in milliseconds."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def ratio_summary(ratios: list[float]) -> dict:
    """The geometric mean of the repeats' ratios, its 95 % t-interval and the paired
    t-test's p-value of 'the ratio is 1', all on the logarithms."""
    from transformer.stats import mean_sd, t_p_value, t_quantile

    logs = [math.log(r) for r in ratios]
    mean, sd = mean_sd(logs)
    se = sd / math.sqrt(len(logs))
    half = t_quantile(0.95, len(logs) - 1) * se
    p = t_p_value(mean / se, len(logs) - 1) if se > 0 else float(mean == 0)
    return {
        "geometric_mean": round(math.exp(mean), 3),
        "interval_95": [
            round(math.exp(mean - half), 3),
            round(math.exp(mean + half), 3),
        ],
        "p_value": p,
        "log_sd": round(sd, 4),
        "range": [round(min(ratios), 3), round(max(ratios), 3)],
    }


def main() -> None:
    import onnxruntime
    import torch

    from transformer.decoding import greedy_decode
    from transformer.engine.machine import cpu_name
    from transformer.engine.onnx_export import export_onnx
    from transformer.engine.onnx_translator import OnnxTranslator
    from transformer.engine.shipped import load_translator
    from transformer.files import atomic_write_bytes

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # an interval needs two repeats
    parser.add_argument("--repeats", type=at_least(2), default=REPEATS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoint = load_translator(MODEL)
    model = checkpoint.model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_dir = export_onnx(MODEL, Path(tmp) / MODEL)
        onnx = OnnxTranslator(onnx_dir)
        one = torch.tensor([checkpoint.src_tokenizer.encode(SENTENCE)])  # (1, S)
        arms = {
            "pytorch_cache": lambda: greedy_decode(model, one),
            "pytorch_no_cache": lambda: greedy_decode(model, one, use_cache=False),
            "onnx": lambda: onnx.greedy(one.numpy()),
        }
        outputs = {
            "pytorch_cache": greedy_decode(model, one)[0].tokens,
            "pytorch_no_cache": greedy_decode(model, one, use_cache=False)[0].tokens,
            "onnx": onnx.greedy(one.numpy())[0],
        }
        # the same tokens: the three do the same work
        assert outputs["pytorch_cache"] == outputs["pytorch_no_cache"]
        assert list(outputs["onnx"]) == list(outputs["pytorch_cache"]), outputs
        for fn in arms.values():  # warm-up, not measured
            fn()
        names = list(arms)
        ms = {name: [] for name in names}
        orders = list(itertools.permutations(names))  # each pair in both orders
        for repeat in range(args.repeats):
            for name in orders[repeat % len(orders)]:
                ms[name].append(best_ms(arms[name]))
            print(
                f"repeat {repeat}: "
                + ", ".join(f"{n} {ms[n][-1]:.1f} ms" for n in names),
                flush=True,
            )
    ratios = {
        key: ratio_summary([a / b for a, b in zip(ms[top], ms[bottom])])
        for key, (top, bottom) in RATIOS.items()
    }
    for key, summary in ratios.items():
        print(key, json.dumps(summary))
    if args.repeats < REPEATS:
        return  # a quick look is not the appendix's measurement
    result = {
        "model": MODEL,
        "sentence": SENTENCE,
        "words": len(SENTENCE.split()),
        "tokens_out": len(outputs["pytorch_cache"]),
        "repeats": args.repeats,
        "calls_per_repeat": 3,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "median_ms": {n: round(statistics.median(ms[n]), 1) for n in names},
        "ms": {n: [round(x, 2) for x in ms[n]] for n in names},
        "ratios": ratios,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(OUT, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    run_tool(main)
