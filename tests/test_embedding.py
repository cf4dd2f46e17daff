"""Tests for `transformer.embedding`: the sinusoidal table, the scaled token embedding, the module."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.embedding import (
    PositionalEncoding,
    TokenEmbedding,
    sinusoidal_positional_encoding,
)

FLOAT32_ROUNDING = (
    2**-25 + 1e-12
)  # the largest rounding error of a float32 value in [-1, 1]


def reference_table(max_len: int, d_model: int) -> torch.Tensor:
    """The formula entry by entry with Python's math module, in float64."""
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, 2 * i], table[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


def reference_row(pos: int, d_model: int) -> torch.Tensor:
    """One row of the formula, in float64."""
    row = torch.empty(d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = pos / 10000 ** (2 * i / d_model)
        row[2 * i], row[2 * i + 1] = math.sin(angle), math.cos(angle)
    return row


def shift_matrix(k: int, d_model: int) -> torch.Tensor:
    """M_k: block-diagonal 2x2 rotations by omega_i * k, built independently of the notebook."""
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        theta = k / 10000 ** (2 * i / d_model)
        c, s = math.cos(theta), math.sin(theta)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
    return M


even_widths = st.integers(1, 40).map(lambda n: 2 * n)


@settings(max_examples=30, deadline=None)
@given(max_len=st.integers(0, 80), d_model=even_widths)
def test_table_matches_float64_formula_to_float32_rounding(max_len, d_model):
    ours = sinusoidal_positional_encoding(max_len, d_model)
    assert ours.shape == (max_len, d_model) and ours.dtype == torch.float32
    torch.testing.assert_close(
        ours.double(), reference_table(max_len, d_model), rtol=0, atol=FLOAT32_ROUNDING
    )


def test_table_stays_exact_at_long_positions():
    positions = [0, 1, 999, 4096, 19999]
    ours = sinusoidal_positional_encoding(20000, 64)[positions].double()
    expected = torch.stack([reference_row(p, 64) for p in positions])
    torch.testing.assert_close(ours, expected, rtol=0, atol=FLOAT32_ROUNDING)


@pytest.mark.parametrize("d_model", [1, 7, 513, 0, -4])
def test_odd_or_nonpositive_d_model_is_rejected_with_a_clear_error(d_model):
    with pytest.raises(
        ValueError, match=f"d_model={d_model} must be a positive even number"
    ):
        sinusoidal_positional_encoding(10, d_model)


def test_negative_max_len_is_rejected():
    with pytest.raises(ValueError, match="max_len=-1"):
        sinusoidal_positional_encoding(-1, 8)


@settings(max_examples=30, deadline=None)
@given(d_model=even_widths)
def test_every_row_has_norm_sqrt_half_d(d_model):
    norms = sinusoidal_positional_encoding(300, d_model).double().norm(dim=1)
    torch.testing.assert_close(norms, torch.full_like(norms, math.sqrt(d_model / 2)))


def test_longer_table_starts_with_the_shorter_one_bit_for_bit():
    assert torch.equal(
        sinusoidal_positional_encoding(3000, 32)[:70],
        sinusoidal_positional_encoding(70, 32),
    )


def test_no_two_positions_share_an_encoding():
    pe = sinusoidal_positional_encoding(3000, 32).double()
    dist = torch.cdist(pe, pe)
    dist.fill_diagonal_(float("inf"))
    assert dist.min() > 0.5


def test_dot_product_depends_only_on_the_distance_between_positions():
    pe = reference_table(100, 48)
    dots = pe @ pe.T  # (100, 100)
    for k in range(100):
        diagonal = torch.diagonal(dots, offset=k)
        torch.testing.assert_close(
            diagonal, torch.full_like(diagonal, diagonal[0].item())
        )
    torch.testing.assert_close(dots, dots.T)


@settings(max_examples=40, deadline=None)
@given(d_model=even_widths, pos=st.integers(0, 2000), k=st.integers(-500, 500))
def test_shift_by_k_is_a_block_rotation_independent_of_position(d_model, pos, k):
    if pos + k < 0:
        k = -pos
    torch.testing.assert_close(
        shift_matrix(k, d_model) @ reference_row(pos, d_model),
        reference_row(pos + k, d_model),
        rtol=0,
        atol=1e-9,
    )


def test_shift_matrix_applies_to_the_float32_table_within_rounding():
    pe = sinusoidal_positional_encoding(200, 64).double()
    torch.testing.assert_close(
        pe[13:], pe[:-13] @ shift_matrix(13, 64).T, rtol=0, atol=1e-6
    )


def test_the_notes_single_frequency_identity_fails_beyond_the_first_pair():
    """sin(pos+k) = sin(pos)cos(k) + cos(pos)sin(k) uses angle k in every pair: right only for omega_0 = 1."""
    d_model, pos, k = 16, 10, 5
    c, s = math.cos(k), math.sin(k)
    notes = torch.block_diag(
        *[torch.tensor([[c, s], [-s, c]], dtype=torch.float64)] * (d_model // 2)
    )
    err = (
        (notes @ reference_row(pos, d_model) - reference_row(pos + k, d_model))
        .abs()
        .view(-1, 2)
        .amax(1)
    )
    assert err[0] < 1e-12 and err[1:].min() > 1e-2


def test_token_embedding_is_the_table_row_times_sqrt_d():
    torch.manual_seed(0)
    emb = TokenEmbedding(50, 12)
    tokens = torch.randint(0, 50, (3, 7))
    torch.testing.assert_close(emb(tokens), emb.weight[tokens] * math.sqrt(12))
    assert emb(tokens).shape == (3, 7, 12)


def test_padding_row_never_receives_gradient():
    emb = TokenEmbedding(20, 8, pad_id=3)
    emb(torch.tensor([[3, 5, 3, 3]])).pow(2).sum().backward()
    assert torch.all(emb.weight.grad[3] == 0)
    assert torch.any(emb.weight.grad[5] != 0)


def test_weight_property_is_the_embedding_parameter():
    emb = TokenEmbedding(20, 8)
    assert emb.weight is emb.embedding.weight


def test_positional_encoding_adds_the_table_in_eval_mode():
    module = PositionalEncoding(16, max_len=40, dropout=0.5).eval()
    x = torch.randn(2, 9, 16)
    torch.testing.assert_close(module(x), x + sinusoidal_positional_encoding(9, 16))
    assert torch.equal(module(x), module(x))


def test_positional_encoding_dropout_acts_in_training_mode():
    torch.manual_seed(0)
    module = PositionalEncoding(16, max_len=40, dropout=0.5).train()
    y = module(torch.randn(4, 30, 16))
    assert 0.3 < (y == 0).float().mean().item() < 0.7


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 20), cut=st.integers(0, 20))
def test_feeding_in_pieces_with_offsets_equals_feeding_whole(L, cut):
    cut = min(cut, L)
    module = PositionalEncoding(8, max_len=20)
    x = torch.randn(2, L, 8)
    pieces = [module(x[:, :cut], offset=0)] + [
        module(x[:, t : t + 1], offset=t) for t in range(cut, L)
    ]
    assert torch.equal(torch.cat(pieces, dim=1), module(x))


def test_positional_encoding_rejects_positions_past_max_len_and_negative_offsets():
    module = PositionalEncoding(8, max_len=10)
    module(torch.randn(1, 10, 8))  # exactly max_len fits
    with pytest.raises(ValueError, match="raise max_len"):
        module(torch.randn(1, 11, 8))
    with pytest.raises(ValueError, match="raise max_len"):
        module(torch.randn(1, 3, 8), offset=8)
    with pytest.raises(ValueError, match="offset=-1"):
        module(torch.randn(1, 3, 8), offset=-1)


def test_table_is_a_buffer_that_follows_dtype_but_is_not_checkpointed():
    module = PositionalEncoding(8, max_len=10)
    assert "pe" not in module.state_dict()
    PositionalEncoding(8, max_len=1000).load_state_dict(
        module.state_dict()
    )  # a longer table loads the same checkpoint
    assert module.to(torch.float64).pe.dtype == torch.float64
