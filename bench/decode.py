"""What the key/value cache buys, and how fast beam search translates a test set.

    python bench/decode.py                      # CPU: cache ratios, then beam-4 over test_2016_flickr
    python bench/decode.py --device cuda
    python bench/decode.py --model runs/multi30k-small   # another checkpoint for the throughput part

1. Greedy decoding with the cache against full recomputation of the prefix, on a model of the
   `multi30k-small` configuration with random weights (a random model rarely says EOS, so each
   sentence runs to the length limit: the output length is exactly the one asked for). Both run on
   the same batch, alternating, in one process; each figure is the median over the repeats. Prints
   ms per sentence and the ratio `recompute / cache` at output lengths 16, 32 and 64.
2. How the cache grows: greedy decoding of 512 steps, batch 32, one thread, with the cache that
   writes each step's keys and values in place (`KVCache`, room doubled when full) against the cache
   as it was before, which grew by `torch.cat` and so copied all it held at every step (kept here as
   `CatCache`, the reference). The same model and batch, alternating, in one process; prints tokens
   per second of each and the ratio `in place / cat` (the target was at least 1.2x).
3. Beam search (k = 4, length penalty 0.6, batches of 64 sentences sorted by length, the cache on)
   over the 1,000 sentences of Multi30k test_2016_flickr, as `transformer translate` runs it. With the
   shipped German->English model when it is present (trained outputs, stopping at EOS); otherwise
   random weights of the same configuration with outputs capped at source length + 10 tokens, and it
   says which. Prints sentences per second and the total time.
"""

import argparse
import statistics
import time
from pathlib import Path

import torch

from transformer.engine.corpora import load_multi30k
from transformer.engine.shipped import load_translator, models_dir
from transformer.decoding import greedy_decode
from transformer.translation import translate
from transformer.model import Transformer, TransformerConfig
from transformer.cache import KVCache

from transformer.engine.command_input import at_least, run_tool

from timing import device_argument, sync_for, timed  # bench/timing.py, beside it

SMALL = dict(
    d_model=256,
    num_heads=4,
    num_encoder_layers=3,
    num_decoder_layers=3,
    d_ff=1024,
    dropout=0.0,
    norm_first=True,
    max_len=128,
    share_embeddings=True,
)  # configs/multi30k-small.toml's [model]


def cache_ratios(device: torch.device, repeats: int, sync) -> None:
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(8000, 8000, **SMALL)).to(device).eval()
    src = torch.randint(
        4, 8000, (32, 16), generator=torch.Generator().manual_seed(0)
    ).to(device)  # (32, S = 16)
    print(
        f"greedy decoding, batch of {len(src)}, source length 16, {sum(p.numel() for p in model.parameters()):,} "
        f"parameters (multi30k-small, random weights), median of {repeats}"
    )
    print(
        f"{'output length':>14} {'recompute ms/sent':>18} {'cache ms/sent':>14} {'recompute / cache':>18}"
    )
    for T in (16, 32, 64):
        runs = {True: [], False: []}
        for _ in range(repeats):
            for use_cache in (True, False):
                runs[use_cache].append(
                    timed(
                        lambda: greedy_decode(
                            model, src, max_len_a=0.0, max_len_b=T, use_cache=use_cache
                        ),
                        sync,
                    )
                )
        full, cached = (
            statistics.median(runs[c]) / len(src) * 1000 for c in (False, True)
        )
        print(f"{T:>14} {full:>18.2f} {cached:>14.2f} {full / cached:>17.2f}x")


class CatCache(KVCache):
    """The reference: the cache before it filled in place. Each update concatenates,
    copying the L cached positions to append S new ones."""

    def update(self, block, K, V, fixed=False):
        if block in self.entries and not fixed:
            K, V = (
                torch.cat([old, new], dim=2)
                for old, new in zip(self.entries[block], (K, V))
            )
        self.entries[block] = (K, V)
        if fixed:
            self.fixed.add(block)
        return K, V

    def select(self, rows, same_sources=False):
        for block, (K, V) in self.entries.items():
            if not (same_sources and block in self.fixed):
                self.entries[block] = (K[rows], V[rows])


