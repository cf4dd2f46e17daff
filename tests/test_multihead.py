"""`transformer.multihead`: equal to `torch.nn.MultiheadAttention`, both paths agree, the head split is right."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer
from transformer.attention import attention
from transformer.multihead import (
    MultiHeadAttention,
    merge_heads,
    split_heads,
)
from transformer.reference import copy_weights_from_torch

FAST = settings(max_examples=30, deadline=None)
# B, T, S, h, D_h
shapes = st.tuples(
    st.integers(1, 3),
    st.integers(1, 7),
    st.integers(1, 7),
    st.integers(1, 4),
    st.integers(1, 5),
)
mask_kinds = st.sampled_from(["none", "causal", "padding", "random"])


def make_pair(D, h, seed, bias=True):
    """A torch layer and ours with the same parameters, both in eval mode."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, h, bias=bias, batch_first=True).eval()
    ours = copy_weights_from_torch(MultiHeadAttention(D, h, bias=bias), ref).eval()
    return ours, ref


def make_mask(kind, B, T, S, g):
    """Our mask (True = may attend) and torch's keyword arguments (True = may NOT attend).

    Every query keeps at least one key: torch's layer gives NaN for a query with none.
    """
    if kind == "none":
        return None, {}
    if (
        kind == "causal"
    ):  # query t sees keys 0..t (+ S - T when S > T, as when keys include a prefix)
        mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=max(S - T, 0))
        return mask, {"attn_mask": ~mask}
    if kind == "padding":
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        keep = torch.arange(S)[None, :] < lengths[:, None]  # (B, S)
        return keep[:, None, None, :], {"key_padding_mask": ~keep}
    mask = torch.rand(B, 1, T, S, generator=g) > 0.5
    mask[..., torch.randint(S, (1,), generator=g)] = True
    return mask, {"attn_mask": ~mask}  # (B, 1, T, S): the test reshapes it for torch


@FAST
@given(shapes, mask_kinds, st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_matches_torch_multihead_attention_on_random_shapes(
    shape, kind, cross, bias, seed
):
    B, T, S, h, D_h = shape
    if not cross:
        S = T
    D = h * D_h
    ours, ref = make_pair(D, h, seed, bias)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, D, generator=g)
    kv = torch.randn(B, S, D, generator=g) if cross else x
    mask, torch_kwargs = make_mask(kind, B, T, S, g)
    if (
        "attn_mask" in torch_kwargs and torch_kwargs["attn_mask"].dim() == 4
    ):  # torch wants (B*h, T, S)
        torch_kwargs["attn_mask"] = (
            torch_kwargs["attn_mask"].expand(B, h, T, S).reshape(B * h, T, S)
        )
    with torch.no_grad():
        expected, expected_w = ref(
            x, kv, kv, average_attn_weights=False, **torch_kwargs
        )
        fused = ours(x, kv, kv, mask)
        explicit, weights = ours(x, kv, kv, mask, need_weights=True)
    assert fused.shape == (B, T, D)
    torch.testing.assert_close(fused, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(explicit, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights, expected_w, rtol=1e-4, atol=1e-5)


@FAST
@given(shapes, st.integers(0, 2**16))
def test_per_head_projections_equal_one_projection_then_split(shape, seed):
    """Head i computed from its own slice of W^Q, W^K, W^V equals head i of the layer's batched computation."""
    B, T, S, h, D_h = shape
    D = h * D_h
    torch.manual_seed(seed)
    layer = MultiHeadAttention(D, h).eval()
    x, kv = torch.randn(B, T, D), torch.randn(B, S, D)
    with torch.no_grad():
        _, weights = layer(x, kv, kv, need_weights=True)
        heads = []
        for i in range(h):
            rows = slice(
                i * D_h, (i + 1) * D_h
            )  # head i's rows of (W^Q)^T, (W^K)^T, (W^V)^T
            q = x @ layer.W_q.weight[rows].T + layer.W_q.bias[rows]  # (B, T, D_h)
            k = kv @ layer.W_k.weight[rows].T + layer.W_k.bias[rows]  # (B, S, D_h)
            v = kv @ layer.W_v.weight[rows].T + layer.W_v.bias[rows]  # (B, S, D_h)
            H_i, w_i = attention(q, k, v)
            torch.testing.assert_close(w_i, weights[:, i])
            heads.append(H_i)
        concat = torch.cat(heads, dim=-1)  # (B, T, D)
        torch.testing.assert_close(
            layer.W_o(concat), layer(x, kv, kv), rtol=1e-4, atol=1e-5
        )


@FAST
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(1, 5))
def test_split_heads_gives_head_i_feature_block_i_and_merge_inverts_it(B, L, h, D_h):
    x = torch.randn(B, L, h * D_h)
    heads = split_heads(x, h)
    assert heads.shape == (B, h, L, D_h)
    for i in range(h):
        assert torch.equal(heads[:, i], x[..., i * D_h : (i + 1) * D_h])
    assert torch.equal(merge_heads(heads), x)


