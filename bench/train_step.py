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

Measured on 2026-12-01, the course's 2-core Intel Xeon, torch 2.13.0, two threads, eager, 10 timed
steps: shipped shape, ours 2,564 tok/s, torch.nn.Transformer 2,208 (ratio 1.16); model FLOP/s 69.0 G,
36 % of a 2,048^3 matmul's 191 G. Padding at max_tokens=2048: 8.5 % of the source cells and 5.3 % of
the target cells are pads (median batch 6.6 %, worst 13.8 %), so padding is not where the step loses
most of its time; the rest is the element-wise work (norms, softmax, dropout, Adam) and the small
matrices of a 256-wide model. One thread: ours 1,588 tok/s, 44 % of that thread's 98 G matmul rate (two
threads give 1.61x the tokens at a lower fraction). `--compile` (torch.compile, inductor, two threads):
ours 1,945 tok/s, 29 %, slower than eager here.

Measured again that evening while other guests of the cloud machine took 30-50 % of its CPU time (the
"steal" column of /proc/stat), so that one configuration's efficiency moved between 0.34 and 0.40 from one
process to the next: read the following as directions, not as exact gains. `--adam fused` 0.405 and
`--adam foreach` 0.440, against 0.338 and 0.404 for the default loop. A profile of one step (torch.profiler,
one thread): matrix products 51 % of the time, dropout's random masks (`aten::bernoulli_`) 15 % (the
feed-forward hidden layer's alone 8 %), log-softmax forward and backward 5 %, zero fills and copies of
(B, T, V) tensors in the loss's backward 4 %, Adam 3 %. The modern block of chapter 16 (RMSNorm, rotary,
SwiGLU, no biases) takes 2.07 s a step against 1.80 s at this shape: its element-wise products
(`aten::mul`) take 9 % of the step.

The allocator. Each step used to page-fault about 90,000 times and spend a tenth of its CPU time in the
operating system: glibc's malloc hands large freed blocks (the (B, T, V) logits and their gradient are 65 MB
each) back to the system, and the next step faults them in again, zero-filled. `train` now calls
`keep_freed_memory` (appendix 95) on the CPU, and this bench measures each size twice in one process, first
with glibc's default and then with it. 2026-12-01, quiet machine (steal under 1 %), two threads, float32:
90,575 -> 1,613 faults per step, 10.2 % -> 2.1 % of the CPU time in the operating system, the step 1.08x as
fast. In a whole run the effect is larger than in this bench's fixed-shape batch: configs/multi30k-fast.toml
spent 12 s of system time in 28 minutes against 364 s for its float32 predecessor.

bf16. This machine's processor has bf16 matrix units (Intel AMX): a 2,048^3 bf16 matmul runs at 667 GFLOP/s
on two threads against 147 for float32, 4.5x. The training step gains far less, because the rest of the step
does not shrink: at the shipped shape (two threads, 10 steps, keep_freed_memory, 6 % steal) ours ran 3,100
tok/s with --bf16 against 1,951 in float32 in a separate process just before (1.59x); against the bf16 matmul's own
597 GFLOP/s that is an efficiency of 0.14. In whole runs: configs/multi30k-fast.toml (modern block, bf16) took
1,673 s for 1,380 steps, 1.21 s a step with validation, against 2,569 s for 1,150 steps, 2.23 s, for the same
block in float32 (measured under 30-50 % steal: not a clean ratio).
Without such units bf16 is a trap: with oneDNN limited to AVX-512 without bf16 (ONEDNN_MAX_CPU_ISA=AVX512_CORE)
a (2048, 256) @ (256, 1024) product ran at 13.9 GFLOP/s in bf16 against 56.5 in float32 on one thread, and
limited to AVX2 at 0.7 against 49.6 (measured while a training run shared the machine: the ratios, not the
rates, are the finding). `train` therefore refuses precision = "bf16" on a CPU that torch reports without
AVX512-BF16 or AMX (appendix 95).

`--dropout rand` (masks from rand_like >= p instead of bernoulli_), same evening: ours 2,013 tok/s against 1,951
for torch's dropout (float32, keep_freed_memory, separate processes; efficiency 0.402 against 0.369): a few per cent, less than the
profile's 15 % for bernoulli_ suggested, since the replacement also draws one random number per element.

