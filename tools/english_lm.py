"""Chapter 18's English language model: the decoder-only model of the course, trained to continue the English
sentences of Multi30k, for the chapter's section on sampling.

    python tools/english_lm.py          # writes notebooks/results/18_english_lm/ (about 2 min on one thread)

A language model asked to continue a prompt is the decoder-only translator with one language: each training
sentence is cut after its first k words (k = 1, 2 or 3, drawn with a fixed seed; never the whole sentence),
the first part is the "source" and the rest the target, so that the model learns to continue any beginning of
one to three words. The causal source mask makes it a plain left-to-right model of the whole sentence, with
BOS marking where the prompt ends.

The data: the English side of Multi30k's training split, a sentencepiece vocabulary of VOCAB pieces learned on
it; the model: D = 128, 2 blocks, 4 heads, d_ff = 512, pre-norm, dropout 0.1; training: EPOCHS epochs with
batches of at most 2,048 tokens, Adam with the linear schedule (WARMUP steps of warm-up), no label smoothing
(the chapter shows the model's own probabilities), seed 0, one thread. Written: the model's folder
(model.safetensors and model_config.json, as every checkpoint of the course), tokenizer.model, and
training.json with the validation split's negative log-likelihood per target token.
"""

import json
import random
import tempfile
import time
from pathlib import Path

from transformer.engine.command_input import run_tool
from transformer.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "results" / "18_english_lm"
VOCAB, EPOCHS, WARMUP, MAX_TOKENS = 1000, 3, 200, 2048
SHAPE = dict(
    d_model=128, num_heads=4, num_decoder_layers=2, d_ff=512, dropout=0.1, max_len=48
)


def continuation_pairs(sentences: list[str], seed: int) -> list[tuple[str, str]]:
    """Each sentence of two or more words as (its first k words, the rest), k = 1..3."""
    rng = random.Random(seed)
    pairs = []
    for s in sentences:
        words = s.split()
        if len(words) >= 2:
            k = min(rng.choice((1, 2, 3)), len(words) - 1)
            pairs.append((" ".join(words[:k]), " ".join(words[k:])))
    return pairs


def main() -> None:
    import torch

    from transformer.engine.model_files import save_model_files
    from transformer.engine.digests import write_digests
    from transformer.engine.corpora import load_multi30k
    from transformer.data import TokenBudgetBatchSampler, TranslationDataset, collate
    from transformer.engine.model_config import ModelConfig, build_model
    from transformer.files import atomic_folder
    from transformer.schedule import LinearDecaySchedule
    from transformer.tokenizer import train_tokenizer
    from transformer.engine.trainer import train_step, validation_metrics

    torch.set_num_threads(1)
    torch.manual_seed(0)
    written = ("model.safetensors", "model_config.json", "tokenizer.model")
    written += ("SHA256SUMS", "training.json")
    others = (
        sorted(p.name for p in OUT.iterdir() if p.name not in written)
        if OUT.is_dir()
        else []
    )
    if others or (OUT.exists() and not OUT.is_dir()):  # replaced whole, after the work
        raise InputError(
            f"{OUT} holds what this tool does not write ({', '.join(others[:3]) or 'it is a file'}): "
            "move it away first; the tool replaces the folder whole"
        )
    start = time.time()
    english = [en for _, en in load_multi30k("train")]
    with tempfile.TemporaryDirectory() as work:
        tok = train_tokenizer(english, Path(work) / "en", VOCAB)
    train_set = TranslationDataset(continuation_pairs(english, 0), tok, tok, max_len=40)
    valid = [en for _, en in load_multi30k("val")]
    valid_set = TranslationDataset(continuation_pairs(valid, 1), tok, tok, max_len=40)
    config = ModelConfig(
        tok.vocab_size,
        tok.vocab_size,
        num_encoder_layers=0,
        norm_first=True,
        share_embeddings=True,
        pad_id=tok.pad_id,
        **SHAPE,
    )
    model = build_model(config)
    sampler = TokenBudgetBatchSampler(train_set.lengths, MAX_TOKENS, seed=0)
    total = EPOCHS * len(sampler)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, LinearDecaySchedule(config.d_model, WARMUP, total)
    )
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for indices in sampler:
            batch = collate([train_set[i] for i in indices])
            stats = train_step(
                model,
                batch,
                optimizer,
                schedule,
                num_tokens=int((batch.tgt_out != tok.pad_id).sum()),
                label_smoothing=0.0,
                pad_id=tok.pad_id,
                clip_grad_norm=1.0,
            )
        print(f"epoch {epoch + 1}: last step's NLL {stats.nll:.3f}", flush=True)
    valid_batches = [
        collate([valid_set[i] for i in b])
        for b in TokenBudgetBatchSampler(valid_set.lengths, MAX_TOKENS, shuffle=False)
    ]
    metrics = validation_metrics(
        model, valid_batches, label_smoothing=0.0, pad_id=tok.pad_id
    )
    print(f"validation NLL per target token {metrics['nll']:.3f}")
    with atomic_folder(OUT, replace=True) as folder:
        save_model_files(model, folder)
        tok.save(folder / "tokenizer.model")
        write_digests(folder)  # the weights and the tokenizer beside them
        info = {
            "what": __doc__.split("\n\n")[0],
            "steps": total,
            "epochs": EPOCHS,
            "train_pairs": len(train_set),
            "valid_nll_per_token": round(metrics["nll"], 4),
            "seconds": round(time.time() - start),
        }
        (folder / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    import argparse

    # no options: the arguments are read only so that --help describes the run (which
    # trains for minutes and replaces the shipped results) instead of starting it
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    run_tool(main)
