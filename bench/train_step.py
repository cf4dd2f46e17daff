"""Tokens per second of one training step: our Transformer versus torch.nn.Transformer.

    python bench/train_step.py                  # CPU (or the default device), two model sizes
    python bench/train_step.py --device cuda --sizes small base

Both models get the same token embedding, positional encoding, tied generator, loss (label-smoothed,
over non-padding tokens), optimiser (Adam) and batch, so the ratio measures the encoder/decoder stacks:
ours (transformer.Encoder/Decoder over our MultiHeadAttention) against torch's nn.Transformer. One
step = forward, loss, backward, gradient clipping, Adam step. The two models alternate step by step
in one process, so a machine that slows down (shared CPUs, clocks) slows both alike; the figure is
the median over the timed steps. Prints one line per size and `ratio = ours / torch` (higher is better),
and the model FLOP/s of our step (`step_flops`, counted by formula on the padded shapes) as a fraction
of the rate of one large matrix product measured in the same process (`matmul_flops_per_s`).
`--padding [MAX_TOKENS ...]` instead reports the pad share of one epoch of Multi30k batches.

    python bench/train_step.py --sizes shipped     # the shipped model's shape, a 2,048-token batch a side
    python bench/train_step.py --padding 2048 4096

What it measured on the course's machine, and what those measurements decided, is in `bench/RESULTS.md`.
"""

import argparse
import resource
import statistics
import time
from contextlib import nullcontext
from typing import NamedTuple
from unittest import mock

import torch
from torch import Tensor, nn

from transformer.embedding import PositionalEncoding, TokenEmbedding
from transformer.model import Transformer, TransformerConfig
from transformer.loss import label_smoothed_loss
from transformer.engine.trainer import autocast
from transformer.engine.machine import keep_freed_memory

from transformer.engine.command_input import at_least, run_tool
from transformer.errors import InputError

from timing import device_argument, sync_for  # bench/timing.py, beside it

# name: (D, h, N layers each side, D_ff, batch size B, source length S, target length T, vocabulary)
SIZES = {
    "tiny": (64, 4, 2, 256, 32, 20, 20, 1000),
    "shipped": (
        256,
        4,
        3,
        1024,
        128,
        16,
        16,
        8000,
    ),  # models/multi30k-de-en's shape, a 2,048-token batch a side
    "small": (128, 4, 2, 512, 32, 24, 24, 4000),
    "medium": (256, 8, 3, 1024, 32, 24, 24, 8000),
    "base": (512, 8, 6, 2048, 64, 32, 32, 10000),
    "big-batch": (512, 8, 6, 2048, 256, 48, 48, 10000),
}


