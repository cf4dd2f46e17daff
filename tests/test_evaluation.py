"""Evaluation: sacreBLEU wrappers with signatures, several references, and grouping Tatoeba's references."""

import itertools
import math
import random
import statistics

import pytest
import sacrebleu

from transformer.engine.corpora import split_pairs_for
from transformer.errors import InputError
from transformer.stats import (
    SeedPairs,
    bleu_of,
    bleu_statistics,
    compare,
    holm,
    holm_levels,
    mean_sd,
    paired_bleu_test,
    paired_bootstrap,
    paired_over_seeds,
    permutation_p,
    t_p_value,
    t_quantile,
)
from transformer.evaluation import corpus_bleu, corpus_chrf, group_references
from transformer.engine.config import DataConfig


def test_corpus_bleu_is_sacrebleu_with_its_signature_cased_and_13a_by_default():
    hyps, refs = (
        ["A dog runs in the park .", "Two men talk"],
        ["A dog runs through the park .", "Two men are talking"],
    )
    s = corpus_bleu(hyps, refs)
    assert s.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert s.signature.startswith(
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
    )
    lower = corpus_bleu([h.lower() for h in hyps], refs, lowercase=True)
    assert lower.metric == "BLEU, lowercased" and "case:lc" in lower.signature
    assert lower.score == pytest.approx(
        s.score
    )  # lowercasing the hypotheses changes nothing once case is ignored
    assert corpus_chrf(hyps, refs).signature.startswith(
        "nrefs:1|case:mixed|eff:yes|nc:6|nw:0"
    )


def test_several_references_per_sentence_become_streams_with_none_for_missing_ones():
    hyps = ["您好！", "谢谢你。"]
    refs = [["你好。", "您好！"], ["谢谢。"]]
    multi = corpus_bleu(hyps, refs, tokenize="zh")
    expected = sacrebleu.corpus_bleu(
        hyps, [["你好。", "谢谢。"], ["您好！", None]], tokenize="zh"
    )
    assert (
        multi.score == pytest.approx(expected.score)
        and "nrefs:var" in multi.signature
        and "tok:zh" in multi.signature
    )
    assert multi.score > corpus_bleu(hyps, [r[0] for r in refs], tokenize="zh").score


def test_misaligned_or_empty_references_are_refused_with_a_message():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="non-empty list"):
        corpus_bleu(["a", "b"], [["a"], []])


def test_group_references_keeps_first_seen_order_and_drops_duplicate_targets():
    pairs = [
        ("Hi.", "你好。"),
        ("Bye.", "再见。"),
        ("Hi.", "您好。"),
        ("Hi.", "你好。"),
    ]
    assert group_references(pairs) == (
        ["Hi.", "Bye."],
        [["你好。", "您好。"], ["再见。"]],
    )


def test_tatoeba_test_split_groups_into_unique_english_sentences(course_data):
    data = DataConfig(
        corpus="tatoeba", src_lang="en", tgt_lang="zh", data_dir=str(course_data)
    )
    pairs = split_pairs_for(data, "test")
    sources, refs = group_references(pairs)
    assert len(sources) == len({s for s, _ in pairs}) < len(pairs)
    assert sum(map(len, refs)) <= len(pairs) and max(map(len, refs)) > 1
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        split_pairs_for(data, "dev")


REFERENCES = [f"the cat number {i} sat on the mat today" for i in range(60)]


def test_a_paired_test_separates_a_much_better_system_and_gives_each_its_interval():
    worse = [f"a dog {i} stood near a mat" for i in range(60)]
    base, better = paired_bleu_test({"worse": worse, "perfect": REFERENCES}, REFERENCES)
    assert (base.system, base.p_value) == ("worse", None)
    assert better.bleu == pytest.approx(100.0) and better.p_value < 0.01
    assert base.bleu == pytest.approx(sacrebleu.corpus_bleu(worse, [REFERENCES]).score)
    assert "p = 0.001" in str(better)


def test_a_paired_test_of_two_systems_that_differ_by_chance_is_not_significant():
    # half the sentences each: one system drops the last word of the even ones, the
    # other of the odd ones: the same quality, arranged differently
    def drop_last(s: str) -> str:
        return s.rsplit(" ", 1)[0]

    a = [drop_last(r) if i % 2 == 0 else r for i, r in enumerate(REFERENCES)]
    b = [drop_last(r) if i % 2 == 1 else r for i, r in enumerate(REFERENCES)]
    _, other = paired_bleu_test({"a": a, "b": b}, REFERENCES)
    assert other.p_value > 0.3


