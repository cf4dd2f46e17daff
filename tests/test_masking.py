"""`transformer.masking`: the masks' shapes and values, and what they guarantee inside attention."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer
from transformer.attention import attention
from transformer.masking import causal_mask, padding_mask
from transformer.multihead import MultiHeadAttention, split_heads

FAST = settings(max_examples=30, deadline=None)
PAD = 0


def random_tokens(lengths, S, g, vocab=20):
    """(B, S) token ids in 1..vocab-1, padded with PAD after each sentence's length."""
    tokens = torch.randint(1, vocab, (len(lengths), S), generator=g)
    tokens[torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]] = PAD
    return tokens


@given(st.integers(0, 40))
def test_causal_mask_blocks_every_future_position(T):
    mask = causal_mask(T)
    assert mask.dtype == torch.bool and mask.shape == (T, T)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(
        mask, j <= i
    )  # allowed exactly on and below the diagonal: the last row is all True


def test_causal_mask_goes_to_the_requested_device_and_rejects_negative_lengths():
    assert causal_mask(3, device="cpu").device.type == "cpu"
    assert causal_mask(3, device="meta").device.type == "meta"
    with pytest.raises(ValueError, match="T=-1"):
        causal_mask(-1)


@FAST
@given(st.lists(st.integers(0, 8), min_size=1, max_size=4), st.integers(0, 2**16))
def test_padding_mask_is_true_exactly_on_real_tokens(lengths, seed):
    S = max(lengths) + 1
    tokens = random_tokens(lengths, S, torch.Generator().manual_seed(seed))
    mask = padding_mask(tokens, PAD)
    assert mask.dtype == torch.bool and mask.shape == (len(lengths), 1, 1, S)
    expected = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    assert torch.equal(mask[:, 0, 0], expected)


def test_padding_mask_rejects_tokens_without_a_batch_axis():
    with pytest.raises(ValueError, match=r"\(B, S\)"):
        padding_mask(torch.tensor([3, 4, 0]), PAD)


def test_masks_combine_with_and_into_one_mask_per_sentence():
    tokens = torch.tensor([[5, 6, 7], [5, 6, PAD]])
    mask = padding_mask(tokens, PAD) & causal_mask(3)
    assert mask.shape == (2, 1, 3, 3)
    assert torch.equal(mask[0, 0], causal_mask(3))
    assert torch.equal(
        mask[1, 0], torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    )


@FAST
@given(
    st.integers(1, 3),
    st.integers(2, 8),
    st.integers(1, 3),
    st.integers(1, 4),
    st.data(),
    st.integers(0, 2**16),
)
def test_output_at_t_does_not_change_when_inputs_after_t_change(
    B, T, h, D_h, data, seed
):
    t = data.draw(st.integers(0, T - 2), label="t")
    D = h * D_h
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    x_changed = x.clone()
    x_changed[:, t + 1 :] = torch.randn(
        B, T - t - 1, D, generator=g
    )  # a different future
    mask = causal_mask(T)

    # the explicit attention: bit for bit the same
    A, _ = attention(*(split_heads(x, h),) * 3, mask)  # (B, h, T, D_h)
    A2, _ = attention(*(split_heads(x_changed, h),) * 3, mask)
    assert torch.equal(A[:, :, : t + 1], A2[:, :, : t + 1])

    torch.manual_seed(seed)
    layer = MultiHeadAttention(D, h).eval()
    with torch.no_grad():
        assert torch.equal(
            layer(x, x, x, mask, need_weights=True)[0][:, : t + 1],
            layer(x_changed, x_changed, x_changed, mask, need_weights=True)[0][
                :, : t + 1
            ],
        )
        torch.testing.assert_close(
            layer(x, x, x, mask)[:, : t + 1],
            layer(x_changed, x_changed, x_changed, mask)[:, : t + 1],
            rtol=0,
            atol=1e-6,
        )
        # without the mask the future does leak, so the check above can fail
        assert not torch.allclose(
            layer(x, x, x)[:, : t + 1],
            layer(x_changed, x_changed, x_changed)[:, : t + 1],
        )


