"""What the fused kernel buys: `transformer.attention` (explicit) versus `scaled_dot_product_attention`.

    python bench/attention.py                 # CPU, float32
    python bench/attention.py --device cuda   # also bf16 on a GPU

Both compute softmax(Q K^T / sqrt(D_h)) V with a causal mask, forward and backward, on the same
(B, h, T, D_h) tensors. They alternate call by call in one process, so a noisy machine slows both
alike; each figure is the median over the timed repeats. Prints time per call for both and the
speed-up `explicit / fused` (above 1: the fused kernel is faster).
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

from transformer.attention import attention
from transformer.masking import causal_mask

from transformer.engine.command_input import at_least, run_tool

from timing import device_argument, sync_for, timed  # bench/timing.py, beside it

# (B, h, T, D_h)
SHAPES = [(32, 8, 32, 64), (16, 8, 128, 64), (4, 8, 512, 64)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", type=device_argument)
    parser.add_argument("--repeats", type=at_least(1), default=20)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = sync_for(device)
    print(
        f"device {device}, dtype {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    print(
        f"{'B, h, T, D_h':>18} {'explicit ms':>12} {'fused ms':>10} {'explicit/fused':>15}"
    )
    g = torch.Generator().manual_seed(0)
    for B, h, T, D_h in SHAPES:
        Q, K, V = (
            torch.randn(B, h, T, D_h, generator=g)
            .to(device, dtype)
            .requires_grad_(True)
            for _ in range(3)
        )
        mask = causal_mask(T, device)

        def explicit():
            attention(Q, K, V, mask)[0].sum().backward()

        def fused():
            F.scaled_dot_product_attention(Q, K, V, is_causal=True).sum().backward()

        for _ in range(3):  # warm-up
            explicit(), fused()
        t_exp, t_fused = [], []
        for _ in range(args.repeats):
            t_exp.append(timed(explicit, sync))
            t_fused.append(timed(fused, sync))
        e, f = statistics.median(t_exp) * 1e3, statistics.median(t_fused) * 1e3
        print(f"{str((B, h, T, D_h)):>18} {e:>12.2f} {f:>10.2f} {e / f:>15.2f}")


if __name__ == "__main__":
    run_tool(main)
