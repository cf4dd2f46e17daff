"""Chapter 17's measurements: time and peak memory of one attention call against sequence length.

    python tools/attention_cost.py                 # writes notebooks/results/17_attention_cost.json
    python tools/attention_cost.py --lengths 128 1024 --repeats 1   # a quick look, printed only
    python tools/attention_cost.py --training      # forward + backward with autograd, one causal head,
                                                   # S = 256 .. 8192: adds "training_rows" to the JSON

Three ways to compute softmax(Q K^T / sqrt(D_h)) V for one sentence of S tokens attending to itself with the
shipped models' heads (h = 4, D_h = 64, float32, causal mask): chapter 02's explicit `attention` (forms the
S x S weights), PyTorch's fused `scaled_dot_product_attention` (on the CPU a FlashAttention-style kernel that
never holds the whole matrix), and chapter 17's `tiled_attention` (the same idea in a Python loop over blocks
of keys). One thread, so that the curves do not depend on how many cores a machine has.

Time: the best of `--repeats` calls after one warm-up call. Peak memory: each (method, S) runs in a fresh
child process, which warms the method up at S = 64, resets Linux's peak counter of its resident set, and
reports how far the peak rose above the resident set just before the call: what the call needed on top of its
inputs (Linux only: /proc/self/status and clear_refs). Lengths
whose inputs or scores would not fit comfortably are not skipped: at S = 8,192 the explicit path needs
h * S^2 * 4 bytes = 1 GiB per score matrix, which this machine holds.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from transformer.engine.command_input import at_least, run_tool
from transformer.errors import InputError
from transformer.files import earlier_results
from transformer.memory import check_fits

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "17_attention_cost.json"
LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192]
HEADS, D_HEAD, BLOCK = 4, 64, 256
METHODS = ("explicit", "fused", "tiled")


def _status_bytes(field: str) -> int:
    """A memory figure of this process from Linux's /proc/self/status (VmRSS: resident now; VmHWM: its peak)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024


TRAIN_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TRAIN_HEADS = 1


def _train_call(method: str, S: int):
    """A function running `method` forward and backward once (autograd on) on fresh inputs of length S:
    one head, causal, the gradient of the output taken against a fixed random dO."""
    import torch
    import torch.nn.functional as F

    from transformer.attention import attention
    from transformer.attention_cost import tiled_attention
    from transformer.masking import causal_mask

    torch.manual_seed(0)
    Q, K, V, dO = torch.randn(4, 1, TRAIN_HEADS, S, D_HEAD).unbind(0)
    for t in (Q, K, V):
        t.requires_grad_(True)
    mask = (
        causal_mask(S) if method == "explicit" else None
    )  # the explicit path needs it
    forward = {
        "explicit": lambda: attention(Q, K, V, mask)[0],
        "fused": lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
        "tiled": lambda: tiled_attention(Q, K, V, block=BLOCK, causal=True),
    }[method]

    def run():
        Q.grad = K.grad = V.grad = None
        forward().backward(dO)

    return run


def _call(method: str, S: int):
    """A function running `method` once on fresh inputs of length S (built outside what is measured)."""
    import torch
    import torch.nn.functional as F

    from transformer.attention import attention
    from transformer.attention_cost import tiled_attention
    from transformer.masking import causal_mask

    torch.manual_seed(0)
    Q, K, V = torch.randn(3, 1, HEADS, S, D_HEAD).unbind(0)  # (B, h, S, D_h) each
    mask = causal_mask(S)  # (S, S) booleans: S^2 bytes, an input of every method
    runs = {
        "explicit": lambda: attention(Q, K, V, mask)[0],
        "fused": lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
        "tiled": lambda: tiled_attention(Q, K, V, mask, block=BLOCK),
    }
    return runs[method]


def measure_memory(method: str, S: int, training: bool = False) -> int:
    """Child process: bytes the call needs above its inputs (peak resident set minus resident set before).

    One call at S = 64 first loads whatever the method's kernels load on first use; then the peak counter is
    reset (writing 5 to /proc/self/clear_refs), so that the peak read after the call is this call's.
    """
    import torch

    torch.set_num_threads(1)
    make = _train_call if training else _call
    with torch.set_grad_enabled(training):
        make(method, 64)()
        run = make(method, S)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident set starts again from the resident set now
        before = _status_bytes("VmRSS")
        run()
        return max(0, _status_bytes("VmHWM") - before)


