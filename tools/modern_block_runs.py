"""Chapters 16 and 18's measurements (chapter 18's below): one model trained at one equal budget, with each change of the modern block
alone, all of them together, two pairs of them (rotary with RMSNorm, rotary without biases: where the changes
interact), and grouped-query attention in the decoder with one and with two key/value heads (chapter 17);
several seeds of each. A second, longer budget (--budget
shipped) trains the paper's block against the modern block at the shipped shape with the fast recipe.

    python tools/modern_block_runs.py --out-dir runs/modern            # every run not yet in the JSON
    python tools/modern_block_runs.py --out-dir runs/modern --only baseline:0 rms:0
    python tools/modern_block_runs.py --budget shipped --out-dir runs/modern-shipped
    python tools/modern_block_runs.py --budget decoder_only --out-dir runs/decoder-only   # chapter 18

Each run is `configs/multi30k-small.toml`'s data, vocabulary, dropout, label smoothing and optimiser with a
smaller model (SHAPE: D = 128, 2 + 2 layers, 4 heads, d_ff = 512, pre-norm) and one change in [model],
trained for EPOCHS epochs with the linear schedule (WARMUP steps of warm-up, LR_FACTOR). Seeds: SEEDS. Why not the shipped
shape (D = 256, 3 + 3 layers): nine runs of it long enough to be worth comparing do not fit this machine. Two
epochs of it took 28 minutes per run (two runs side by side) and ended at validation perplexity 39-41 and
greedy BLEU 6: too early in training for the differences to mean anything. The smaller model does about a
quarter of the arithmetic per token, so it gets through more epochs in less time.

One thread per run, two runs side by side (--parallel), which on two cores gets more tokens per second than one
run on two threads. After training: validation perplexity of the last epoch (metrics.csv) and greedy validation
BLEU; the run's validation translations go to notebooks/results/16_modern_block_runs/<variant>-s<seed>/val.hyp,
so that any two variants can be compared by a paired test on the same sentences. Results go to
notebooks/results/16_modern_block_runs.json as they finish, so a run cut short (or a session that ends) is
picked up again: training resumes from its last checkpoint, and a run whose result is in the file is not run
again.

The shipped budget: configs/multi30k-fast.toml as it is (D = 256, 3 + 3 layers, d_ff = 1024, 6 epochs, 800
warm-up steps, linear decay, bf16 autocast) for the modern block ("all"), and the same file with the paper's
block (LayerNorm, added sinusoids, ReLU, biases) for "baseline"; seeds 0-2 of each at the recipe's learning
rate. Whether one rate is fair to both blocks: seed 0 of each again at half and at twice the rate
(LR_SWEEP). Results go to notebooks/results/16_modern_block_shipped.json and the translations to
notebooks/results/16_modern_block_shipped/<variant>-lr<factor>-s<seed>/val.hyp.

Chapter 18's budget (--budget decoder_only) is the small budget with the decoder-only model in place of the
encoder-decoder: one stack of 5 blocks (the nearest to the 2 + 2 layers' parameters), with the causal and with
the prefix source mask (DECODER_ONLY), seeds 0-4 of each, and the small budget's baseline again (the
encoder-decoder, seeds 0-4), so that all three run on one machine (five seeds a side: with three, the
test over the seeds cannot go below p = 0.1). Each run is also scored with the shipped
model's beam search (models/multi30k-de-en/decoding.json). Results go to
notebooks/results/18_decoder_only_runs.json and the translations to
notebooks/results/18_decoder_only_runs/<variant>-s<seed>[-beam]/val.hyp.

bf16 autocast needs a CPU with bf16 matrix instructions (AVX512-BF16 or AMX); training refuses it elsewhere.
On such a machine, --precision fp32 runs in float32 instead: the run's name gets "-fp32" and its result says
so, and a run of one precision is never taken for a run of the other.
"""

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool
from transformer.files import earlier_results

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DECODING = ROOT / "models" / "multi30k-de-en" / "decoding.json"
RESULTS = ROOT / "notebooks" / "results"
EPOCHS, WARMUP, LR_FACTOR = (
    3,
    200,
    0.5,
)  # peak learning rate 0.5 * 128^-0.5 * 200^-0.5 = 0.0031
SHAPE = {
    "d_model": 128,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "d_ff": 512,
}
VARIANTS = {  # name -> the [model] settings that differ from the shipped shape
    "baseline": {},
    "rms": {"norm": "rms"},
    "rotary": {"positions": "rotary"},
    "swiglu": {"feed_forward": "swiglu"},
    "no_bias": {"bias": False},
    "all": {
        "norm": "rms",
        "positions": "rotary",
        "feed_forward": "swiglu",
        "bias": False,
    },
    # grouped-query attention in the decoder (chapter 17): 1 and 2 key/value heads of 4
    "gqa": {"kv_heads": 1},
    "gqa2": {"kv_heads": 2},
    "rotary_rms": {"positions": "rotary", "norm": "rms"},
    "rotary_no_bias": {"positions": "rotary", "bias": False},
}
# chapter 18: one stack of 5 blocks (2.02 M parameters against the 2 + 2 layers'
# 1.96 M: the nearest to equal), reading `source BOS target` as one sequence
DECODER_ONLY = {
    "encoder_decoder": {},  # the small budget's baseline again, on the same machine
    "causal": {"num_encoder_layers": 0, "num_decoder_layers": 5},
    "prefix": {
        "num_encoder_layers": 0,
        "num_decoder_layers": 5,
        "source_mask": "prefix",
    },
}
SEEDS = {
    "baseline": range(5),
    "all": range(5),
}  # five seeds for the two ends of the comparison
DEFAULT_SEEDS = range(3)  # three for every other variant
PAPER_BLOCK = {
    "norm": "layer",
    "positions": "sinusoidal",
    "feed_forward": "relu",
    "bias": True,
}
LR_SWEEP = (
    0.5,
    2.0,
)  # the shipped budget's learning rates besides the recipe's, times its lr_factor


