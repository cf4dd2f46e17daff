"""`transformer.attention`: agreement with references, masks, and the permutation properties."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.attention import attention

dims = st.integers(min_value=1, max_value=9)
shapes = st.tuples(
    st.integers(1, 3), st.integers(1, 3), dims, dims, dims, dims
)  # B, h, T, S, D_k, D_v
FAST = settings(max_examples=40, deadline=None)


def random_qkv(B, h, T, S, D_k, D_v, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, h, T, D_k, generator=g, dtype=dtype),
        torch.randn(B, h, S, D_k, generator=g, dtype=dtype),
        torch.randn(B, h, S, D_v, generator=g, dtype=dtype),
    )


def reference_attention(Q, K, V, mask=None):
    """Row by row, in float64, straight from the definition: row_i(A) = sum_r alpha(q_i, K, r) v_r."""
    Q, K, V = Q.double(), K.double(), V.double()
    *lead, T, _ = Q.shape
    out = torch.zeros(*lead, T, V.shape[-1], dtype=torch.float64)
    for i in range(T):
        z = (K @ Q[..., i, :, None]).squeeze(-1) / math.sqrt(Q.shape[-1])  # (..., S)
        if mask is not None:
            z = z.masked_fill(
                ~mask.expand(*lead, T, K.shape[-2])[..., i, :], float("-inf")
            )
        out[..., i, :] = (torch.softmax(z, -1)[..., None] * V).sum(-2)
    return out


@FAST
@given(shapes, st.integers(0, 2**16))
def test_attention_matches_float64_definition_and_fused_kernel(shape, seed):
    Q, K, V = random_qkv(*shape, seed)
    A, weights = attention(Q, K, V)
    B, h, T, S, D_k, D_v = shape
    assert A.shape == (B, h, T, D_v) and weights.shape == (B, h, T, S)
    torch.testing.assert_close(
        A.double(), reference_attention(Q, K, V), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        A, F.scaled_dot_product_attention(Q, K, V), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, T))


@FAST
@given(shapes, st.integers(0, 2**16))
def test_masked_attention_matches_fused_kernel_and_zeroes_masked_weights(shape, seed):
    Q, K, V = random_qkv(*shape, seed)
    B, h, T, S, _, _ = shape
    g = torch.Generator().manual_seed(seed + 1)
    mask = torch.rand(B, 1, T, S, generator=g) > 0.5
    mask[..., torch.randint(S, (1,), generator=g)] = True  # every query may see one key
    A, weights = attention(Q, K, V, mask)
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    torch.testing.assert_close(
        A, F.scaled_dot_product_attention(Q, K, V, attn_mask=mask), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        A.double(), reference_attention(Q, K, V, mask), rtol=1e-5, atol=1e-5
    )


@FAST
@given(shapes, st.integers(0, 2**16))
def test_attention_is_permutation_equivariant_in_queries(shape, seed):
    Q, K, V = random_qkv(*shape, seed)
    perm = torch.randperm(Q.shape[-2], generator=torch.Generator().manual_seed(seed))
    A, _ = attention(Q, K, V)
    A_perm, _ = attention(Q[..., perm, :], K, V)
    torch.testing.assert_close(A_perm, A[..., perm, :])


@FAST
@given(shapes, st.integers(0, 2**16))
def test_attention_is_invariant_to_joint_permutation_of_keys_and_values(shape, seed):
    Q, K, V = random_qkv(*shape, seed)
    perm = torch.randperm(K.shape[-2], generator=torch.Generator().manual_seed(seed))
    A, _ = attention(Q, K, V)
    A_perm, _ = attention(Q, K[..., perm, :], V[..., perm, :])
    torch.testing.assert_close(A_perm, A, rtol=1e-5, atol=1e-6)


def test_permuting_keys_without_values_changes_the_output():
    Q, K, V = random_qkv(1, 1, 4, 5, 8, 8, seed=0)
    A, _ = attention(Q, K, V)
    A_keys_only, _ = attention(Q, K[..., [1, 0, 2, 3, 4], :], V)
    assert not torch.allclose(A, A_keys_only)


def test_fully_masked_query_row_gives_zeros_not_nan():
    Q, K, V = random_qkv(2, 2, 3, 4, 5, 6, seed=0)
    mask = torch.ones(2, 2, 3, 4, dtype=torch.bool)
    mask[0, 1, 2] = False  # one query that may see nothing
    Q.requires_grad_(True)
    A, weights = attention(Q, K, V, mask)
    assert torch.isfinite(A).all() and torch.isfinite(weights).all()
    assert (A[0, 1, 2] == 0).all() and (weights[0, 1, 2] == 0).all()
    A.sum().backward()
    assert torch.isfinite(Q.grad).all()


def test_scale_is_square_root_of_key_width():
    """A single key-query pair against a zero key: the weight is sigmoid(q.k / sqrt(D_k))."""
    q = torch.full((1, 16), 0.5)
    K = torch.stack([torch.full((16,), 0.5), torch.zeros(16)])
    _, w = attention(q, K, torch.eye(2))
    expected = torch.sigmoid(q @ K[0] / 4.0)
    torch.testing.assert_close(w[0, 0], expected.squeeze())


def test_gradcheck_float64():
    Q, K, V = (
        t.requires_grad_(True)
        for t in random_qkv(1, 2, 3, 4, 5, 2, seed=3, dtype=torch.float64)
    )
    mask = torch.tensor([[True, True, False, True]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, mask)[0], (Q, K, V)
    )


def test_bad_inputs_say_what_to_do():
    Q, K, V = random_qkv(1, 1, 3, 4, 5, 6, seed=0)
    with pytest.raises(ValueError, match="last dimensions must match"):
        attention(Q[..., :4], K, V)
    with pytest.raises(ValueError, match="every key needs exactly one value"):
        attention(Q, K, V[..., :3, :])
    with pytest.raises(TypeError, match="mask.bool"):
        attention(Q, K, V, torch.ones(3, 4))
