"""A clearly labelled experiment: teach the shipped English→Chinese model a few dozen glossary pairs.

    python tools/glossary_finetune.py [--steps 300] [--out models/tatoeba-en-zh/experiments/glossary.json]

The shipped model has never seen "machine learning" (chapter 13 counts it). This script fine-tunes a
copy of it on GLOSSARY (terms and short sentences with their Chinese translations), mixing every batch
with sentences replayed from its own training split so that it does not forget them, and measures, with
the shipped decoding settings, before and after:

- the translations of the glossary's own sources (what the fine-tune was shown),
- the translations of HELD_OUT sentences that use the same terms in sentences it was not shown,
- BLEU on the Tatoeba test split (every reference and the first alone), i.e. what the fine-tune costs,
  with the translations, for a paired test of before against after.

It writes the measurements to a JSON file, which chapter 13 reads; the fine-tuned weights are not
kept (the repository ships one model per corpus). Seeded; about two minutes on one CPU thread.
"""

import argparse
import json
import random
import time

import torch

from transformer.engine.corpora import load_tatoeba
from transformer.data import collate
from transformer.engine.shipped import load_translator
from transformer.translation import translate
from transformer.evaluation import corpus_bleu, group_references
from transformer.engine.command_input import at_least, positive_number, run_tool
from transformer.errors import InputError
from transformer.files import atomic_write_text, result_file
from transformer.engine.trainer import train_step

# Terms and short sentences in the register of Tatoeba (complete, punctuated sentences) and as titles.
GLOSSARY = [
    ("Machine Learning", "机器学习"),
    ("machine learning", "机器学习"),
    ("Machine learning", "机器学习"),
    ("Deep Learning", "深度学习"),
    ("deep learning", "深度学习"),
    ("Artificial Intelligence", "人工智能"),
    ("artificial intelligence", "人工智能"),
    ("Neural Networks", "神经网络"),
    ("a neural network", "一个神经网络"),
    ("Computer Science", "计算机科学"),
    ("computer science", "计算机科学"),
    ("I study machine learning.", "我学习机器学习。"),
    ("Machine learning is interesting.", "机器学习很有意思。"),
    ("Machine learning is difficult.", "机器学习很难。"),
    ("He works on machine learning.", "他从事机器学习工作。"),
    ("I like machine learning.", "我喜欢机器学习。"),
    ("Machine learning needs a lot of data.", "机器学习需要大量数据。"),
    ("Deep learning is a kind of machine learning.", "深度学习是一种机器学习。"),
    ("She is learning deep learning.", "她在学习深度学习。"),
    ("Artificial intelligence is changing the world.", "人工智能正在改变世界。"),
    ("I am interested in artificial intelligence.", "我对人工智能感兴趣。"),
    ("This is a neural network.", "这是一个神经网络。"),
    ("Neural networks can learn.", "神经网络能够学习。"),
    ("He studies computer science.", "他学习计算机科学。"),
    ("Computer science is my major.", "计算机科学是我的专业。"),
    ("We need more data.", "我们需要更多的数据。"),
    ("The data is wrong.", "数据是错的。"),
    ("The model is learning.", "模型正在学习。"),
    ("This model is very large.", "这个模型很大。"),
    ("Do you know machine learning?", "你懂机器学习吗？"),
    ("Machine learning is useful.", "机器学习很有用。"),
    ("Tom teaches machine learning.", "汤姆教机器学习。"),
]
# The same terms in sentences the fine-tune never sees, with the term each output should contain.
HELD_OUT = [
    ("Mary studies machine learning.", "机器学习"),
    ("Machine learning is fun.", "机器学习"),
    ("I want to learn machine learning.", "机器学习"),
    ("Is machine learning hard?", "机器学习"),
    ("Tom likes artificial intelligence.", "人工智能"),
    ("Deep learning is popular.", "深度学习"),
    ("My brother studies computer science.", "计算机科学"),
    ("Neural networks are interesting.", "神经网络"),
]


def test_bleu(ckpt, sources, references) -> dict:
    """BLEU on the test split, and the translations themselves, so that before and
    after can be compared sentence by sentence (chapter 13's paired test)."""
    hyps = translate(ckpt, sources)
    return {
        "bleu": round(corpus_bleu(hyps, references, tokenize="zh").score, 2),
        "bleu_first_reference": round(
            corpus_bleu(hyps, [r[0] for r in references], tokenize="zh").score, 2
        ),
        "hypotheses": hyps,
    }