@dataclasses.dataclass(frozen=True)
class Budget:
    """One budget of chapter 16: which runs it has, where their results go."""

    name: str
    runs: tuple  # (variant, seed, lr_scale), in the order they are run
    out: Path  # the JSON the chapter reads
    hypotheses: Path  # <run name>/val.hyp

    def run_name(
        self, variant: str, seed: int, lr_scale: float, precision: str | None = None
    ) -> str:
        """`precision`: None for the budget's own, else a suffix (\"-fp32\")."""
        suffix = f"-{precision}" if precision else ""
        if self.name != "shipped":
            return f"{variant}-s{seed}{suffix}"
        return f"{variant}-lr{lr_scale:g}-s{seed}{suffix}"


BUDGETS = {
    "small": Budget(
        "small",
        tuple(
            (v, s, 1.0)
            for s in range(5)
            for v in VARIANTS
            if s in SEEDS.get(v, DEFAULT_SEEDS)
        ),
        RESULTS / "16_modern_block_runs.json",
        RESULTS / "16_modern_block_runs",
    ),
    "shipped": Budget(
        "shipped",
        tuple((v, s, 1.0) for s in range(3) for v in ("baseline", "all"))
        + tuple((v, 0, x) for x in LR_SWEEP for v in ("baseline", "all")),
        RESULTS / "16_modern_block_shipped.json",
        RESULTS / "16_modern_block_shipped",
    ),
    # chapter 18: the small budget's data and schedule; its encoder-decoder is
    # chapter 16's baseline
    "decoder_only": Budget(
        "decoder_only",
        tuple((v, s, 1.0) for s in range(5) for v in DECODER_ONLY),
        RESULTS / "18_decoder_only_runs.json",
        RESULTS / "18_decoder_only_runs",
    ),
}


def block_settings(budget: Budget, variant: str) -> dict:
    """The [model] settings of a variant: what differs from the budget's base config."""
    if budget.name == "shipped":  # the fast recipe's config has the modern block
        return PAPER_BLOCK if variant == "baseline" else {}
    return (DECODER_ONLY if budget.name == "decoder_only" else VARIANTS)[variant]