def measure_time(method: str, S: int, repeats: int, training: bool = False) -> float:
    """Seconds of the fastest of `repeats` calls, after one warm-up call."""
    import torch

    run = (_train_call if training else _call)(method, S)
    best = float("inf")
    with torch.set_grad_enabled(training):
        run()
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    return best


def measured_row(method: str, S: int, repeats: int, training: bool) -> dict:
    """One method at one length: peak memory in a fresh child process (one thread),
    and the best of `repeats` timed calls in this one."""
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            "--memory-child",
            method,
            str(S),
            str(int(training)),
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        "method": method,
        "length": S,
        "seconds": measure_time(method, S, repeats, training=training),
        "peak_bytes": int(child.stdout.strip().splitlines()[-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=at_least(1), nargs="+", default=LENGTHS)
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument(
        "--training",
        action="store_true",
        help="forward + backward with autograd, one head, S = 256 .. 8192: adds 'training_rows' to the JSON",
    )
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        method, S, training = args.memory_child
        print(measure_memory(method, int(S), training == "1"))
        return
    if args.training:
        if args.lengths != LENGTHS:  # they were ignored, and the shipped rows replaced
            parser.error(
                "--lengths is for the inference rows; --training measures S = "
                f"{', '.join(map(str, TRAIN_LENGTHS))}"
            )
        return main_training(args.repeats)
    kept = earlier_results(OUT, {})  # a damaged file is refused before the work
    try:  # the explicit path holds the scores and their softmax: 2 h S^2 floats
        S = max(args.lengths)
        check_fits(2 * HEADS * S**2 * 4, "cpu", f"attention at S = {S:,}", "--lengths")
    except InputError as e:
        parser.error(str(e))
    import torch

    from transformer.engine.machine import cpu_name
    from transformer.files import atomic_write_bytes

    torch.set_num_threads(1)
    rows = []
    for S in args.lengths:
        for method in METHODS:
            row = measured_row(method, S, args.repeats, training=False)
            rows.append(row)
            print(
                f"S={S:5d} {method:8s} {row['seconds'] * 1e3:9.1f} ms {row['peak_bytes'] / 2**20:9.1f} MiB",
                flush=True,
            )
    if args.lengths == LENGTHS and args.repeats == 3:
        result = {
            "heads": HEADS,
            "d_head": D_HEAD,
            "block": BLOCK,
            "dtype": "float32",
            "threads": 1,
            "torch": torch.__version__,
            "machine": f"{cpu_name()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d"),
            "rows": rows,
        }
        # keep the forward + backward rows of `--training`
        result.update({k: kept[k] for k in ("training", "training_rows") if k in kept})
        OUT.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(OUT, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
        print(f"wrote {OUT.relative_to(ROOT)}")


def main_training(repeats: int) -> None:
    """Forward + backward of one causal head (autograd on): peak memory in a fresh child process and the
    best of `repeats` timed calls (one call from S = 4,096 on, to keep the run short). The rows are added to
    the JSON as 'training_rows'; the inference rows are kept."""
    import torch

    from transformer.files import atomic_write_bytes

    result = earlier_results(OUT)  # the rows added to: read before the work
    torch.set_num_threads(1)
    rows = []
    for S in TRAIN_LENGTHS:
        for method in METHODS:
            row = measured_row(
                method,
                S,
                repeats if S < 4096 else 1,
                training=True,
            )
            rows.append(row)
            print(
                f"train S={S:5d} {method:8s} {row['seconds'] * 1e3:9.1f} ms {row['peak_bytes'] / 2**20:9.1f} MiB",
                flush=True,
            )
    result["training"] = {
        "heads": TRAIN_HEADS,
        "d_head": D_HEAD,
        "block": BLOCK,
        "repeats": repeats,
        "memory": "peak resident set (VmHWM) above the resident set before the call, fresh child process",
        "date": time.strftime("%Y-%m-%d"),
    }
    result["training_rows"] = rows
    if repeats != 3:  # a quick look: the shipped rows are not replaced by it
        print("printed only: the JSON's rows are measured with --repeats 3")
        return
    atomic_write_bytes(OUT, (json.dumps(result, indent=1) + "\n").encode("utf-8"))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    run_tool(main)