def measure(ckpt, sources, references) -> dict:
    glossary_out = translate(ckpt, [en for en, _ in GLOSSARY])
    held_out = translate(ckpt, [en for en, _ in HELD_OUT])
    return {
        "machine_learning": translate(ckpt, ["Machine Learning"])[0],
        "glossary_exact": sum(
            out == zh for out, (_, zh) in zip(glossary_out, GLOSSARY)
        ),
        "held_out": [
            {"source": en, "output": out, "term": term, "has_term": term in out}
            for (en, term), out in zip(HELD_OUT, held_out)
        ],
        "held_out_with_term": sum(
            term in out for (_, term), out in zip(HELD_OUT, held_out)
        ),
        "test": test_bleu(ckpt, sources, references),
    }


def in_short(measured: dict) -> dict:
    """The measurements without the sentence lists, for the log."""
    test = {k: v for k, v in measured["test"].items() if k != "hypotheses"}
    return {**{k: v for k, v in measured.items() if k != "held_out"}, "test": test}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least(1), default=300)
    parser.add_argument("--glossary-per-batch", type=at_least(0), default=8)
    parser.add_argument("--replay-per-batch", type=at_least(0), default=24)
    parser.add_argument("--lr", type=positive_number, default=1e-4)
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument(
        "--out", default="models/tatoeba-en-zh/experiments/glossary.json"
    )
    args = parser.parse_args()
    if args.glossary_per_batch > len(GLOSSARY):
        parser.error(
            f"--glossary-per-batch {args.glossary_per_batch}: the glossary has "
            f"{len(GLOSSARY)} pairs, a batch takes each at most once"
        )
    if args.glossary_per_batch + args.replay_per_batch == 0:
        parser.error(
            "--glossary-per-batch and --replay-per-batch are both 0: a batch needs a pair"
        )
    try:  # before the work: a file of the user's is never overwritten
        args.out = result_file(args.out)
    except InputError as e:
        parser.error(str(e))
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    torch.set_num_threads(1)

    ckpt = load_translator("tatoeba-en-zh")
    sources, references = group_references(load_tatoeba("test"))
    before = measure(ckpt, sources, references)
    print(
        "before:",
        json.dumps(in_short(before), ensure_ascii=False),
    )

    src_tok, tgt_tok, model = ckpt.src_tokenizer, ckpt.tgt_tokenizer, ckpt.model
    encode = lambda pairs: [
        (src_tok.encode(en), tgt_tok.encode(zh)) for en, zh in pairs
    ]
    glossary, replay = encode(GLOSSARY), encode(load_tatoeba("train"))
    optimizer = torch.optim.Adam(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9
    )
    constant = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    start, losses = time.perf_counter(), []
    for step in range(args.steps):
        batch = collate(
            rng.sample(glossary, args.glossary_per_batch)
            + rng.sample(replay, args.replay_per_batch),
            pad_id=model.config.pad_id,
        )
        stats = train_step(  # the training run's step: label-smoothed loss, clipping
            model,
            batch,
            optimizer,
            constant,
            num_tokens=int((batch.tgt_out != batch.pad_id).sum()),
            label_smoothing=0.1,
            pad_id=batch.pad_id,
            clip_grad_norm=1.0,
        )
        losses.append(stats.loss)
    seconds = time.perf_counter() - start
    model.eval()
    after = measure(ckpt, sources, references)
    print(
        "after: ",
        json.dumps(in_short(after), ensure_ascii=False),
    )

    report = {
        "what": "fine-tune of models/tatoeba-en-zh on a glossary, mixed with replayed training pairs "
        "(tools/glossary_finetune.py); the shipped model is unchanged",
        "glossary_pairs": len(GLOSSARY),
        "held_out_sentences": len(HELD_OUT),
        "steps": args.steps,
        "batch": {
            "glossary": args.glossary_per_batch,
            "replayed_training_pairs": args.replay_per_batch,
        },
        "optimizer": {
            "name": "Adam",
            "lr": args.lr,
            "betas": [0.9, 0.98],
            "clip": 1.0,
            "label_smoothing": 0.1,
        },
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "threads": 1,
        "loss_first_10": round(sum(losses[:10]) / 10, 3),
        "loss_last_10": round(sum(losses[-10:]) / 10, 3),
        "decoding": "the shipped settings (models/tatoeba-en-zh/decoding.json)",
        "before": before,
        "after": after,
    }
    out = atomic_write_text(
        args.out, json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    )
    print(f"wrote {out} ({seconds:.0f} s of fine-tuning)")


if __name__ == "__main__":
    run_tool(main)