class TorchReference(nn.Module):
    """torch.nn.Transformer between the same embeddings and generator as ours."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.pad_id = c.pad_id
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model, c.pad_id)
        self.tgt_embed = TokenEmbedding(c.tgt_vocab_size, c.d_model, c.pad_id)
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        self.core = nn.Transformer(
            c.d_model,
            c.num_heads,
            c.num_encoder_layers,
            c.num_decoder_layers,
            c.d_ff,
            c.dropout,
            batch_first=True,
            norm_first=c.norm_first,
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.generator.weight = self.tgt_embed.embedding.weight

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(
            1
        )  # True = blocked (torch's convention)
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id  # (B, S), (B, T)
        h = self.core(
            self.positional(self.src_embed(src)),
            self.positional(self.tgt_embed(tgt)),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )  # (B, T, D)
        return self.generator(h)  # (B, T, V)


def make_batch(
    B: int, S: int, T: int, V: int, device, generator
) -> tuple[Tensor, Tensor, Tensor]:
    """Random ids with ragged lengths (padding at the end), as a length-bucketed batch looks."""
    src = torch.randint(4, V, (B, S), generator=generator)
    tgt = torch.randint(4, V, (B, T + 1), generator=generator)
    src_len = torch.randint(S * 3 // 4, S + 1, (B,), generator=generator)
    tgt_len = torch.randint(T * 3 // 4, T + 2, (B,), generator=generator)
    src[torch.arange(S) >= src_len[:, None]] = 0
    tgt[torch.arange(T + 1) >= tgt_len[:, None]] = 0
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def step(model: nn.Module, optimizer, batch, device, dtype) -> None:
    src, tgt_in, tgt_out = batch
    with autocast(
        device, dtype
    ):  # as `train` runs it: bf16 matrix products, or float32
        logits = model(src, tgt_in)  # (B, T, V)
    loss_sum, _, n = label_smoothed_loss(logits, tgt_out, 0.1, 0)
    (loss_sum / n).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def step_flops(D: int, N: int, F: int, B: int, S: int, T: int, V: int) -> int:
    """Floating-point operations of one training step, counted by formula on the batch's (padded) shapes.

    A matrix product (m, k) @ (k, n) is 2mkn operations. Per encoder layer: the Q, K, V, O projections
    (8 B S D^2), scores and weighted values (4 B S^2 D, all heads together), the feed-forward (4 B S D F).
    Per decoder layer: self-attention (8 B T D^2 + 4 B T^2 D), cross-attention (Q and O from the target,
    4 B T D^2; K and V from the memory, 4 B S D^2; scores and values, 4 B T S D), the feed-forward
    (4 B T D F). The generator: 2 B T D V. Backward costs twice the forward: a step is 3 x forward.
    Norms, softmax, dropout, the loss and Adam are element-wise and left out (they are memory-bound).
    """
    encoder = N * (8 * B * S * D * D + 4 * B * S * S * D + 4 * B * S * D * F)
    decoder = N * (
        8 * B * T * D * D
        + 4 * B * T * T * D
        + 4 * B * T * D * D
        + 4 * B * S * D * D
        + 4 * B * T * S * D
        + 4 * B * T * D * F
    )
    return 3 * (encoder + decoder + 2 * B * T * D * V)


def rand_dropout(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Dropout with its mask from `torch.rand_like(input) >= p` instead of `bernoulli_` (what `--dropout rand`
    measures: how much of the step a cheaper mask would save; training uses torch's dropout)."""
    if not training or p == 0.0:
        return input
    return input * (torch.rand_like(input) >= p) * (1.0 / (1.0 - p))


def matmul_flops_per_s(
    device: torch.device,
    n: int = 2048,
    repeats: int = 7,
    dtype: torch.dtype = torch.float32,
) -> float:
    """The rate of one large matrix product (n x n @ n x n, in `dtype`) in this process: the practical peak."""
    a, b = (
        torch.randn(n, n, device=device, dtype=dtype),
        torch.randn(n, n, device=device, dtype=dtype),
    )
    times = []
    for _ in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times[1:])


def sync(device: torch.device) -> None:
    sync_for(device)()


class Measured(NamedTuple):
    """One size's figures over the timed steps (medians of the step times)."""

    ours: float  # tokens per second, our model
    torch: float  # tokens per second, torch.nn.Transformer
    seconds: float  # seconds per step, our model
    in_os: float  # the operating system's share of the process's CPU time
    faults: float  # page faults per step


