"""Tokens per second of one training step: our Transformer versus torch.nn.Transformer.

    python bench/train_step.py                  # CPU (or the default device), two model sizes
    python bench/train_step.py --device cuda --sizes small base

Both models get the same token embedding, positional encoding, tied generator, loss (label-smoothed,
over non-padding tokens), optimiser (Adam) and batch, so the ratio measures the encoder/decoder stacks:
ours (transformer.Encoder/Decoder over our MultiHeadAttention) against torch's nn.Transformer. One
step = forward, loss, backward, gradient clipping, Adam step. The two models alternate step by step
in one process, so a machine that slows down (shared CPUs, clocks) slows both alike; the figure is
the median over the timed steps. Prints one line per size and `ratio = ours / torch` (higher is better).
"""
import argparse
import statistics
import time
from contextlib import nullcontext

import torch
from torch import Tensor, nn

from transformer.embedding import PositionalEncoding, TokenEmbedding
from transformer.model import Transformer, TransformerConfig
from transformer.loss import label_smoothed_loss

# name: (D, h, N layers each side, D_ff, batch size B, source length S, target length T, vocabulary)
SIZES = {
    "tiny": (64, 4, 2, 256, 32, 20, 20, 1000),
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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(size: str, device: torch.device, steps: int, warmup: int, bf16: bool, compile_: bool) -> tuple[float, float]:
    D, h, N, F, B, S, T, V = SIZES[size]
    c = TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=D, num_heads=h, num_encoder_layers=N,
                          num_decoder_layers=N, d_ff=F, dropout=0.1, max_len=max(S, T) + 2)
    torch.manual_seed(0)
    models = {"ours": Transformer(c).to(device), "torch": TorchReference(c).to(device)}
    optims = {k: torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9) for k, m in models.items()}
    runners = {k: (torch.compile(m, dynamic=False) if compile_ else m) for k, m in models.items()}
    g = torch.Generator().manual_seed(0)
    batch = make_batch(B, S, T, V, device, g)
    tokens = int((batch[0] != 0).sum() + (batch[2] != 0).sum())  # source + target tokens of the step
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    times = {k: [] for k in models}
    for i in range(warmup + steps):
        for k in (("ours", "torch") if i % 2 == 0 else ("torch", "ours")):
            sync(device)
            t0 = time.perf_counter()
            step(runners[k], optims[k], batch, autocast)
            sync(device)
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    return tokens / statistics.median(times["ours"]), tokens / statistics.median(times["torch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="+", default=None, choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=None, help="timed steps per model (default: 20 CPU, 50 GPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (as training does on CUDA)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = device.type == "cuda"
    sizes = args.sizes or (["medium", "base", "big-batch"] if gpu else ["small", "medium"])
    steps = args.steps or (50 if gpu else 20)
    print(f"device={device} bf16={args.bf16} compile={args.compile} threads={torch.get_num_threads()} "
          f"torch={torch.__version__} steps={steps}")
    ratios = []
    for size in sizes:
        D, h, N, F, B, S, T, V = SIZES[size]
        ours, ref = bench(size, device, steps, args.warmup, args.bf16, args.compile)
        ratios.append(ours / ref)
        print(f"{size:>9} (D={D}, h={h}, N={N}, D_ff={F}, B={B}, S={S}, T={T}, V={V}): "
              f"ours {ours:,.0f} tok/s, torch {ref:,.0f} tok/s, ratio = {ours / ref:.3f}")
    print(f"min ratio = {min(ratios):.3f}")


if __name__ == "__main__":
    main()
