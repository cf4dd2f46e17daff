"""Chapter 12's calibration check: how often each paired test rejects when nothing differs.

    python tools/null_calibration.py          # about 6 min on one thread (377 s, loaded machine)
    python tools/null_calibration.py --seeds-only   # only the seed part, into the existing file (s)

A test at the 5 % level should call a difference that is not there about 5 % of the time, and
its p-value should then be spread evenly over [0, 1]. To check that on real translations, this
script builds two systems that are equally good by construction: it takes two trained runs'
translations of Multi30k `val` (`notebooks/results/16_modern_block_runs/baseline-s0` and
`all-s0`) and, for every sentence, a coin decides which of the two translations goes into system
A and which into system B. Then it tests A against B, again and again, with

- sacreBLEU's paired bootstrap (`PairedTest(..., test_type="bs")`, 1,000 resamples),
- sacreBLEU's approximate randomisation (`test_type="ar"`, 1,000 shuffles),
- the course's paired bootstrap, centred on the observed gap (`transformer.stats.paired_bootstrap`,
  1,000 resamples),

and it checks the tests over seeds on a model of seeds: each arm's seeds drawn from one normal
distribution (exchangeable by construction), tested with the paired t-test over three seeds
(`SeedPairs.seed_p`) and the exact permutation test (`permutation_p`), three and four seeds a
side. The t-test assumes roughly normal seed-to-seed gaps, so it is also run where they are not: gaps
drawn from Student's t with 3 degrees of freedom (heavy tails) and from a centred exponential (skewed),
both with mean 0, so the null holds. It writes every p-value to `notebooks/results/12_null_calibration.json`, which chapter 12
reads (rates, histograms, and a live re-run of the first trials).

One thread, seeded: a re-run gives the same file.
"""