def test_a_paired_test_refuses_systems_and_references_of_different_lengths():
    with pytest.raises(InputError, match="one translation per reference"):
        paired_bleu_test({"a": ["x"], "b": ["x", "y"]}, ["x", "y"])
    with pytest.raises(InputError, match="two or more systems"):
        paired_bleu_test({"a": ["x"]}, ["x"])


def test_holm_adjusts_a_hand_computed_example_by_step_down():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.02 x 2 = 0.04, 0.03 x 1 = 0.03 -> 0.04
    # (never below the one before); returned in the order given
    assert holm([0.01, 0.02, 0.03, 0.005]) == pytest.approx([0.03, 0.04, 0.04, 0.02])
    # capped at 1; one test is left alone; none is nothing
    assert holm([0.4, 0.5, 0.9]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([0.03]) == [0.03] and holm([]) == []


def test_holm_is_monotone_in_the_raw_p_values_and_never_below_them():
    raw = [0.2, 0.001, 0.04, 0.04, 0.6, 0.013, 0.5, 0.0, 1.0, 0.021]
    adjusted = holm(raw)
    for a in range(len(raw)):
        assert raw[a] <= adjusted[a] <= 1.0
        for b in range(len(raw)):
            if raw[a] <= raw[b]:
                assert adjusted[a] <= adjusted[b]
    # at least as strict as one test, never stricter than Bonferroni
    assert all(h <= min(1.0, len(raw) * p) for h, p in zip(adjusted, raw))


def test_holm_refuses_a_value_that_is_not_a_probability():
    with pytest.raises(InputError, match="must lie in"):
        holm([0.1, float("nan")])
    with pytest.raises(InputError, match="must lie in"):
        holm([1.5])


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_seed_test_of_groups_apart_is_its_floor_two_over_n_choose_half(n):
    a, b = [20.0 + i / 10 for i in range(n)], [25.0 + i / 10 for i in range(n)]
    assert permutation_p(a, b) == pytest.approx(2 / math.comb(2 * n, n))
    assert permutation_p(b, a) == permutation_p(a, b)


def test_the_seed_test_counts_splits_by_hand_and_gives_one_for_equal_groups():
    a, b = [1.0, 2.0, 6.0], [3.0, 4.0, 5.0]  # means 3 and 4
    pool = a + b
    gaps = [
        abs(sum(pool[i] for i in s) / 3 - (sum(pool) - sum(pool[i] for i in s)) / 3)
        for s in itertools.combinations(range(6), 3)
    ]
    assert permutation_p(a, b) == sum(g >= 1.0 - 1e-9 for g in gaps) / 20
    assert permutation_p([1.0, 2.0], [2.0, 1.0]) == 1.0
    with pytest.raises(InputError, match="finite"):
        permutation_p([1.0, math.nan], [2.0])
    with pytest.raises(InputError, match="non-empty"):
        permutation_p([], [2.0])


def test_mean_sd_is_the_sample_standard_deviation():
    xs = [21.3, 22.9, 20.4, 23.1]
    assert mean_sd(xs) == pytest.approx((statistics.mean(xs), statistics.stdev(xs)))
    with pytest.raises(InputError, match="two or more"):
        mean_sd([1.0])


def test_paired_over_seeds_gives_each_seeds_gap_and_p_value():
    worse = [f"a dog {i} stood near a mat" for i in range(60)]
    pairs = paired_over_seeds([(worse, REFERENCES), (REFERENCES, worse)], REFERENCES)
    gap = 100.0 - sacrebleu.corpus_bleu(worse, [REFERENCES]).score
    assert pairs.gaps == pytest.approx([gap, -gap])
    assert not pairs.one_sign and pairs.mean_gap == pytest.approx(0.0)
    assert all(p < 0.01 for p in pairs.p_values) and pairs.ci >= 0
    with pytest.raises(InputError, match="one \\(a, b\\) pair"):
        paired_over_seeds([], REFERENCES)


@pytest.mark.parametrize(
    "gaps, ps, better",
    [
        ([1.0, 2.0, 1.5], [0.001, 0.01, 0.02], "b"),  # the seeds' t-test: p = 0.035
        ([-1.0, -2.0, -1.5], [0.001, 0.01, 0.02], "a"),
        ([1.0, -2.0, 1.5], [0.001, 0.001, 0.001], None),  # the seeds disagree
        ([1.0, 2.0, 1.5], [0.001, 0.2, 0.001], None),  # one seed's test does not agree
        ([1.0, 3.0, 0.2], [0.001, 0.001, 0.001], None),  # the t-test does not agree
    ],
)
def test_a_recipe_is_called_better_only_when_every_test_agrees(gaps, ps, better):
    (verdict,) = compare({("a", "b"): pairs_of(gaps, ps)})
    assert verdict.better == better


@pytest.mark.parametrize(
    "hyps",
    [
        [
            f"a dog {i} stood near a mat" for i in range(60)
        ],  # no 4-gram matches: smoothed
        [f"the cat number {i} sat on a mat" for i in range(60)],
        [f"the cat number {i} sat on the mat today and then left" for i in range(60)],
    ],
)
def test_bleu_from_sufficient_statistics_is_sacrebleus_corpus_bleu(hyps):
    totals = bleu_statistics(hyps, REFERENCES).sum(0)
    expected = sacrebleu.corpus_bleu(hyps, [REFERENCES]).score
    assert bleu_of(totals).item() == pytest.approx(expected, abs=1e-9)


def test_the_paired_bootstrap_is_two_sided_and_its_interval_surrounds_the_gap():
    worse = [f"the cat number {i} sat on a mat" for i in range(60)]
    a, b = bleu_statistics(worse, REFERENCES), bleu_statistics(REFERENCES, REFERENCES)
    forward, backward = paired_bootstrap(a, b), paired_bootstrap(b, a)
    assert forward.p_value == backward.p_value and forward.gap == -backward.gap
    assert forward.low <= forward.gap <= forward.high
    assert paired_bootstrap(a, a).p_value == 1.0  # no gap: no evidence at all


@pytest.mark.parametrize(
    "t, dof, p", [(4.303, 2, 0.05), (2.776, 4, 0.05), (1.0, 1, 0.5), (2.042, 30, 0.05)]
)
def test_the_t_distribution_matches_printed_tables(t, dof, p):
    assert t_p_value(t, dof) == pytest.approx(p, abs=2e-4)
    assert t_quantile(1 - p, dof) == pytest.approx(t, abs=2e-3)
    assert t_p_value(0.0, dof) == pytest.approx(1.0)


def pairs_of(gaps, ps):
    return SeedPairs(gaps, ps, 1.0, [20.0] * len(gaps), [20.0 + g for g in gaps])


def test_the_rule_corrects_for_the_family_it_is_given():
    alone = pairs_of([1.0, 1.2, 1.1], [0.01, 0.01, 0.01])  # seeds' t-test p ~ 0.003
    (verdict,) = compare({("a", "b"): alone})
    assert verdict.better == "b" and "b better" in str(verdict)
    weak = pairs_of([1.0, 1.2, 1.1], [0.03, 0.03, 0.03])  # p = 0.03 each
    assert compare({("a", "b"): weak})[0].better == "b"  # alone, it passes
    together = compare({("a", "b"): weak, ("a", "c"): weak})
    assert [v.p_holm for v in together] == pytest.approx([0.06, 0.06])
    assert all(v.better is None for v in together)


def test_the_rule_says_not_distinguishable_with_the_interval_not_ruled_out():
    (verdict,) = compare({("a", "b"): pairs_of([1.0, -0.5, 0.8], [0.01, 0.2, 0.02])})
    low, high = verdict.family_interval()
    assert verdict.better is None and low < 0 < high
    assert f"a gap from {low:+.1f} to {high:+.1f} BLEU is not ruled out" in str(verdict)


def test_holms_levels_reject_exactly_what_holms_adjusted_p_values_reject():
    rng = random.Random(0)
    for _ in range(2000):
        ps = [rng.random() ** rng.choice((1, 3, 8)) for _ in range(rng.randint(1, 12))]
        for p, p_holm, alpha in zip(ps, holm(ps), holm_levels(ps)):
            assert (p < alpha) == (p_holm < 0.05)
            assert 0.05 / len(ps) <= alpha <= 0.05  # between Bonferroni's and none
    # 0.001 against 0.05 / 3, 0.01 against 0.05 / 2, 0.2 against 0.05 (and kept)
    assert holm_levels([0.001, 0.2, 0.01]) == pytest.approx([0.05 / 3, 0.05, 0.025])


def test_the_bootstraps_interval_leaves_out_zero_exactly_when_p_is_below_its_level():
    worse = [f"the cat number {i} sat on a mat" for i in range(60)]
    some = [REFERENCES[i] if i % 3 else worse[i] for i in range(60)]
    for hyps in (worse, some):
        test = paired_bootstrap(*(bleu_statistics(h, REFERENCES) for h in (hyps, some)))
        for alpha in (0.5, 0.05, 0.01, 0.004, 0.002, 0.0009):
            low, high = test.interval(1 - alpha)
            assert low <= test.gap <= high
            assert (test.p_value < alpha) == (not low <= 0 <= high)
        assert (test.low, test.high) == test.interval(0.95)


def random_family(rng: random.Random, with_tests: bool) -> dict:
    """Comparisons of invented recipes: seeds' gaps, their p-values, their scores."""
    family = {}
    for c in range(rng.randint(1, 6)):
        n, mean = rng.randint(3, 6), rng.choice((0.0, 0.5, 2.0, -3.0))
        gaps = [rng.gauss(mean, rng.choice((0.1, 1.0))) for _ in range(n)]
        ps = [rng.choice((0.001, 0.004, 0.02, 0.3)) for _ in range(n)]
        pairs = SeedPairs(gaps, ps if rng.random() < 0.8 else [], 1.0, [20.0] * n)
        pairs.b_bleu = [20.0 + g for g in gaps]
        family["a", f"b{c}"] = pairs
    if with_tests:  # seeds whose own test keeps its draws: real paired bootstraps
        worse = [f"the cat number {i} sat on a mat" for i in range(60)]
        mixed = [REFERENCES[i] if i % 4 else worse[i] for i in range(60)]
        family["a", "real"] = paired_over_seeds(
            [(worse, mixed), (mixed, REFERENCES), (worse, REFERENCES)], REFERENCES
        )
    return family


def test_a_verdict_and_its_family_interval_never_disagree():
    # the family-level interval leaves out 0 exactly when the verdict is "better",
    # and then on the side of the recipe called better
    rng, seen = random.Random(1), set()
    for trial in range(300):
        for v in compare(random_family(rng, with_tests=trial % 30 == 0)):
            low, high = v.family_interval()
            one_at_a_time = v.pairs.interval()
            assert low <= one_at_a_time[0] and one_at_a_time[1] <= high
            if v.better is None:
                assert low <= 0 <= high
                assert f"a gap from {low:+.1f} to {high:+.1f}" in str(v)
            else:
                assert (low > 0) if v.better == v.b else (high < 0)
            seen.add(v.better is None)
    assert seen == {True, False}  # both kinds of verdict were checked


def test_the_rule_refuses_fewer_than_three_seeds():
    with pytest.raises(InputError, match="at least 3"):
        compare({("a", "b"): pairs_of([1.0, 2.0], [0.01, 0.01])})


def test_the_rule_judges_a_score_without_sentences_by_the_seeds_alone():
    shares = SeedPairs([0.3, 0.35, 0.4], [], 0.0, [0.3, 0.3, 0.3], [0.6, 0.65, 0.7])
    (verdict,) = compare({("plain", "residual"): shares}, metric="of the loss")
    assert verdict.p == pytest.approx(shares.seed_p) and verdict.better == "residual"
    assert "+0.35 of the loss" in str(verdict)


def test_evaluate_pairs_checks_its_checkpoint_and_limit_by_translates_rules():
    """A missing model is the one-line refusal `translate` gives (not an AttributeError
    deep inside), and a NumPy integer is an integer here as it is for `translate`."""
    import numpy as np

    from transformer.engine.shipped import load_translator
    from transformer.engine.evaluate import evaluate_pairs

    pairs = [("Ein Hund läuft.", "A dog runs.")]
    with pytest.raises(InputError, match="checkpoint must be a loaded model"):
        evaluate_pairs(None, pairs, "val")
    with pytest.raises(InputError, match="limit=-1 must be an integer >= 0"):
        evaluate_pairs(load_translator("multi30k-de-en"), pairs, "val", limit=-1)
    report = evaluate_pairs(
        load_translator("multi30k-de-en"), pairs, "val", limit=np.int64(1), beam_size=1
    )
    assert report["sentences"] == 1, report
    # a generator of pairs was read by the door and then found empty
    report = evaluate_pairs(
        load_translator("multi30k-de-en"), (p for p in pairs), "val", beam_size=1
    )
    assert report["sentences"] == 1, report
