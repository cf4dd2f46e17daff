"""The "train it yourself" figures of the README and chapter 10: one run of a config, timed and scored.

    python tools/train_it_yourself.py --config configs/multi30k-fast.toml      # train (about half an hour), then score
    python tools/train_it_yourself.py --config configs/multi30k-fast.toml --run-dir DIR   # score a finished run of it

Trains the config with `transformer train` in a child process (all of the machine's threads unless
OMP_NUM_THREADS says otherwise), then scores the run's last checkpoint alone, as the config's recipe
ships it: on its validation split greedily and with beam 4, alpha 1.0, and once on `test_2016_flickr` with
beam 4, alpha 1.0 (the shipped model's decoding; the test split plays no part in any choice).

Writes `notebooks/results/train_it_yourself.json`, one entry per config file (its name without `.toml`):
the machine (CPU model, threads); the training time the run logged (`elapsed_s` of its last epoch row in
`metrics.csv`: every step and validation pass, from the first step to the last checkpoint; process start
and the tokenizer take seconds more); when this tool ran the training, the process's wall and CPU time and
the share of the machine's CPU time that the hypervisor gave to other guests meanwhile ("steal", from
/proc/stat: on a busy shared machine the same run takes longer); epochs, steps, validation perplexity by
epoch and the BLEU scores. A run scored with `--run-dir` must have been trained with the file's settings
(its name and folder aside). Chapter 10 and the README quote this file; `tests/test_numbers_agree.py`
checks that they agree with it.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from transformer.engine.loading import load_checkpoint
from transformer.engine.evaluate import evaluate_checkpoint
from transformer.engine.config import TrainConfig
from transformer.files import atomic_write_text, earlier_results
from transformer.engine.metrics import read_metrics
from transformer.engine.machine import cpu_name
from transformer.engine.command_input import at_least, run_tool
from transformer.errors import InputError, TransformerError

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "train_it_yourself.json"


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time counters (Linux /proc/stat: user, nice, system, idle, iowait, irq, softirq, steal)."""
    try:
        return [
            int(v)
            for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        ]
    except (OSError, ValueError):
        return None


def timed_training(config_path: str) -> dict:
    """Run `transformer train` in a child process; its wall time, its CPU time, and the share of the machine's
    CPU time that the hypervisor gave to other guests meanwhile ("steal": on a shared cloud machine the same
    run takes longer when the neighbours are busy)."""
    before, t0 = cpu_ticks(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "transformer", "train", "--config", config_path]
    )
    if done.returncode:  # its own message is above; this tool has no --resume
        raise InputError(
            f"`transformer train` stopped (exit status {done.returncode}, its message "
            f"above): mend what it says; a run that is there is finished with `transformer "
            f"train --config {config_path} --resume`, then scored with --run-dir"
        )
    wall, after = time.perf_counter() - t0, cpu_ticks()
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    timing = {
        "process_wall_s": round(wall),
        "process_cpu_s": round(child.ru_utime + child.ru_stime),
    }
    if before and after:
        spent = [b - a for a, b in zip(before, after)]
        timing["steal_share"] = round(spent[7] / max(sum(spent), 1), 3)
    return timing


def bleu(checkpoint, split: str, beam: int) -> float:
    """sacreBLEU of one decoding of `split` (alpha 1.0 with a beam, as shipped), to two decimals."""
    report = evaluate_checkpoint(
        checkpoint, split, beam_size=beam, alpha=1.0 if beam > 1 else 0.0
    )
    return round(next(s["score"] for s in report["scores"] if s["metric"] == "BLEU"), 2)


# Settings that do not change what is trained: a run of the config may differ from the file in these.
IGNORED = (
    "name",
    "out_dir",
    "progress",
    "tensorboard",
    "log_every",
    "save_every",
    "keep_last",
)


def recipe(config: TrainConfig) -> dict:
    return {k: v for k, v in config.to_dict().items() if k not in IGNORED}


def record(config: TrainConfig, run: Path, threads: int) -> dict:
    """The measurements of the finished run in `run`, trained with `config`'s recipe."""
    last = load_checkpoint(run)  # the newest checkpoint: the end of the last epoch
    theirs, ours = recipe(last.train_config), recipe(config)
    if theirs != ours:
        diff = sorted(
            k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k)
        )
        raise SystemExit(
            f"error: {run} was trained with other settings than the config ({', '.join(diff)})"
        )
    epochs = [r for r in read_metrics(run) if r["kind"] == "epoch"]
    if len(epochs) < config.optim.epochs:
        raise SystemExit(
            f"error: {run} has {len(epochs)} of {config.optim.epochs} epochs; finish it with "
            f"`transformer train --config ... --resume` first"
        )
    return {
        "machine": cpu_name(),
        "threads": threads,
        "torch": torch.__version__,
        "recipe": ours,
        "wall_s": round(float(epochs[-1]["elapsed_s"])),
        "epochs": len(epochs),
        "steps": int(epochs[-1]["step"]),
        "elapsed_s_by_epoch": [round(float(r["elapsed_s"])) for r in epochs],
        "valid_ppl_by_epoch": [round(float(r["valid_ppl"]), 2) for r in epochs],
        "val_bleu_greedy": bleu(last, "val", 1),
        "val_bleu_beam4": bleu(last, "val", 4),
        "test_2016_flickr_bleu": bleu(last, "test_2016_flickr", 4),
        "decoding": "beam 4, alpha 1.0; sacreBLEU cased, 13a",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--run-dir", help="a finished run of the config: score it, do not train"
    )
    parser.add_argument(
        "--threads",  # 0 was recorded in the book's table
        type=at_least(1),
        default=None,
        help="the threads the training used (default: OMP_NUM_THREADS, else every core)",
    )
    args = parser.parse_args()
    if args.threads is None:
        omp = os.environ.get("OMP_NUM_THREADS", "")
        args.threads = (
            int(omp) if omp.isascii() and omp.isdigit() and int(omp) else os.cpu_count()
        )
    key = Path(args.config).stem
    try:  # a config or a run folder that is not one: one line, as the package's commands
        results = earlier_results(OUT, {})  # read before the work
        config = TrainConfig.from_toml(args.config)
        entry = results.get(key, {})
        earlier = entry.get("recipe") if isinstance(entry, dict) else "damaged"
        if not isinstance(earlier, (dict, type(None))):
            raise InputError(
                f"{OUT.name}'s entry {key!r} is damaged: restore the file (git checkout "
                f"-- {OUT}), or move it aside"
            )
        ours = recipe(config)
        if earlier not in (None, ours):  # before the half hour of training
            diff = sorted(k for k in {*earlier, *ours} if earlier.get(k) != ours.get(k))
            raise InputError(
                f"{OUT.name} holds a run of another config called {key!r} (it differs in "
                f"{', '.join(diff)}), which this one would replace: give the config a name "
                "of its own (cp it to a new file)"
            )
        timing = {} if args.run_dir else timed_training(args.config)
        entry = {
            **record(config, Path(args.run_dir or config.out_dir), args.threads),
            **timing,
        }
    except TransformerError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    results[key] = entry
    atomic_write_text(OUT, json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(entry, indent=1))


if __name__ == "__main__":
    run_tool(main)
