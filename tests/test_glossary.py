"""The glossary's formulas are the package's: book/glossary.md is read as text, each formula it
states is looked up in its entry, and the same formula (translated from the page's LaTeX into Python
where it is a number) is checked against what the code computes.

A change to either side fails a test here: rewrite the glossary's label-smoothing target as
"$1 - \\varepsilon$" and the text check fails; make the loss spread $\\varepsilon$ over all
$|\\mathcal{V}|$ tokens (as `F.cross_entropy(label_smoothing=...)` does) and the numeric check fails.
"""

import math
import re
from pathlib import Path

import pytest
import torch

from transformer.attention import attention
from transformer.decoding import beam_search, length_penalty
from transformer.stats import holm, permutation_p
from transformer.loss import label_smoothed_loss, smoothed_targets
from transformer.masking import causal_mask
from transformer.model import Transformer

from helpers import one_layer_config
from transformer.modern import RMSNorm
from transformer.schedule import inverse_sqrt_lr
from transformer.tokenizer import EOS_ID

GLOSSARY = Path(__file__).resolve().parents[1] / "book" / "glossary.md"

# the formulas as the glossary writes them
RIGHT_TOKEN = r"$1 - \varepsilon + \varepsilon/(|\mathcal{V}| - 1)$"
OTHER_TOKEN = r"$\varepsilon/(|\mathcal{V}| - 1)$"
LENGTH_PENALTY = r"$((5 + L)/6)^\alpha$"


def glossary() -> dict[str, str]:
    """The entries of the page's ```{glossary} block: term -> its definition, lines joined
    by single spaces (so that reflowing the prose does not matter)."""
    text = GLOSSARY.read_text(encoding="utf-8")
    block = re.search(r"```\{glossary\}\n(.*?)\n```", text, re.DOTALL)
    assert block, f"{GLOSSARY} has no glossary block"
    entries: dict[str, list[str]] = {}
    term = None
    for line in block.group(1).splitlines():
        if line.strip() and not line.startswith(" "):
            term = line.strip()
            entries[term] = []
        elif line.strip():
            assert term is not None, f"definition line before any term: {line!r}"
            entries[term].append(line.strip())
    return {t: " ".join(lines) for t, lines in entries.items()}


def entry(term: str) -> str:
    entries = glossary()
    assert term in entries, f"the glossary has no entry {term!r}: {sorted(entries)}"
    return entries[term]


def evaluate(latex: str, **values: float) -> float:
    """A formula of the glossary, as written there, evaluated in Python: the page's
    symbols replaced by names, nothing else changed."""
    expr = latex.strip("$")
    for symbol, name in (
        (r"\varepsilon", "eps"),
        (r"|\mathcal{V}|", "V"),
        (r"\alpha", "alpha"),
    ):
        expr = expr.replace(symbol, name)
    expr = expr.replace(")^", ")**")
    return eval(expr, {"__builtins__": {}}, values)  # noqa: S307 (our own page)


def test_the_glossary_is_read_as_the_book_renders_it():
    entries = glossary()
    assert len(entries) > 30
    assert entries["perplexity"].startswith("$e$ to the power of the mean negative")


# label smoothing ------------------------------------------------------------------------


