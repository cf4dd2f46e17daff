"""Tests for transformer.loss (chapter 10): the label-smoothed loss is cross-entropy against the smoothed
targets, which are distributions with no mass on padding."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.loss import label_smoothed_loss, smoothed_targets


@settings(max_examples=30, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 5),
    V=st.integers(5, 12),
    eps=st.floats(0.0, 0.5),
    seed=st.integers(0, 999),
)
def test_label_smoothed_loss_equals_cross_entropy_against_the_explicit_smoothed_targets(
    B, T, V, eps, seed
):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    target = torch.randint(0, V, (B, T), generator=g)  # some targets are padding (id 0)
    loss, nll, n = label_smoothed_loss(logits, target, eps, pad_id=0)
    q = smoothed_targets(target.reshape(-1), V, eps, pad_id=0).double()  # (B*T, V)
    expected = -(q * torch.log_softmax(logits.reshape(-1, V), -1)).sum()
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-9)
    assert n.item() == (target != 0).sum().item()
    torch.testing.assert_close(
        nll.double(),
        F.cross_entropy(
            logits.reshape(-1, V), target.reshape(-1), ignore_index=0, reduction="sum"
        ),
        rtol=1e-6,
        atol=1e-9,
    )


def test_smoothed_targets_are_distributions_that_never_put_mass_on_padding():
    target = torch.tensor([5, 0, 2])
    q = smoothed_targets(target, vocab_size=8, smoothing=0.1, pad_id=0)
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 0.0, 1.0]))
    assert (q[:, 0] == 0).all()
    assert q[0, 5] == pytest.approx(0.9 + 0.1 / 7) and q[0, 3] == pytest.approx(0.1 / 7)


def test_without_smoothing_the_loss_is_zero_exactly_when_the_model_is_certain_and_right():
    target = torch.tensor([[4, 2, 0]])
    logits = torch.full((1, 3, 6), -1e4)
    logits[0, 0, 4] = logits[0, 1, 2] = logits[0, 2, 1] = 0.0
    loss, _, n = label_smoothed_loss(logits, target, smoothing=0.0, pad_id=0)
    assert loss.item() == 0.0 and n.item() == 2


@pytest.mark.parametrize("pad_logit", [-30.0, -1e4, -1e9, float("-inf")])
def test_label_smoothed_loss_stays_exact_when_the_pad_logit_is_masked_out(pad_logit):
    # A model may mask the pad token's logit. The pad column must leave the smoothed term
    # before the sum: subtracting it afterwards lost 9 % of the loss at -1e9 and gave NaN
    # at -inf.
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 9, generator=g)
    logits[..., 0] = pad_logit  # pad_id 0
    target = torch.tensor([[3, 5, 1, 0], [2, 8, 0, 0]])  # padded at the ends
    loss, nll, n = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    log_p = torch.log_softmax(logits.double(), -1)[..., 1:]  # (B, T, |V| - 1): no pad
    q = smoothed_targets(target.reshape(-1), 9, 0.1, pad_id=0).double()[:, 1:]
    expected = -(q * log_p.reshape(-1, 8)).sum()
    assert torch.isfinite(loss) and torch.isfinite(nll) and n.item() == 5
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-6)
    logits.requires_grad_(True)
    label_smoothed_loss(logits, target, 0.1, pad_id=0)[0].backward()
    assert torch.isfinite(logits.grad).all()