def test_fused_and_explicit_paths_agree_with_dropout_off():
    torch.manual_seed(0)
    layer = MultiHeadAttention(12, 3, dropout=0.5).eval()  # eval: dropout off
    x, kv = torch.randn(2, 4, 12), torch.randn(2, 6, 12)
    mask = torch.rand(2, 1, 4, 6) > 0.3
    with torch.no_grad():
        torch.testing.assert_close(
            layer(x, kv, kv, mask), layer(x, kv, kv, mask, need_weights=True)[0]
        )
        assert torch.equal(layer(x, kv, kv, mask), layer(x, kv, kv, mask))


def test_dropout_changes_outputs_only_in_training_mode():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 5, 8)
    layer.train()
    assert not torch.equal(layer(x, x, x), layer(x, x, x))
    assert not torch.equal(
        layer(x, x, x, need_weights=True)[0], layer(x, x, x, need_weights=True)[0]
    )
    layer.eval()
    assert torch.equal(layer(x, x, x), layer(x, x, x))


def test_weights_are_returned_when_asked_for_and_never_kept_on_the_layer():
    layer = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    before = set(vars(layer))
    out, weights = layer(x, x, x, need_weights=True)
    assert out.shape == (1, 3, 8) and weights.shape == (1, 2, 3, 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 3))
    assert isinstance(layer(x, x, x), torch.Tensor)  # the default: the output alone
    assert set(vars(layer)) == before  # nothing parked on the module
    with pytest.raises(TypeError):
        layer(x, x, x, None, True)  # need_weights is a keyword: no positional slip


@pytest.mark.parametrize("need_weights", [False, True])
def test_gradcheck_in_float64_with_a_padding_mask(need_weights):
    torch.manual_seed(0)
    layer = MultiHeadAttention(4, 2).double()
    q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])[:, None, None, :]
    assert torch.autograd.gradcheck(
        lambda q, k, v: layer(q, k, v, mask, need_weights=need_weights), (q, k, v)
    )
    names = [n for n, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    assert torch.autograd.gradcheck(
        lambda *ps: torch.func.functional_call(
            layer,
            dict(zip(names, ps)),
            (q.detach(), k.detach(), v.detach(), mask),
            {"need_weights": need_weights},
        ),
        params,
    )


@pytest.mark.parametrize("need_weights", [False, True])
def test_query_with_no_allowed_key_gets_zero_attention_not_nan(need_weights):
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8, requires_grad=True)
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[2] = False  # query 2 may see nothing
    out = layer(x, x, x, mask, need_weights=need_weights)
    out = out[0] if need_weights else out
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out[0, 2], layer.W_o.bias
    )  # zero attention output, then W^O: only the bias
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_bad_arguments_raise_errors_that_name_the_numbers():
    """The layer is a mechanism, not a door: it keeps the model's one size rule
    (head_width) and refuses the mask that would otherwise fail silently (a raise, which
    python -O keeps, unlike an assert)."""
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4"):
        MultiHeadAttention(10, 4)
    layer = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    # (B, T, S) with B = h = 2 would broadcast as (h, T, S): refused
    with pytest.raises(ValueError, match=r"mask\[:, None\]"):
        layer(x, x, x, torch.ones(2, 3, 3, dtype=torch.bool))
    one = torch.tril(torch.ones(1, 3, 3, dtype=torch.bool))  # (1, T, S) broadcasts
    torch.testing.assert_close(layer(x, x, x, one), layer(x, x, x, one[:, None]))
    with pytest.raises(ValueError, match="shapes differ"):
        copy_weights_from_torch(layer, nn.MultiheadAttention(8, 4))
    with pytest.raises(ValueError, match="bias differs"):
        copy_weights_from_torch(layer, nn.MultiheadAttention(8, 2, bias=False))


def test_public_names():
    assert transformer.MultiHeadAttention is MultiHeadAttention