def test_glossary_states_the_label_smoothing_target_that_the_loss_trains_against():
    text = entry("label smoothing")
    for formula in (RIGHT_TOKEN, OTHER_TOKEN):
        assert formula in text, f"the label smoothing entry no longer states {formula}"
    assert "padding gets 0" in text
    vocab, eps, pad = 11, 0.1, 0
    target = torch.tensor([5, 1, 10, 3])  # (n,) reference ids, none of them padding
    # the target distribution the loss trains against, recovered from its gradient:
    # d(-sum_k q_k log softmax(z)_k)/dz = softmax(z) - q, since each row of q sums to 1
    logits = torch.randn(
        1,
        len(target),
        vocab,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(0),
    ).requires_grad_()
    loss_sum, _, _ = label_smoothed_loss(logits, target[None], eps, pad_id=pad)
    loss_sum.backward()
    q = (torch.softmax(logits, -1) - logits.grad)[0].detach()  # (n, |V|)
    torch.testing.assert_close(q, smoothed_targets(target, vocab, eps, pad).double())
    right = evaluate(RIGHT_TOKEN, eps=eps, V=vocab)
    other = evaluate(OTHER_TOKEN, eps=eps, V=vocab)
    rows = torch.arange(len(target))
    expected = torch.full_like(q, other)
    expected[:, pad] = 0.0
    expected[rows, target] = right
    torch.testing.assert_close(q, expected, rtol=0, atol=1e-12)
    # the check tells the formula from its neighbours: 1 - eps alone, or torch's eps / |V|
    for wrong in (1 - eps, 1 - eps + eps / vocab):
        assert (q[rows, target] - wrong).abs().min() > 1e-6


# the mask -------------------------------------------------------------------------------


def test_glossary_says_how_a_mask_works_and_what_leaks_as_the_code_computes_it():
    text = entry("mask")
    for phrase in (
        r"setting their scores to $-\infty$ before the softmax",
        "Multiplying the *scores* by zero leaks",
        r"a score of 0 still gets weight $e^0 = 1$",
        r"Zeroing the exponentiated scores $e^{Z}$ instead, and renormalising each row, "
        r"is exactly the $-\infty$ mask",
    ):
        assert phrase in text, f"the mask entry no longer says {phrase!r}"
    g = torch.Generator().manual_seed(0)
    T, D_k = 6, 8
    Q, K, V = (torch.randn(T, D_k, dtype=torch.float64, generator=g) for _ in range(3))
    M = causal_mask(T)  # (T, T), True where a query may attend
    out, weights = attention(Q, K, V, M)  # (T, D_k), (T, T): the package's -inf mask
    Z = Q @ K.T / math.sqrt(D_k)  # (T, T)
    assert (weights[~M] == 0).all()  # e^{-inf} = 0
    # zeroing e^Z and renormalising each row is the -inf mask
    e = torch.exp(Z) * M  # (T, T)
    torch.testing.assert_close(weights, e / e.sum(-1, keepdim=True), rtol=0, atol=1e-12)
    # multiplying the scores by zero: each masked key gets e^0 = 1 before normalising
    leaky = torch.softmax(Z * M, dim=-1)  # (T, T)
    assert (leaky[~M] > 0).all()
    row_sums = torch.exp(Z * M).sum(-1, keepdim=True)  # (T, 1)
    torch.testing.assert_close(
        leaky[~M], (1.0 / row_sums).expand(T, T)[~M], rtol=0, atol=1e-12
    )
    # ... so a masked key's value reaches the output; under the -inf mask it does not
    V_later = V.clone()
    V_later[-1] += 1.0  # change only the last (future for every other query) value
    assert (leaky[:-1] @ V_later - leaky[:-1] @ V)[:-1].abs().max() > 1e-2
    assert torch.equal(attention(Q, K, V_later, M)[0][:-1], out[:-1])


# the other formulas the glossary states --------------------------------------------------


def test_glossary_rmsnorm_multiplies_by_its_gains_and_has_no_bias():
    text = entry("RMSNorm")
    assert "root mean square, then multiplying by learned gains" in text
    assert "without removing the mean and without a bias" in text
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=torch.float64, generator=g)  # (B, L, D)
    norm = RMSNorm(8).double()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(8, dtype=torch.float64, generator=g))
        rms = x.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()  # (B, L, 1)
        torch.testing.assert_close(norm(x), x / rms * norm.weight)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