import argparse
import json
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from transformer.engine.command_input import positive_number, run_tool
from transformer.engine.corpora import load_multi30k
from transformer.files import atomic_write_text, earlier_results
from transformer.stats import (
    SeedPairs,
    bleu_statistics,
    paired_bootstrap,
    permutation_p,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "notebooks" / "results"
OUT = RESULTS / "12_null_calibration.json"
RUNS = ("baseline-s0", "all-s0")  # two runs of chapter 16, greedy translations of val
SEED = 52
TRIALS = {"sacrebleu_bs": 400, "sacrebleu_ar": 300, "centred_bs": 1000}
AR_SHUFFLES = 1000
SEED_TRIALS = 4000


def load_systems() -> tuple[list[str], list[str], list[str]]:
    folder = RESULTS / "16_modern_block_runs"
    x, y = (
        (folder / run / "val.hyp").read_text(encoding="utf-8").splitlines()
        for run in RUNS
    )
    references = [t for _, t in load_multi30k("val")]
    assert len(x) == len(y) == len(references)
    return x, y, references


def coins(n: int, trials: int, seed: int = SEED) -> torch.Tensor:
    """(trials, n) booleans: True puts system x's translation of the sentence into A."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(trials, n, generator=g) < 0.5


def sacrebleu_p(a: list[str], b: list[str], refs: list[str], test_type: str) -> float:
    samples = AR_SHUFFLES if test_type == "ar" else 1000
    _, scores = PairedTest(
        [("A", a), ("B", b)],
        {"BLEU": BLEU()},
        [refs],
        test_type=test_type,
        n_samples=samples,
        n_ar_confidence=-1,
    )()
    return scores["BLEU"][1].p_value


def sentence_null(trials: dict[str, int]) -> dict:
    x, y, refs = load_systems()
    sx, sy = bleu_statistics(x, refs), bleu_statistics(y, refs)
    flips = coins(len(x), max(trials.values()))
    p = {name: [] for name in trials}
    for k, flip in enumerate(flips.tolist()):
        a = [u if f else v for u, v, f in zip(x, y, flip)]
        b = [v if f else u for u, v, f in zip(x, y, flip)]
        if k < trials["centred_bs"]:
            keep = flips[k][:, None]  # (N, 1)
            sa, sb = torch.where(keep, sx, sy), torch.where(keep, sy, sx)
            p["centred_bs"].append(paired_bootstrap(sa, sb).p_value)
        for test_type in ("bs", "ar"):
            if k < trials[f"sacrebleu_{test_type}"]:
                p[f"sacrebleu_{test_type}"].append(sacrebleu_p(a, b, refs, test_type))
        if k % 50 == 0:
            print(f"trial {k}", {n: len(v) for n, v in p.items()}, flush=True)
    return {name: [round(v, 6) for v in values] for name, values in p.items()}


def seed_null(trials: int) -> dict:
    """Seeds' BLEU drawn from one normal distribution for both arms."""
    g = torch.Generator().manual_seed(SEED + 1)
    p = {"seed_t_3": [], "permutation_3": [], "permutation_4": []}
    for _ in range(trials):
        a, b = torch.randn(2, 4, generator=g, dtype=torch.float64).tolist()
        gaps = [v - u for u, v in zip(a[:3], b[:3])]
        p["seed_t_3"].append(SeedPairs(gaps, [0.0] * 3, 0.0).seed_p)
        p["permutation_3"].append(permutation_p(a[:3], b[:3]))
        p["permutation_4"].append(permutation_p(a, b))
    return {name: [round(v, 6) for v in values] for name, values in p.items()}


# the seed-gap models beyond the normal one, each with mean 0 (a true null): name -> (what, draw)
GAP_MODELS = {
    "student_t_3": "Student's t, 3 degrees of freedom (heavy tails)",
    "centred_exponential": "exponential with rate 1, minus 1 (skewed to the right)",
}


def draw_gaps(model: str, g: torch.Generator) -> list[float]:
    """Three seed-to-seed gaps from one of GAP_MODELS."""
    if model == "student_t_3":  # Z / sqrt(chi2_3 / 3)
        z = torch.randn(3, generator=g, dtype=torch.float64)
        chi2 = torch.randn(3, 3, generator=g, dtype=torch.float64).pow(2).sum(1)
        return (z / (chi2 / 3).sqrt()).tolist()
    u = torch.rand(3, generator=g, dtype=torch.float64)
    return (-torch.log1p(-u) - 1.0).tolist()


def seed_gap_null(trials: int) -> dict:
    """The t-test over 3 paired seeds where the gaps are not normal."""
    out = {}
    for k, model in enumerate(GAP_MODELS):
        g = torch.Generator().manual_seed(SEED + 2 + k)
        ps, signs = [], []
        for _ in range(trials):
            gaps = draw_gaps(model, g)
            ps.append(SeedPairs(gaps, [0.0] * 3, 0.0).seed_p)
            # the rule without its per-seed bootstraps: the t-test, and every seed ahead
            same = all(x > 0 for x in gaps) or all(x < 0 for x in gaps)
            signs.append(ps[-1] if same else 1.0)
        out[model] = {
            "seed_t_3": [round(v, 6) for v in ps],
            "t_and_every_seed_ahead": [round(v, 6) for v in signs],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale", type=positive_number, default=1.0, help="trials x this"
    )
    parser.add_argument(
        "--seeds-only", action="store_true", help="redo the seed part only, in OUT"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    seed_trials = max(1, int(SEED_TRIALS * args.scale))
    if args.seeds_only:
        report = earlier_results(OUT)  # the rest of the report: it must be there
        report["seed_tests"] = seed_null(seed_trials)
        report["seed_gap_models"] = GAP_MODELS
        report["seed_gap_tests"] = seed_gap_null(seed_trials)
        atomic_write_text(OUT, json.dumps(report, indent=1) + "\n")
        print(f"wrote the seed part of {OUT} in {time.perf_counter() - start:.0f} s")
        return
    trials = {k: max(1, int(v * args.scale)) for k, v in TRIALS.items()}
    report = {
        "what": "p-values of paired tests under a true null (tools/null_calibration.py)",
        "systems": [f"16_modern_block_runs/{run}/val.hyp" for run in RUNS],
        "null": "per sentence a coin puts one run's translation in A, the other's in B",
        "coin_seed": SEED,
        "resamples": {
            "sacrebleu_bs": 1000,
            "sacrebleu_ar": AR_SHUFFLES,
            "centred_bs": 1000,
        },
        "sentence_tests": sentence_null(trials),
        "seed_model": "both arms' seeds drawn from one normal distribution",
        "seed_tests": seed_null(seed_trials),
        "seed_gap_models": GAP_MODELS,
        "seed_gap_tests": seed_gap_null(seed_trials),
    }
    report["seconds"] = round(time.perf_counter() - start)
    atomic_write_text(OUT, json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT} in {report['seconds']} s")


if __name__ == "__main__":
    run_tool(main)