def bench(
    size: str,
    device: torch.device,
    steps: int,
    warmup: int,
    bf16: bool,
    compile_: bool,
    adam: str = "default",
) -> Measured:
    """Time `steps` training steps of both models at `size`, alternating them step by step."""
    D, h, N, F, B, S, T, V = SIZES[size]
    c = TransformerConfig(
        src_vocab_size=V,
        tgt_vocab_size=V,
        d_model=D,
        num_heads=h,
        num_encoder_layers=N,
        num_decoder_layers=N,
        d_ff=F,
        dropout=0.1,
        max_len=max(S, T) + 2,
    )
    torch.manual_seed(0)
    models = {"ours": Transformer(c).to(device), "torch": TorchReference(c).to(device)}
    kind = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[adam]
    optims = {
        k: torch.optim.Adam(
            m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **kind
        )
        for k, m in models.items()
    }
    runners = {
        k: (torch.compile(m, dynamic=False) if compile_ else m)
        for k, m in models.items()
    }
    g = torch.Generator().manual_seed(0)
    batch = make_batch(B, S, T, V, device, g)
    tokens = int(
        (batch[0] != 0).sum() + (batch[2] != 0).sum()
    )  # source + target tokens of the step
    dtype = torch.bfloat16 if bf16 else None
    times = {k: [] for k in models}
    usage = None
    for i in range(warmup + steps):
        if i == warmup:
            usage = resource.getrusage(resource.RUSAGE_SELF)
        for k in ("ours", "torch") if i % 2 == 0 else ("torch", "ours"):
            sync(device)
            t0 = time.perf_counter()
            step(runners[k], optims[k], batch, device, dtype)
            sync(device)
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    system, user = after.ru_stime - usage.ru_stime, after.ru_utime - usage.ru_utime
    in_os = system / max(
        system + user, 1e-9
    )  # the share of CPU time the operating system spent for the process
    faults = (after.ru_minflt - usage.ru_minflt) / (
        2 * steps
    )  # page faults per step (both models)
    ours = statistics.median(times["ours"])
    return Measured(
        tokens / ours, tokens / statistics.median(times["torch"]), ours, in_os, faults
    )


def padding_report(max_tokens: int) -> str:
    """The share of pad tokens in one epoch of Multi30k batches, packed as the shipped recipe packs them.

    The sampler sorts by max(S_i, T_i + 1) and fills a batch up to `max_tokens` of that size; source and
    target are then each padded to their own longest row. Counted on the shipped model's tokenizer.
    """
    from transformer.engine.shipped import models_dir
    from transformer.engine.corpora import load_multi30k
    from transformer.data import TokenBudgetBatchSampler, TranslationDataset
    from transformer.tokenizer import Tokenizer

    tok = Tokenizer.load(models_dir() / "multi30k-de-en" / "tokenizer.model")
    data = TranslationDataset(load_multi30k("train"), tok, tok, max_len=64)
    real = {"src": 0, "tgt": 0}
    cells = {"src": 0, "tgt": 0}
    per_batch = []
    for batch in TokenBudgetBatchSampler(data.lengths, max_tokens, seed=0):
        src = [len(data.src_ids[i]) for i in batch]
        tgt = [
            len(data.tgt_ids[i]) + 1 for i in batch
        ]  # bos + target (input) or target + eos (output)
        real["src"], real["tgt"] = real["src"] + sum(src), real["tgt"] + sum(tgt)
        cells["src"], cells["tgt"] = (
            cells["src"] + len(batch) * max(src),
            cells["tgt"] + len(batch) * max(tgt),
        )
        per_batch.append(
            1 - (sum(src) + sum(tgt)) / (len(batch) * (max(src) + max(tgt)))
        )
    share = {k: 1 - real[k] / cells[k] for k in real}
    return (
        f"padding at max_tokens={max_tokens}: {len(per_batch)} batches; pad share of the source cells "
        f"{share['src']:.1%}, of the target cells {share['tgt']:.1%}; per batch median "
        f"{statistics.median(per_batch):.1%}, worst {max(per_batch):.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", type=device_argument)
    parser.add_argument("--sizes", nargs="+", default=None, choices=sorted(SIZES))
    parser.add_argument(
        "--steps",
        type=at_least(1),
        default=None,
        help="timed steps per model (default: 20 CPU, 50 GPU)",
    )
    parser.add_argument("--warmup", type=at_least(0), default=3)
    parser.add_argument(
        "--bf16", action="store_true", help="bf16 autocast (as training does on CUDA)"
    )
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile both models"
    )
    parser.add_argument(
        "--adam",
        default="default",
        choices=["default", "foreach", "fused"],
        help="torch.optim.Adam's implementation: its default (a loop over tensors on the CPU), "
        "foreach (one kernel per operation over all tensors) or fused (one kernel)",
    )
    parser.add_argument(
        "--threads", type=at_least(1), default=None, help="torch CPU threads"
    )
    parser.add_argument(
        "--dropout",
        default="torch",
        choices=["torch", "rand"],
        help="torch: torch's dropout (bernoulli_ masks), as training runs; rand: masks from "
        "rand_like >= p (what a cheaper mask would save)",
    )
    parser.add_argument(
        "--padding",
        type=at_least(1),
        nargs="*",
        metavar="MAX_TOKENS",
        help="only report the pad share of Multi30k batches at these token budgets (default 2048)",
    )
    args = parser.parse_args()
    if args.padding is not None:
        for max_tokens in args.padding or [2048]:
            try:
                print(padding_report(max_tokens))
            except InputError as e:
                parser.error(f"--padding {max_tokens}: {e}")
        return
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = device.type == "cuda"
    args.sizes = args.sizes or (
        ["medium", "base", "big-batch"] if gpu else ["small", "medium"]
    )
    args.steps = args.steps or (50 if gpu else 20)
    print(
        f"device={device} bf16={args.bf16} compile={args.compile} adam={args.adam} dropout={args.dropout} "
        f"threads={torch.get_num_threads()} torch={torch.__version__} steps={args.steps}"
    )
    # `--dropout rand`: nn.Dropout and our attention read nn.functional.dropout at call time; patched for the
    # measurements only, and put back when they end
    with (
        mock.patch.object(nn.functional, "dropout", rand_dropout)
        if args.dropout == "rand"
        else nullcontext()
    ):
        ratios = measure_sizes(args, device)
    print(f"min ratio = {min(ratios):.3f}")