def test_glossary_length_penalty_is_the_divisor_beam_search_ranks_by():
    text = entry("length penalty")
    assert LENGTH_PENALTY in text
    assert "$L$ its length in tokens with the end-of-sentence token counted" in text
    for L in (1, 4, 17):
        for alpha in (0.0, 0.6, 1.0):
            assert length_penalty(L, alpha) == pytest.approx(
                evaluate(LENGTH_PENALTY, L=L, alpha=alpha), rel=1e-12
            )
    torch.manual_seed(0)
    config = one_layer_config(20, max_len=32)
    model = Transformer(config).double().eval()
    with torch.no_grad():
        model.generator.bias[EOS_ID] = 3.0  # so that most hypotheses end with EOS
    src = torch.randint(4, 20, (3, 5), generator=torch.Generator().manual_seed(1))
    finished = [
        h
        for nbest in beam_search(model, src, beam_size=3, n_best=3, alpha=1.0)
        for h in nbest
        if h.finished
    ]
    assert finished
    for h in finished:  # tokens hold no EOS: L counts it on top
        assert h.score == pytest.approx(
            h.log_prob / evaluate(LENGTH_PENALTY, L=len(h.tokens) + 1, alpha=1.0),
            rel=1e-12,
        )


def test_glossary_warm_up_rises_linearly_then_falls_as_the_inverse_square_root():
    text = entry("warm-up")
    assert (
        "rises linearly before it decays with the inverse square root of the step"
        in text
    )
    D, warmup = 64, 100
    lr = [inverse_sqrt_lr(s, D, warmup) for s in range(1, 4 * warmup + 1)]
    for s in (1, 10, warmup):
        assert lr[s - 1] == pytest.approx(s * lr[0], rel=1e-12)
    for s in (warmup, 2 * warmup):
        assert lr[2 * s - 1] == pytest.approx(lr[s - 1] / math.sqrt(2), rel=1e-12)


def test_glossary_holm_multiplies_the_kth_smallest_as_the_package_does():
    text = entry("Holm's correction")
    assert (
        "the $k$-th smallest p-value is multiplied by $m - k + 1$, capped at 1" in text
    )
    assert "never allowed below the adjusted value before it" in text
    p = [0.04, 0.001, 0.3, 0.012, 0.02]
    m, running, by_entry = len(p), 0.0, {}
    for k, i in enumerate(sorted(range(m), key=p.__getitem__), start=1):
        running = max(running, min(1.0, (m - k + 1) * p[i]))
        by_entry[i] = running
    assert holm(p) == pytest.approx([by_entry[i] for i in range(m)], rel=1e-12)


def test_glossary_permutation_test_floor_is_the_packages():
    text = entry("permutation test over seeds")
    assert (
        "cannot go below $2 / \\binom{2n}{n}$ (0.1 for three, 0.029 for four)" in text
    )
    for n, shown in ((3, 0.1), (4, 0.029)):
        groups = [float(i) for i in range(n)], [float(i + 10) for i in range(n)]
        assert round(permutation_p(*groups), 3) == shown


def test_glossary_temperature_and_the_two_cuts_are_what_sampling_draws_from():
    from transformer.decoder_only import sampling_distribution

    text = entry("sampling temperature")
    assert r"$\exp(\ell_i / \tau) / \sum_j \exp(\ell_j / \tau)$" in text
    log_p = torch.tensor([[0.5, 0.25, 0.15, 0.1]]).log()
    tau = 0.7
    stated = torch.exp(log_p / tau) / torch.exp(log_p / tau).sum()
    torch.testing.assert_close(sampling_distribution(log_p, temperature=tau), stated)
    cuts = entry("top-k and top-p sampling")
    assert "the $k$ most probable tokens" in cuts and "at least $p$" in cuts
    # top-k = 2 keeps 0.5 and 0.25; top-p = 0.8 needs 0.5 + 0.25 + 0.15 >= 0.8
    torch.testing.assert_close(
        sampling_distribution(log_p, top_k=2), torch.tensor([[2 / 3, 1 / 3, 0, 0]])
    )
    torch.testing.assert_close(
        sampling_distribution(log_p, top_p=0.8),
        torch.tensor([[0.5, 0.25, 0.15, 0.0]]) / 0.9,
    )
