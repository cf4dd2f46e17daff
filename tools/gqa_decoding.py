"""Chapter 17's decoding measurement: what grouped-query attention saves while a translator generates.

    python tools/gqa_decoding.py                 # writes notebooks/results/17_gqa_decoding.json
    python tools/gqa_decoding.py --steps 64 --repeats 1   # a quick look, printed only

A model of the shipped shape (configs/multi30k-small.toml: D = 256, 3 + 3 layers, h = 4 heads,
d_ff = 1,024, one vocabulary of 8,000 pieces) with random weights and no dropout, once for each number of key/value heads in the decoder, h_kv = 4 (multi-head
attention), 2 and 1, all three drawn from the same seed. Each translates the same batch of B = 32 source
sentences of S = 32 tokens for STEPS = 512 target tokens with chapter 11's `DecoderSteps` and its cache,
taking the most probable token at every step and never stopping early (a random model's EOS would end rows
at random lengths): every run produces exactly B x STEPS tokens.

Measured per run: the time of the whole decoding loop (the source encoded once, then STEPS steps), the time
of its last quarter (where the cache is longest), and the bytes the cache holds at the end, counted from its
tensors. After one unmeasured run of each model (the first long run of a process also allocates its
memory), the three models run one after another within each repeat, in one process, on one thread, in an
order that turns from repeat to repeat (so that none is always first or last), and each figure is the median
over the repeats. The speed-ups are the medians of ratios taken within each repeat (h_kv = 4's time over the
other's), with their range: a machine that is slower for a whole repeat slows both sides of its ratios.

Where the time goes: after each run, the two things one decoder layer's self-attention does with its cache at
the last step are timed in isolation, at the same shapes (50 calls each): the fused attention of the new
queries over the cache, and the write that `KVCache.update` makes to append one new key (a value is a
second one) into its buffer, which has room to spare (the cache a model keeps is a view of the buffer's first
positions). The attention moves the whole cache through memory, while its arithmetic is the same for every
h_kv: the h query heads still score every cached position; the append copies only the new position.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool
from transformer.errors import TransformerError

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "17_gqa_decoding.json"
SHIPPED = ROOT / "configs" / "multi30k-small.toml"  # the shipped German->English shape
KV_HEADS = (4, 2, 1)
BATCH, SOURCE_LEN, STEPS = 32, 32, 512


def decode(model, src, steps: int) -> dict:
    """Greedy decoding of src (B, S) for exactly `steps` tokens with the cache: seconds
    for all of it and for its last quarter, and the cache's bytes at the end."""
    import torch

    from transformer.attention_cost import cache_nbytes
    from transformer.decoding import DecoderSteps
    from transformer.tokenizer import BOS_ID

    with torch.no_grad():
        start = time.perf_counter()
        src_mask = model.make_src_mask(src)  # (B, 1, 1, S)
        state = DecoderSteps(model, model.encode(src, src_mask), src_mask)
        ys = torch.full((len(src), 1), BOS_ID)  # (B, t)
        for t in range(steps):
            if t == steps - steps // 4:
                last_quarter = time.perf_counter()
            ys = torch.cat([ys, state.step(ys).argmax(-1, keepdim=True)], 1)
        end = time.perf_counter()
    return {
        "seconds": end - start,
        "last_quarter_seconds": end - last_quarter,
        "cache_bytes": sum(cache_nbytes(state.cache).values()),
    }


def shipped_shape() -> dict:
    """The [model] settings and vocabulary of the shipped German->English config, as
    `ModelConfig` keywords, without dropout."""
    import dataclasses

    from transformer.engine.config import TrainConfig

    config = TrainConfig.from_toml(SHIPPED)
    vocab = config.data.vocab_size
    shape = {**dataclasses.asdict(config.model), "dropout": 0.0}
    return {"src_vocab_size": vocab, "tgt_vocab_size": vocab, **shape}