def run_config(
    budget: Budget,
    variant: str,
    seed: int,
    lr_scale: float,
    out_dir: Path,
    precision: str | None = None,
):
    """The TrainConfig of one run of a budget (`precision`: None keeps the budget's)."""
    from transformer.engine.config import TrainConfig

    name = budget.run_name(variant, seed, lr_scale, precision)
    common = dict(
        out_dir=str(out_dir / name),
        seed=seed,
        device="cpu",
        progress=False,
        tensorboard=False,
        save_every=0,
        keep_last=1,
    )
    if budget.name == "shipped":  # the fast recipe, with the paper's block or its own
        base = TrainConfig.from_toml(ROOT / "configs" / "multi30k-fast.toml")
        block = block_settings(budget, variant)
        return dataclasses.replace(
            base,
            name=f"modern-shipped-{name}",
            model=dataclasses.replace(base.model, **block),
            optim=dataclasses.replace(
                base.optim, lr_factor=base.optim.lr_factor * lr_scale
            ),
            **common,
            **({"precision": precision} if precision else {}),
        )
    base = TrainConfig.from_toml(ROOT / "configs" / "multi30k-small.toml")
    return TrainConfig(
        name=f"modern-{name}",
        data=base.data,
        model=dataclasses.replace(
            base.model, **{**SHAPE, **block_settings(budget, variant)}
        ),
        optim=dataclasses.replace(
            base.optim,
            epochs=EPOCHS,
            warmup_steps=WARMUP,
            lr_factor=LR_FACTOR,
            schedule="linear",
        ),
        **common,
        **({"precision": precision} if precision else {}),
    )


def one_run(
    budget: Budget,
    variant: str,
    seed: int,
    lr_scale: float,
    out_dir: Path,
    precision: str | None = None,
) -> dict:
    """Train (or resume) one run and measure it: runs in a child process with one thread."""
    import torch

    from transformer.engine.loading import load_checkpoint
    from transformer.engine.evaluate import evaluate_checkpoint
    from transformer.engine.metrics import read_metrics
    from transformer.engine.trainer import train

    torch.set_num_threads(1)
    config = run_config(budget, variant, seed, lr_scale, out_dir, precision)
    start = time.time()
    train(config, resume=(Path(config.out_dir) / "checkpoints").is_dir())
    epochs = [
        r
        for r in read_metrics(Path(config.out_dir) / "metrics.csv")
        if r["kind"] == "epoch"
    ]
    checkpoint = load_checkpoint(config.out_dir)
    report = evaluate_checkpoint(
        checkpoint,
        "val",
        beam_size=1,
        out_dir=budget.hypotheses / budget.run_name(variant, seed, lr_scale, precision),
    )
    bleu = next(s["score"] for s in report["scores"] if s["metric"].startswith("BLEU"))
    model = config.model
    beam = {}
    if budget.name == "decoder_only":  # also the shipped model's beam search
        settings = json.loads(SHIPPED_DECODING.read_text(encoding="utf-8"))
        hypotheses = (
            budget.hypotheses / f"{budget.run_name(variant, seed, lr_scale)}-beam"
        )
        scored = evaluate_checkpoint(checkpoint, "val", **settings, out_dir=hypotheses)
        beam = {
            "decoding": settings,
            "val_bleu_beam": round(
                next(
                    s["score"]
                    for s in scored["scores"]
                    if s["metric"].startswith("BLEU")
                ),
                2,
            ),
        }
    return {
        "variant": variant,
        "seed": seed,
        "settings": block_settings(budget, variant),
        "shape": {k: getattr(model, k) for k in SHAPE},
        "epochs": config.optim.epochs,
        "warmup_steps": config.optim.warmup_steps,
        "lr_factor": config.optim.lr_factor,
        "lr_scale": lr_scale,
        "precision": config.precision,
        "threads": torch.get_num_threads(),
        "steps": int(epochs[-1]["step"]),
        "valid_ppl": round(float(epochs[-1]["valid_ppl"]), 3),
        "val_bleu_greedy": round(bleu, 2),
        **beam,
        "parameters": sum(p.numel() for p in checkpoint.model.parameters()),
        "train_seconds": round(float(epochs[-1]["elapsed_s"])),
        "wall_seconds_this_call": round(time.time() - start),
    }


