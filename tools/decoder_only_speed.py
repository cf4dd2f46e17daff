"""Chapter 18's speed measurement: what reading the source as part of one sequence costs, per training step and
per generated token, the decoder-only model against the encoder-decoder of the same budget.

    python tools/decoder_only_speed.py                 # writes notebooks/results/18_decoder_only_speed.json
    python tools/decoder_only_speed.py --repeats 1     # a quick look, printed only

The models are the shapes of tools/modern_block_runs.py's runs (D = 128, 4 heads, d_ff = 512, pre-norm, one
vocabulary of 8,000 pieces): the encoder-decoder of 2 + 2 layers and the decoder-only model of 5 blocks with
the causal and with the prefix source mask, all with random weights drawn from one seed and no dropout.

Training: one step (forward, loss on the target, backward) on one batch of B = 64 sentence pairs with S = T =
16 tokens a side (about Multi30k's mean), timed as the median of 20 steps. Generation: chapter 11's
`DecoderSteps` with its cache translates B = 32 sources of S = 16 tokens for exactly STEPS = 24 tokens (the
most probable token each time, never stopping early, so every model produces the same number of tokens); the
source is encoded once inside the timing. After one unmeasured round, the models run one after another within
each repeat, in one process, on one thread, in an order that turns from repeat to repeat; the ratios are
the medians of ratios taken within each repeat (a model's speed over the encoder-decoder's: below 1 is slower), with their
range. Also counted: the multiply-adds of the layers per target token of a training pass (the source's share
included; the output layer's D x |V|, the same for every model, left out), and the
bytes the cache holds at the end of generation.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "18_decoder_only_speed.json"
VOCAB = 8000
SHAPE = {"d_model": 128, "num_heads": 4, "d_ff": 512, "norm_first": True}
MODELS = {  # name -> layers and source mask
    "encoder-decoder": {"num_encoder_layers": 2, "num_decoder_layers": 2},
    "causal": {"num_encoder_layers": 0, "num_decoder_layers": 5},
    "prefix": {
        "num_encoder_layers": 0,
        "num_decoder_layers": 5,
        "source_mask": "prefix",
    },
}
TRAIN_BATCH, GEN_BATCH, LENGTH, STEPS = 64, 32, 16, 24


def build(name: str):
    import torch

    from transformer.engine.model_config import ModelConfig, build_model

    torch.manual_seed(0)
    config = ModelConfig(
        VOCAB,
        VOCAB,
        **SHAPE,
        **MODELS[name],
        dropout=0.0,
        max_len=64,
        share_embeddings=True,
    )
    return build_model(config)


def train_seconds(model, src, tgt_in, tgt_out, steps: int = 20) -> float:
    """Median seconds of one forward and backward pass with the target's loss."""
    from transformer.loss import label_smoothed_loss

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        loss, _, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, 0.1, 0)
        loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def generate(model, src) -> dict:
    """Greedy generation of exactly STEPS tokens for src (B, S) with the cache."""
    import torch

    from transformer.attention_cost import cache_nbytes
    from transformer.decoding import DecoderSteps
    from transformer.model import evaluating
    from transformer.tokenizer import BOS_ID

    with torch.no_grad(), evaluating(model):
        start = time.perf_counter()
        src_mask = model.make_src_mask(src)  # (B, 1, 1, S)
        state = DecoderSteps(model, model.encode(src, src_mask), src_mask)
        ys = torch.full((len(src), 1), BOS_ID)  # (B, t)
        for _ in range(STEPS):
            ys = torch.cat([ys, state.step(ys).argmax(-1, keepdim=True)], 1)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "cache_bytes": sum(cache_nbytes(state.cache).values())}


def multiply_adds(name: str) -> float:
    """Multiply-adds of the layers (not the embedding or the output layer) per target
    token of a pair with S = T = LENGTH, attention's scores counted at full length."""
    D, F, L = SHAPE["d_model"], SHAPE["d_ff"], LENGTH
    m = MODELS[name]
    block = 4 * D * D + 2 * D * F  # projections and feed-forward, per position
    if m["num_encoder_layers"]:
        encoder = m["num_encoder_layers"] * L * (block + 2 * L * D)
        # self-attention, cross-attention's projections (K, V over the source once)
        decoder = m["num_decoder_layers"] * (
            L * (block + 2 * D * D + 2 * L * D + 2 * L * D) + 2 * L * D * D
        )
        return (encoder + decoder) / L
    n = 2 * L  # one sequence of source and target
    return m["num_decoder_layers"] * n * (block + 2 * n * D) / L


def main() -> None:
    import torch

    from transformer.files import atomic_write_bytes
    from transformer.engine.machine import cpu_name

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=at_least(1), default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    models = {name: build(name) for name in MODELS}
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, VOCAB, (TRAIN_BATCH, LENGTH), generator=g)
    tgt = torch.randint(4, VOCAB, (TRAIN_BATCH, LENGTH + 1), generator=g)
    batch = (src, tgt[:, :-1], tgt[:, 1:])
    names = list(MODELS)
    for name in names:  # warm-up, not measured
        train_seconds(models[name], *batch, steps=2)
        generate(models[name], src[:GEN_BATCH])
    runs = {name: [] for name in names}
    for repeat in range(args.repeats):
        turn = repeat % len(names)
        for name in names[turn:] + names[:turn]:
            model = models[name]
            runs[name].append(
                {
                    "train_step_s": train_seconds(model, *batch),
                    **generate(model, src[:GEN_BATCH]),
                }
            )
    base = runs["encoder-decoder"]
    result = {
        "what": __doc__.split("\n\n")[0],
        "machine": f"{cpu_name()}, one thread",
        "shape": SHAPE,
        "vocab_size": VOCAB,
        "train_batch": TRAIN_BATCH,
        "generation_batch": GEN_BATCH,
        "length": LENGTH,
        "steps": STEPS,
        "repeats": args.repeats,
        "models": {},
    }
    for name in names:
        r = runs[name]
        train_ratio = [b["train_step_s"] / x["train_step_s"] for b, x in zip(base, r)]
        gen_ratio = [b["seconds"] / x["seconds"] for b, x in zip(base, r)]
        result["models"][name] = {
            **MODELS[name],
            "parameters": sum(p.numel() for p in models[name].parameters()),
            "layer_multiply_adds_per_target_token": multiply_adds(name),
            "train_step_ms": round(
                1000 * statistics.median(x["train_step_s"] for x in r), 2
            ),
            "train_speed_vs_encoder_decoder": round(statistics.median(train_ratio), 3),
            "train_speed_range": [
                round(min(train_ratio), 3),
                round(max(train_ratio), 3),
            ],
            "generated_tokens_per_s": round(
                GEN_BATCH * STEPS / statistics.median(x["seconds"] for x in r)
            ),
            "generation_speed_vs_encoder_decoder": round(
                statistics.median(gen_ratio), 3
            ),
            "generation_speed_range": [
                round(min(gen_ratio), 3),
                round(max(gen_ratio), 3),
            ],
            "cache_bytes": r[-1]["cache_bytes"],
        }
        m = result["models"][name]
        print(
            f"{name:16s} train step {m['train_step_ms']:7.1f} ms "
            f"({m['train_speed_vs_encoder_decoder']:.2f}x), generation "
            f"{m['generated_tokens_per_s']:6d} tokens/s "
            f"({m['generation_speed_vs_encoder_decoder']:.2f}x), cache "
            f"{m['cache_bytes'] / 2**20:.2f} MiB",
            flush=True,
        )
    if args.repeats >= 5:
        atomic_write_bytes(OUT, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    run_tool(main)
