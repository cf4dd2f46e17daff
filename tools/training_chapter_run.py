"""Chapter 10's real training run: Multi30k de→en, three epochs of a small Transformer on one CPU thread.

    OMP_NUM_THREADS=1 python tools/training_chapter_run.py      # about 4 minutes on one CPU thread

Too long for a page that the tests re-run, so this tool runs it once, with exactly the chapter's
settings (seed, configuration, data), and writes `notebooks/results/10_training_run.json`:
the configuration, the per-epoch history, every step of `metrics.csv` (loss, NLL, learning rate,
gradient norm, one list per column), the model's parameter count, and the greedy translations of the first 100
validation sentences (the chapter's plain `greedy` loop, repeated below). Chapter 10 reads the file,
checks that its configuration is the one the page shows, plots it and asserts what its prose claims.
"""

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from transformer.engine.corpora import load_multi30k
from transformer.masking import causal_mask, padding_mask
from transformer.model import Transformer
from transformer.errors import InputError
from transformer.files import atomic_write_bytes, result_file
from transformer.tokenizer import BOS_ID, EOS_ID
from transformer.engine.loading import load_checkpoint
from transformer.engine.config import DataConfig, OptimConfig, TrainConfig
from transformer.engine.metrics import read_metrics
from transformer.engine.trainer import train
from transformer.engine.machine import cpu_name
from transformer.engine.command_input import run_tool

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "10_training_run.json"
TRANSLATED = 100  # the first validation sentences the chapter shows and checks


def chapter_config(out_dir: str) -> TrainConfig:
    """The run of chapter 10, section "A real training run" (the page shows the same lines)."""
    return TrainConfig(
        name="chapter-10",
        out_dir=out_dir,
        seed=0,
        device="cpu",
        progress=False,
        tensorboard=False,
        data=DataConfig(
            corpus="multi30k",
            src_lang="de",
            tgt_lang="en",
            max_len=24,
            vocab_size=2000,
            shared_vocab=True,
            max_valid_pairs=300,
        ),
        model=dict(
            d_model=128,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            d_ff=512,
            dropout=0.0,
            norm_first=True,
            share_embeddings=True,
            max_len=64,
        ),
        optim=OptimConfig(
            epochs=3,
            max_tokens=1536,
            warmup_steps=200,
            lr_factor=1.0,
            label_smoothing=0.1,
            clip_grad_norm=1.0,
        ),
    )


@torch.no_grad()
def greedy(model: Transformer, src_tok, sentence: str, max_len: int = 40) -> list[int]:
    """Chapter 10's `greedy`, unchanged: the most probable next token, from <s> until </s>."""
    model.eval()
    src = torch.tensor([src_tok.encode(sentence)])  # (1, S)
    src_mask = padding_mask(src, model.config.pad_id)  # (1, 1, 1, S)
    memory = model.encode(src, src_mask)  # (1, S, D)
    ys = [BOS_ID]
    for _ in range(max_len):
        h = model.decode(
            torch.tensor([ys]), memory, src_mask, causal_mask(len(ys))
        )  # (1, t, D)
        ys.append(
            int(model.generator(h[:, -1]).argmax(-1))
        )  # the most probable next token
        if ys[-1] == EOS_ID:
            break
    return ys[1:]


def rounded(value, digits: int = 6):
    """Floats to `digits` significant digits (as metrics.csv stores them), recursively."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    try:  # before the training: a file of the user's is never overwritten
        args.out = result_file(args.out)
    except InputError as e:
        parser.error(str(e))
    torch.set_num_threads(
        1
    )  # as the chapter: one thread, floats summed in one order on this machine
    torch.manual_seed(
        0
    )  # the chapter seeds before its first cell; train() seeds again from config.seed
    with tempfile.TemporaryDirectory(prefix="training-chapter-") as workdir:
        config = chapter_config(str(Path(workdir) / "multi30k-run"))
        start = time.perf_counter()
        result = train(config)
        train_seconds = time.perf_counter() - start
        rows = read_metrics(config.out_dir)
        step_rows = [r for r in rows if r["kind"] == "step"]
        steps = {
            k: [r[k] for r in step_rows]
            for k in ("step", "epoch", "loss", "nll", "lr", "grad_norm", "tokens")
        }
        epochs = [
            {k: v for k, v in r.items() if k not in ("kind", "tokens_per_s")}
            for r in rows
            if r["kind"] == "epoch"
        ]

        start = time.perf_counter()
        ckpt = load_checkpoint(config.out_dir)
        val_pairs = load_multi30k("val")[:TRANSLATED]
        translations = [
            ckpt.tgt_tokenizer.decode(greedy(ckpt.model, ckpt.src_tokenizer, de))
            for de, _ in val_pairs
        ]
        translate_seconds = time.perf_counter() - start
        config_dict = json.loads(config.to_json())
        del config_dict["out_dir"]  # a temporary folder

        report = {
            "what": "chapter 10's training run (tools/training_chapter_run.py)",
            "machine": {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "python": platform.python_version(),
                "cpu": cpu_name(),
            },
            "config": config_dict,
            "seconds": {
                "train": round(train_seconds),
                "translate": round(translate_seconds),
            },
            "parameters": sum(p.numel() for p in ckpt.model.parameters()),
            "final_step": result.step,
            "checkpoint": result.checkpoint.name,
            "history": rounded(result.history),
            "epochs": rounded(epochs),
            "steps": rounded(steps),
            "translations": [
                {"source": de, "reference": en, "model": out}
                for (de, en), out in zip(val_pairs, translations)
            ],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        args.out,
        (json.dumps(report, indent=1, ensure_ascii=False) + "\n").encode("utf-8"),
    )
    print(
        f"trained in {train_seconds:.0f} s, translated in {translate_seconds:.0f} s; wrote {args.out}"
    )


if __name__ == "__main__":
    run_tool(main)