def measure_sizes(args, device: torch.device) -> list[float]:
    """Print the figures of each of `args.sizes`; return the ratios ours / torch."""
    ratios = []
    # On a CPU each size runs twice in this process: first with glibc's default allocator, then as `train` runs
    # (keep_freed_memory, which cannot be undone within a process); the second run's figures are the headline.
    allocators = (
        ["glibc default", "keep_freed_memory"] if device.type == "cpu" else ["default"]
    )
    peak_dtype = (
        torch.bfloat16 if args.bf16 else torch.float32
    )  # the step's matmuls run in this type
    for size in args.sizes:
        D, h, N, F, B, S, T, V = SIZES[size]
        before = None
        for allocator in allocators:
            if allocator == "keep_freed_memory" and not keep_freed_memory():
                print(f"{'':>9} (no glibc here: keep_freed_memory does nothing)")
                break
            peak = matmul_flops_per_s(device, dtype=peak_dtype)
            ours, ref, seconds, in_os, faults = bench(
                size,
                device,
                args.steps,
                args.warmup,
                args.bf16,
                args.compile,
                args.adam,
            )
            peak = (
                peak + matmul_flops_per_s(device, dtype=peak_dtype)
            ) / 2  # the machine's state during the run
            rate = step_flops(D, N, F, B, S, T, V) / seconds
            print(
                f"{size:>9} (D={D}, h={h}, N={N}, D_ff={F}, B={B}, S={S}, T={T}, V={V}), allocator {allocator}: "
                f"ours {ours:,.0f} tok/s, torch {ref:,.0f} tok/s, ratio = {ours / ref:.3f}"
            )
            print(
                f"{'':>9} model FLOP/s of our step {rate / 1e9:,.1f} G = {rate / peak:.0%} of a large "
                f"{str(peak_dtype).removeprefix('torch.')} matmul's {peak / 1e9:,.1f} G in this process "
                f"(efficiency = {rate / peak:.3f})"
            )
            print(
                f"{'':>9} CPU time in the operating system {in_os:.1%}, {faults:,.0f} page faults per step"
            )
            if before is not None:
                print(
                    f"{'':>9} keep_freed_memory: our step {before / seconds:.3f}x as fast as with the default"
                )
            before = seconds
        ratios.append(ours / ref)
    return ratios


if __name__ == "__main__":
    run_tool(main)