`--compile --bf16` (torch.compile, inductor, with bf16 autocast), 2026-12-02 01:45, two threads, 10 steps, shipped
shape: ours 2,675 tok/s with glibc's default allocator and 2,762 with keep_freed_memory (efficiency 0.118 and
0.153), against 2,888 and 3,614 (0.133 and 0.196) for eager bf16 in the next process a minute later. Compiling is
slower than eager in bf16 too (0.93x and 0.76x), as it was in float32: the 55 % target is not reached by any
setting measured here (the best, eager bf16 with keep_freed_memory, is 0.20 of the bf16 matmul's rate; eager
float32 reaches 0.37-0.40 of the float32 matmul's, a lower rate in absolute terms).
"""
import argparse
import resource
import statistics
import time
from contextlib import nullcontext

import torch
from torch import Tensor, nn

from transformer.embedding import PositionalEncoding, TokenEmbedding
from transformer.model import Transformer, TransformerConfig
from transformer.loss import label_smoothed_loss
from transformer.train import keep_freed_memory

# name: (D, h, N layers each side, D_ff, batch size B, source length S, target length T, vocabulary)
SIZES = {
    "tiny": (64, 4, 2, 256, 32, 20, 20, 1000),
    "shipped": (256, 4, 3, 1024, 128, 16, 16, 8000),  # models/multi30k-de-en's shape, a 2,048-token batch a side
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
        self.core = nn.Transformer(c.d_model, c.num_heads, c.num_encoder_layers, c.num_decoder_layers, c.d_ff,
                                   c.dropout, batch_first=True, norm_first=c.norm_first)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.generator.weight = self.tgt_embed.embedding.weight

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)  # True = blocked (torch's convention)
        src_pad, tgt_pad = src == self.pad_id, tgt == self.pad_id  # (B, S), (B, T)
        h = self.core(self.positional(self.src_embed(src)), self.positional(self.tgt_embed(tgt)), tgt_mask=causal,
                      src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
                      tgt_is_causal=True)  # (B, T, D)
        return self.generator(h)  # (B, T, V)


def make_batch(B: int, S: int, T: int, V: int, device, generator) -> tuple[Tensor, Tensor, Tensor]:
    """Random ids with ragged lengths (padding at the end), as a length-bucketed batch looks."""
    src = torch.randint(4, V, (B, S), generator=generator)
    tgt = torch.randint(4, V, (B, T + 1), generator=generator)
    src_len = torch.randint(S * 3 // 4, S + 1, (B,), generator=generator)
    tgt_len = torch.randint(T * 3 // 4, T + 2, (B,), generator=generator)
    src[torch.arange(S) >= src_len[:, None]] = 0
    tgt[torch.arange(T + 1) >= tgt_len[:, None]] = 0
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def step(model: nn.Module, optimizer, batch, autocast) -> None:
    src, tgt_in, tgt_out = batch
    with autocast:
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
    decoder = N * (8 * B * T * D * D + 4 * B * T * T * D + 4 * B * T * D * D + 4 * B * S * D * D
                   + 4 * B * T * S * D + 4 * B * T * D * F)
    return 3 * (encoder + decoder + 2 * B * T * D * V)


def rand_dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Dropout with its mask from `torch.rand_like(input) >= p` instead of `bernoulli_` (what `--dropout rand`
    measures: how much of the step a cheaper mask would save; training uses torch's dropout)."""
    if not training or p == 0.0:
        return input
    return input * (torch.rand_like(input) >= p) * (1.0 / (1.0 - p))


def matmul_flops_per_s(device: torch.device, n: int = 2048, repeats: int = 7,
                       dtype: torch.dtype = torch.float32) -> float:
    """The rate of one large matrix product (n x n @ n x n, in `dtype`) in this process: the practical peak."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for _ in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times[1:])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(size: str, device: torch.device, steps: int, warmup: int, bf16: bool,
          compile_: bool, adam: str = "default") -> tuple[float, float, float]:
    """(ours, torch) in tokens per second, ours in seconds per step (medians), the operating system's share of
    the CPU time and the page faults per step over the timed steps."""
    D, h, N, F, B, S, T, V = SIZES[size]
    c = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=D, num_heads=h, num_encoder_layers=N,
                          num_decoder_layers=N, d_ff=F, dropout=0.1, max_len=max(S, T) + 2)
    torch.manual_seed(0)
    models = {"ours": Transformer(c).to(device), "torch": TorchReference(c).to(device)}
    kind = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[adam]
    optims = {k: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **kind)
              for k, m in models.items()}
    runners = {k: (torch.compile(m, dynamic=False) if compile_ else m) for k, m in models.items()}
    g = torch.Generator().manual_seed(0)
    batch = make_batch(B, S, T, V, device, g)
    tokens = int((batch[0] != 0).sum() + (batch[2] != 0).sum())  # source + target tokens of the step
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    times = {k: [] for k in models}
    usage = None
    for i in range(warmup + steps):
        if i == warmup:
            usage = resource.getrusage(resource.RUSAGE_SELF)
        for k in (("ours", "torch") if i % 2 == 0 else ("torch", "ours")):
            sync(device)
            t0 = time.perf_counter()
            step(runners[k], optims[k], batch, autocast)
            sync(device)
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    system, user = after.ru_stime - usage.ru_stime, after.ru_utime - usage.ru_utime
    in_os = system / max(system + user, 1e-9)  # the share of CPU time the operating system spent for the process
    faults = (after.ru_minflt - usage.ru_minflt) / (2 * steps)  # page faults per step (both models)
    ours = statistics.median(times["ours"])
    return tokens / ours, tokens / statistics.median(times["torch"]), ours, in_os, faults


def padding_report(max_tokens: int) -> str:
    """The share of pad tokens in one epoch of Multi30k batches, packed as the shipped recipe packs them.

    The sampler sorts by max(S_i, T_i + 1) and fills a batch up to `max_tokens` of that size; source and
    target are then each padded to their own longest row. Counted on the shipped model's tokenizer.
    """
    from transformer.checkpoints import models_dir
    from transformer.corpora import load_multi30k
    from transformer.data import TokenBudgetBatchSampler, TranslationDataset
    from transformer.tokenizer import Tokenizer

    tok = Tokenizer.load(models_dir() / "multi30k-de-en" / "tokenizer.model")
    data = TranslationDataset(load_multi30k("train"), tok, tok, max_len=64)
    real = {"src": 0, "tgt": 0}
    cells = {"src": 0, "tgt": 0}
    per_batch = []
    for batch in TokenBudgetBatchSampler(data.lengths, max_tokens, seed=0):
        src = [len(data.src_ids[i]) for i in batch]
        tgt = [len(data.tgt_ids[i]) + 1 for i in batch]  # bos + target (input) or target + eos (output)
        real["src"], real["tgt"] = real["src"] + sum(src), real["tgt"] + sum(tgt)
        cells["src"], cells["tgt"] = cells["src"] + len(batch) * max(src), cells["tgt"] + len(batch) * max(tgt)
        per_batch.append(1 - (sum(src) + sum(tgt)) / (len(batch) * (max(src) + max(tgt))))
    share = {k: 1 - real[k] / cells[k] for k in real}
    return (f"padding at max_tokens={max_tokens}: {len(per_batch)} batches; pad share of the source cells "
            f"{share['src']:.1%}, of the target cells {share['tgt']:.1%}; per batch median "
            f"{statistics.median(per_batch):.1%}, worst {max(per_batch):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", default=None, choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model (default: 20 CPU, 50 GPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (as training does on CUDA)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--adam", default="default", choices=["default", "foreach", "fused"],
                        help="torch.optim.Adam's implementation: its default (a loop over tensors on the CPU), "
                             "foreach (one kernel per operation over all tensors) or fused (one kernel)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--dropout", default="torch", choices=["torch", "rand"],
                        help="torch: torch's dropout (bernoulli_ masks), as training runs; rand: masks from "
                             "rand_like >= p (what a cheaper mask would save)")
    parser.add_argument("--padding", type=int, nargs="*", metavar="MAX_TOKENS",
                        help="only report the pad share of Multi30k batches at these token budgets (default 2048)")
    args = parser.parse_args()
    if args.padding is not None:
        for max_tokens in args.padding or [2048]:
            print(padding_report(max_tokens))
        return
    device = torch.device(args.device)
    if args.dropout == "rand":
        nn.functional.dropout = rand_dropout  # read at call time by nn.Dropout and by our attention
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = device.type == "cuda"
    sizes = args.sizes or (["medium", "base", "big-batch"] if gpu else ["small", "medium"])
    steps = args.steps or (50 if gpu else 20)
    print(f"device={device} bf16={args.bf16} compile={args.compile} adam={args.adam} dropout={args.dropout} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} steps={steps}")
    ratios = []
    # On a CPU each size runs twice in this process: first with glibc's default allocator, then as `train` runs
    # (keep_freed_memory, which cannot be undone within a process); the second run's figures are the headline.
    allocators = ["glibc default", "keep_freed_memory"] if device.type == "cpu" else ["default"]
    peak_dtype = torch.bfloat16 if args.bf16 else torch.float32  # the step's matmuls run in this type
    for size in sizes:
        D, h, N, F, B, S, T, V = SIZES[size]
        before = None
        for allocator in allocators:
            if allocator == "keep_freed_memory" and not keep_freed_memory():
                print(f"{'':>9} (no glibc here: keep_freed_memory does nothing)")
                break
            peak = matmul_flops_per_s(device, dtype=peak_dtype)
            ours, ref, seconds, in_os, faults = bench(size, device, steps, args.warmup, args.bf16, args.compile,
                                                      args.adam)
            peak = (peak + matmul_flops_per_s(device, dtype=peak_dtype)) / 2  # the machine's state during the run
            rate = step_flops(D, N, F, B, S, T, V) / seconds
            print(f"{size:>9} (D={D}, h={h}, N={N}, D_ff={F}, B={B}, S={S}, T={T}, V={V}), allocator {allocator}: "
                  f"ours {ours:,.0f} tok/s, torch {ref:,.0f} tok/s, ratio = {ours / ref:.3f}")
            print(f"{'':>9} model FLOP/s of our step {rate / 1e9:,.1f} G = {rate / peak:.0%} of a large "
                  f"{str(peak_dtype).removeprefix('torch.')} matmul's {peak / 1e9:,.1f} G in this process "
                  f"(efficiency = {rate / peak:.3f})")
            print(f"{'':>9} CPU time in the operating system {in_os:.1%}, {faults:,.0f} page faults per step")
            if before is not None:
                print(f"{'':>9} keep_freed_memory: our step {before / seconds:.3f}x as fast as with the default")
            before = seconds
        ratios.append(ours / ref)
    print(f"min ratio = {min(ratios):.3f}")


if __name__ == "__main__":
    main()