def only_run(budget: Budget, text: str) -> tuple:
    """'variant:seed' or 'variant:seed:lr_scale' -> (variant, seed, lr_scale), or a
    ValueError that says what the budget's runs are."""
    variant, _, rest = text.partition(":")
    seed, _, scale = rest.partition(":")
    variants = sorted({v for v, _, _ in budget.runs})
    if variant not in variants or ":" in scale:
        raise ValueError(
            f"{text!r}: give variant:seed or variant:seed:lr_scale, with a variant of "
            f"the {budget.name} budget ({', '.join(variants)})"
        )
    if not (seed.isascii() and seed.isdigit()):
        raise ValueError(f"{text!r}: the seed must be a whole number >= 0")
    try:
        lr_scale = float(scale) if ":" in rest else 1.0
    except ValueError:
        lr_scale = float("nan")
    if not (math.isfinite(lr_scale) and lr_scale > 0):
        raise ValueError(f"{text!r}: the lr_scale must be a number > 0")
    return variant, int(seed), lr_scale


def main() -> None:
    from transformer.engine.machine import cpu_has_bf16_matmul, cpu_name
    from transformer.files import atomic_write_bytes

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget", choices=BUDGETS, default="small")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "runs" / "modern")
    parser.add_argument(
        "--only",
        nargs="*",
        help="variant:seed (or variant:seed:lr_scale) runs to do (default: all missing ones)",
    )
    parser.add_argument(
        "--parallel",
        type=at_least(1),
        default=2,
        help="runs side by side, one thread each (default 2)",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32",),
        help="train in float32 instead of the budget's precision (named in the run)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    budget = BUDGETS[args.budget]
    if args.child:  # one run, in its own process; prints its result as JSON
        variant, seed, lr_scale = args.child.split(":")
        result = one_run(
            budget, variant, int(seed), float(lr_scale), args.out_dir, args.precision
        )
        print(json.dumps(result))
        return
    try:  # a run that is none failed in its child, after the others had started
        only = [only_run(budget, o) for o in args.only or []]
    except ValueError as e:
        parser.error(f"--only {e}")
    try:  # a file on the way failed in every child, after the first one's start
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--out-dir {args.out_dir}: {e.strerror}: name a folder of yours")
    out = budget.out
    results = earlier_results(out, {"runs": []})
    if not isinstance(results.get("runs"), list):
        parser.error(f"{out} holds no list of runs: restore it (git checkout -- {out})")

    own = run_config(budget, budget.runs[0][0], 0, 1.0, args.out_dir).precision

    def key(r: dict) -> tuple:  # a run of one precision is not a run of another
        return r["variant"], r["seed"], r.get("lr_scale", 1.0), r.get("precision", own)

    precision = args.precision or own
    done = {key(r) for r in results["runs"]}
    todo = only or [run for run in budget.runs if (*run, precision) not in done]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    while todo:
        batch, todo = todo[: args.parallel], todo[args.parallel :]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--budget",
                    budget.name,
                    "--out-dir",
                    str(args.out_dir),
                    "--child",
                    f"{v}:{s}:{x}",
                ]
                + (["--precision", args.precision] if args.precision else []),
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for v, s, x in batch
        ]
        for child, (v, s, x) in zip(children, batch):
            stdout, _ = child.communicate()
            if child.returncode:
                raise SystemExit(f"run {v}:{s}:{x} failed (exit {child.returncode})")
            result = json.loads(stdout.strip().splitlines()[-1])
            # per run: a budget's runs may be spread over machines, which a CPU's
            # name alone need not tell apart
            units = "with" if cpu_has_bf16_matmul() else "without"
            result["machine"] = (
                f"{cpu_name()} {units} bf16 matrix units, {os.cpu_count()} cores, "
                "one thread per run"
            )
            results["runs"] = [
                r for r in results["runs"] if key(r) != (v, s, x, precision)
            ] + [result]
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(
                out, (json.dumps(results, indent=1) + "\n").encode("utf-8")
            )  # never half a file
            print(
                f"{budget.run_name(v, s, x, args.precision)} -> val ppl {result['valid_ppl']}, "
                f"greedy val BLEU {result['val_bleu_greedy']}",
                flush=True,
            )


if __name__ == "__main__":
    run_tool(main)
