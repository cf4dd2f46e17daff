"""The paired tests the book uses are calibrated: under a true null they reject at most their level (plus
the binomial noise of a finite number of trials), and they still detect a real difference.

The null is built from real translations (chapter 12 explains it): two runs' translations of Multi30k
`val`, and per sentence a coin puts one run's translation in system A and the other's in system B, so
that A and B are equally good by construction."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer.engine.corpora import load_multi30k
from transformer.stats import (
    SeedPairs,
    bleu_of,
    bleu_statistics,
    paired_bleu_test,
    paired_bootstrap,
    permutation_p,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "notebooks" / "results" / "16_modern_block_runs"
LEVEL = 0.05
TRIALS = 800  # null trials per test
RESAMPLES = 250  # per trial: the p-value's steps (1/251) are far finer than the level


def binomial_bound(trials: int, level: float = LEVEL, confidence: float = 0.999) -> int:
    """The smallest k with P(X <= k) >= confidence for X ~ Binomial(trials, level): a
    calibrated test rejects more than k times in `trials` with probability < 0.1 %."""
    total, n = 0.0, trials
    for k in range(n + 1):  # the binomial probabilities, through their logarithms
        log_choose = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        total += math.exp(
            log_choose + k * math.log(level) + (n - k) * math.log(1 - level)
        )
        if total >= confidence:
            return k
    return trials


def read(run: str) -> list[str]:
    return (RUNS / run / "val.hyp").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def null_pairs():
    """TRIALS pairs (A, B) of statistics (N, 10) of two equally good systems."""
    references = [t for _, t in load_multi30k("val")]
    x = bleu_statistics(read("baseline-s0"), references)
    y = bleu_statistics(read("all-s0"), references)
    g = torch.Generator().manual_seed(2024)
    keep = torch.rand(TRIALS, len(x), 1, generator=g) < 0.5  # (TRIALS, N, 1)
    return [(torch.where(k, x, y), torch.where(k, y, x)) for k in keep]


def sacrebleu_rule_p(a: torch.Tensor, b: torch.Tensor, resamples: int) -> float:
    """sacreBLEU's paired-bootstrap p-value (`_paired_bs_test`), on its own draws: the
    sizes of the resampled gaps, minus their mean, against the size of the gap."""
    rng = np.random.default_rng(12345)
    draws = torch.from_numpy(rng.choice(len(a), size=(resamples, len(a))))
    times = torch.zeros(resamples, len(a), dtype=torch.float64)
    times.scatter_add_(1, draws, torch.ones_like(times))
    sizes = (bleu_of(times @ b) - bleu_of(times @ a)).abs()
    gap = abs((bleu_of(b.sum(0)) - bleu_of(a.sum(0))).item())
    return ((sizes - sizes.mean() > gap).sum().item() + 1) / (resamples + 1)


def centred_bootstrap_p(a, b):
    return paired_bootstrap(a, b, resamples=RESAMPLES).p_value


def rejections(test, pairs) -> int:
    return sum(test(a, b) < LEVEL for a, b in pairs)


def test_the_paired_bootstrap_rejects_a_true_null_at_most_at_its_level(null_pairs):
    bound = binomial_bound(TRIALS)
    count = rejections(centred_bootstrap_p, null_pairs)
    assert count <= bound, (
        f"paired_bootstrap rejected {count} of {TRIALS} null trials at p < {LEVEL}: "
        f"a calibrated test exceeds {bound} with probability < 0.1 %"
    )


def test_the_guard_catches_sacrebleus_paired_bootstrap(null_pairs):
    # the same check on sacreBLEU's rule must fail: the guard can tell the difference
    count = rejections(lambda a, b: sacrebleu_rule_p(a, b, RESAMPLES), null_pairs)
    assert count > binomial_bound(TRIALS), count


def test_the_rule_above_is_sacrebleus_own():
    references = [t for _, t in load_multi30k("val")][:300]
    a, b = read("baseline-s0")[:300], read("all-s0")[:300]
    _, scores = PairedTest(
        [("a", a), ("b", b)], {"BLEU": BLEU()}, [references], test_type="bs"
    )()
    ours = sacrebleu_rule_p(
        bleu_statistics(a, references), bleu_statistics(b, references), 1000
    )
    assert ours == pytest.approx(scores["BLEU"][1].p_value, abs=1.5 / 1001)


def test_the_seed_tests_reject_a_true_null_at_most_at_their_level():
    # the seeds of two recipes that do not differ: one normal distribution for both
    g = torch.Generator().manual_seed(7)
    draws = torch.randn(2000, 2, 4, generator=g, dtype=torch.float64).tolist()
    t_count = sum(
        SeedPairs([v - u for u, v in zip(a[:3], b[:3])], [], 0.0).seed_p < LEVEL
        for a, b in draws
    )
    perm_count = sum(permutation_p(a, b) < LEVEL for a, b in draws[:300])
    assert t_count <= binomial_bound(2000), t_count
    assert perm_count <= binomial_bound(300), perm_count


def test_a_real_difference_is_still_detected():
    # the shipped model's translations of val against an early, much weaker run's
    references = [t for _, t in load_multi30k("val")]
    shipped = (
        (ROOT / "models" / "multi30k-de-en" / "eval" / "val.hyp")
        .read_text(encoding="utf-8")
        .splitlines()
    )
    weaker, better = paired_bleu_test(
        {"early run": read("baseline-s0"), "shipped": shipped}, references
    )
    assert better.bleu - weaker.bleu > 10
    assert better.p_value < 0.01 and better.low > 0