def step_parts(shape: dict, kv: int, length: int, repeats: int = 50) -> dict:
    """Milliseconds of the two things a decoder layer's self-attention does with its cache
    at one step, for a cache of `length` positions: the fused attention of the B new
    queries (h of them per sentence, grouped as h / kv per key/value head) over the
    cache, and `KVCache.update`'s write of one new key into its buffer (keys and values
    are each one such write)."""
    import torch
    import torch.nn.functional as F

    h, d_head = shape["num_heads"], shape["d_model"] // shape["num_heads"]
    Q = torch.randn(BATCH, kv, h // kv, d_head)  # one new position per sentence
    # the cache's buffers, with room to spare; what attention reads is a view of their
    # first `length` positions, as KVCache keeps it
    buffers = torch.randn(2, BATCH, kv, 2 * length, d_head).unbind(0)
    K, V = (b[:, :, :length] for b in buffers)
    new = torch.randn(BATCH, kv, 1, d_head)

    def append() -> None:
        buffers[0][:, :, length : length + 1] = new

    def ms(run) -> float:
        run()
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        return (time.perf_counter() - start) / repeats * 1000

    return {
        "attention_ms": ms(lambda: F.scaled_dot_product_attention(Q, K, V)),
        "append_ms": ms(append),
    }


def main() -> None:
    import torch

    from transformer.files import atomic_write_bytes
    from transformer.engine.model_config import ModelConfig, build_model
    from transformer.engine.machine import cpu_name

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # the last quarter of the steps is timed on its own: four steps at least
    parser.add_argument("--steps", type=at_least(4), default=STEPS)
    parser.add_argument("--repeats", type=at_least(1), default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shape, models = shipped_shape(), {}
    for kv in KV_HEADS:
        torch.manual_seed(0)
        max_len = max(args.steps, SOURCE_LEN) + 1
        try:  # a --steps beyond what the machine holds is refused here
            config = ModelConfig(**{**shape, "kv_heads": kv, "max_len": max_len})
            models[kv] = build_model(config).eval()
        except TransformerError as e:
            parser.error(f"--steps {args.steps}: {e}")
    vocab = shape["src_vocab_size"]
    src = torch.randint(
        4, vocab, (BATCH, SOURCE_LEN), generator=torch.Generator().manual_seed(0)
    )
    # warm-up, not measured: a process's first long run allocates its memory (it took
    # twice as long as the later ones)
    for kv in KV_HEADS:
        decode(models[kv], src, args.steps)
    runs, parts = {kv: [] for kv in KV_HEADS}, {kv: [] for kv in KV_HEADS}
    for repeat in range(args.repeats):
        turn = repeat % len(
            KV_HEADS
        )  # each model first in some repeats, last in others
        for kv in KV_HEADS[turn:] + KV_HEADS[:turn]:
            runs[kv].append(decode(models[kv], src, args.steps))
            parts[kv].append(step_parts(shape, kv, args.steps))
            r = runs[kv][-1]
            print(
                f"repeat {repeat}, h_kv = {kv}: {r['seconds']:.2f} s, last quarter "
                f"{r['last_quarter_seconds']:.2f} s, cache {r['cache_bytes'] / 2**20:.1f} MiB",
                flush=True,
            )
    tokens = BATCH * args.steps
    rows = []
    for kv in KV_HEADS:
        rows.append(
            {
                "kv_heads": kv,
                "seconds": round(statistics.median(r["seconds"] for r in runs[kv]), 3),
                "tokens_per_second": round(
                    tokens / statistics.median(r["seconds"] for r in runs[kv]), 1
                ),
                "last_quarter_tokens_per_second": round(
                    BATCH
                    * (args.steps // 4)
                    / statistics.median(r["last_quarter_seconds"] for r in runs[kv]),
                    1,
                ),
                "speedup": round(
                    statistics.median(
                        a["seconds"] / b["seconds"] for a, b in zip(runs[4], runs[kv])
                    ),
                    3,
                ),
                "speedup_range": [
                    round(
                        f(
                            a["seconds"] / b["seconds"]
                            for a, b in zip(runs[4], runs[kv])
                        ),
                        3,
                    )
                    for f in (min, max)
                ],
                "last_quarter_speedup": round(
                    statistics.median(
                        a["last_quarter_seconds"] / b["last_quarter_seconds"]
                        for a, b in zip(runs[4], runs[kv])
                    ),
                    3,
                ),
                "cache_bytes": runs[kv][0]["cache_bytes"],
                # one layer's self-attention at the last step, in isolation
                "attention_ms_at_end": round(
                    statistics.median(p["attention_ms"] for p in parts[kv]), 3
                ),
                "append_ms_at_end": round(
                    statistics.median(p["append_ms"] for p in parts[kv]), 3
                ),
                "parameters": sum(p.numel() for p in models[kv].parameters()),
            }
        )
        print(json.dumps(rows[-1]))
    if args.steps != STEPS or args.repeats < 5:
        return  # a quick look is not the chapter's measurement
    result = {
        "shape": {**shape, "max_len": max_len},  # the length the models were built for
        "batch": BATCH,
        "source_len": SOURCE_LEN,
        "steps": args.steps,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": f"{cpu_name()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(OUT, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    run_tool(main)