@FAST
@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=4),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_padding_positions_receive_zero_weight(lengths, h, causal, seed):
    S = max(lengths) + 2
    g = torch.Generator().manual_seed(seed)
    tokens = random_tokens(lengths, S, g)
    mask = (
        padding_mask(tokens, PAD) & causal_mask(S)
        if causal
        else padding_mask(tokens, PAD)
    )
    D = 2 * h
    torch.manual_seed(seed)
    layer = MultiHeadAttention(D, h)
    x = torch.randn(len(lengths), S, D, generator=g)
    _, weights = layer(x, x, x, mask, need_weights=True)  # (B, h, S, S)
    is_pad_key = (tokens == PAD)[:, None, None, :].expand_as(weights)
    assert (weights[is_pad_key] == 0).all()
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(weights.shape[:-1])
    )  # real tokens take it all


@FAST
@given(st.integers(1, 6), st.integers(0, 4), st.integers(1, 3), st.integers(0, 2**16))
def test_real_positions_do_not_depend_on_how_much_padding_follows(n, extra, h, seed):
    g = torch.Generator().manual_seed(seed)
    D = 2 * h
    sentence = torch.randn(1, n, D, generator=g)
    padded = torch.cat(
        [sentence, torch.randn(1, extra, D, generator=g)], dim=1
    )  # junk where the padding is
    tokens = torch.tensor([[1] * n + [PAD] * extra])
    torch.manual_seed(seed)
    layer = MultiHeadAttention(D, h).eval()
    for need_weights in (False, True):
        with torch.no_grad():
            alone = layer(
                sentence, sentence, sentence, causal_mask(n), need_weights=need_weights
            )
            batched = layer(
                padded,
                padded,
                padded,
                padding_mask(tokens, PAD) & causal_mask(n + extra),
                need_weights=need_weights,
            )
        if need_weights:
            (alone, _), (batched, _) = alone, batched
        torch.testing.assert_close(batched[:, :n], alone, rtol=1e-5, atol=1e-6)


@FAST
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16))
def test_fully_masked_row_gives_zeros_not_nan(B, T, S, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, 1, T, S, generator=g) > 0.5
    mask[:, :, 0] = False  # query 0 of every sentence may attend to nothing
    empty = ~mask.any(-1)  # (B, 1, T)
    Q = torch.randn(B, 2, T, 4, generator=g)  # (B, h, T, D_k)
    K, V = (
        torch.randn(B, 2, S, 4, generator=g),
        torch.randn(B, 2, S, 3, generator=g),
    )  # (B, h, S, D_k), (B, h, S, D_v)
    A, weights = attention(Q, K, V, mask)
    assert not A.isnan().any() and not weights.isnan().any()
    assert (A[empty.expand(B, 2, T)] == 0).all() and (
        weights[empty.expand(B, 2, T)] == 0
    ).all()

    torch.manual_seed(seed)
    layer = MultiHeadAttention(8, 2)
    x, kv = torch.randn(B, T, 8, generator=g), torch.randn(B, S, 8, generator=g)
    for need_weights in (False, True):
        out = layer(x, kv, kv, mask, need_weights=need_weights)  # (B, T, D)
        out = out[0] if need_weights else out
        assert torch.isfinite(out).all()
        rows = empty[:, 0]  # (B, T)
        torch.testing.assert_close(
            out[rows], layer.W_o.bias.expand(int(rows.sum()), 8)
        )  # W^O applied to zeros


def test_the_notes_multiplicative_mask_leaks_and_the_minus_inf_mask_does_not():
    """The chapter's erratum as a guard: softmax(Z * M) gives future keys weight e^0 / sum; -inf gives 0."""
    torch.manual_seed(0)
    T = 5
    Z = torch.randn(T, T)
    M = causal_mask(T)
    leaky = torch.softmax(Z * M, dim=-1)
    assert (leaky[~M] > 0).all()
    torch.testing.assert_close(
        leaky[0, 1:], torch.full((T - 1,), 1 / (math.exp(Z[0, 0]) + T - 1))
    )
    right = torch.softmax(Z.masked_fill(~M, float("-inf")), dim=-1)
    assert (right[~M] == 0).all()


def test_public_names():
    assert (
        transformer.causal_mask is causal_mask
        and transformer.padding_mask is padding_mask
    )