def cache_growth(device: torch.device, repeats: int, sync, steps: int = 512) -> None:
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(8000, 8000, **{**SMALL, "max_len": steps + 1})
    )
    model = model.to(device).eval()
    src = torch.randint(
        4, 8000, (32, 16), generator=torch.Generator().manual_seed(0)
    ).to(device)  # (32, S = 16)
    tokens = {}
    runs = {KVCache: [], CatCache: []}
    for _ in range(repeats):
        for cache in runs:
            model.new_cache = lambda memory, cache=cache: cache()
            out = []
            runs[cache].append(
                timed(
                    lambda: out.extend(
                        greedy_decode(model, src, max_len_a=0.0, max_len_b=steps)
                    ),
                    sync,
                )
            )
            tokens[cache] = [h.tokens for h in out]
    del model.new_cache
    assert tokens[KVCache] == tokens[CatCache], "the two caches decoded differently"
    generated = sum(len(t) + 1 for t in tokens[KVCache])  # + the EOS, where reached
    rate = {c: generated / statistics.median(r) for c, r in runs.items()}
    print(
        f"greedy decoding, {steps} steps, batch {len(src)}, "
        f"{torch.get_num_threads()} thread(s), median of {repeats}:"
    )
    print(
        f"  in place {rate[KVCache]:,.0f} tokens/s, torch.cat {rate[CatCache]:,.0f} tokens/s, "
        f"in place / cat {rate[KVCache] / rate[CatCache]:.2f}x (target: >= 1.2x)"
    )
    torch.set_num_threads(threads)


def throughput_model(device: torch.device, model_path: str | None):
    """(checkpoint, decoding limits, what it is) for the throughput part, loaded before
    any measurement: a --model that is none was refused only after the other parts
    (a typo was measured as random weights)."""
    path = models_dir() / "multi30k-de-en"
    if model_path or path.exists():
        ckpt = load_translator(model_path or path, device)
        return ckpt, {}, f"trained model {model_path or path}"
    from types import SimpleNamespace
    from transformer.tokenizer import train_tokenizer
    import tempfile

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tok_dir:
        train = load_multi30k("train")
        texts = [s for p in train for s in p]
        tok = train_tokenizer(texts, Path(tok_dir) / "tok", 8000)
    ckpt = SimpleNamespace(
        model=Transformer(TransformerConfig(tok.vocab_size, tok.vocab_size, **SMALL))
        .to(device)
        .eval(),
        src_tokenizer=tok,
        tgt_tokenizer=tok,
    )
    limits = dict(max_len_a=1.0, max_len_b=10)
    what = "random weights (no trained model found), outputs capped at S + 10"
    return ckpt, limits, what


def beam_throughput(ckpt, limits: dict, what: str) -> None:
    sources = [s for s, _ in load_multi30k("test_2016_flickr")]
    start = time.perf_counter()
    out = translate(ckpt, sources, beam_size=4, alpha=0.6, batch_size=64, **limits)
    seconds = time.perf_counter() - start
    words = sum(len(o.split()) for o in out)
    print(
        f"beam search k = 4 over test_2016_flickr ({len(sources)} sentences, batches of 64), {what}:"
    )
    print(
        f"  {seconds:.1f} s in all, {len(sources) / seconds:.1f} sentences/s, {words / seconds:.0f} output words/s "
        f"(torch threads: {torch.get_num_threads()})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", type=device_argument)
    parser.add_argument("--repeats", type=at_least(1), default=5)
    parser.add_argument(
        "--model",
        help="checkpoint for the throughput part (default: the shipped multi30k-de-en)",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument(
        "--only-growth", action="store_true", help="only part 2: the cache's growth"
    )
    args = parser.parse_args()
    if args.model and (args.skip_throughput or args.only_growth):
        parser.error("--model is for the throughput part, which this run skips")
    device = torch.device(args.device)
    sync = sync_for(device)
    skip = args.skip_throughput or args.only_growth
    model = None if skip else throughput_model(device, args.model)
    with torch.inference_mode():
        if args.only_growth:
            cache_growth(device, args.repeats, sync)
            return 0
        cache_ratios(device, args.repeats, sync)
        cache_growth(device, args.repeats, sync)
        if model is not None:
            beam_throughput(*model)
    return 0


if __name__ == "__main__":
    run_tool(main)
