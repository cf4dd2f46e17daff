"""Chapter 17: tiled attention (the online softmax) and the key/value cache's size."""

import pytest
import torch

from transformer.attention import attention
from transformer.attention_cost import (
    cache_nbytes,
    kv_cache_bytes,
    largest_result,
    tiled_attention,
)
from transformer.decoding import DecoderSteps
from transformer.masking import causal_mask, padding_mask
from transformer.engine.model_config import ModelConfig, build_model
from transformer.tokenizer import BOS_ID


@pytest.mark.parametrize("block", [1, 5, 16, 31, 100])
def test_tiled_attention_equals_attention_in_float64_with_padding_causal_and_empty_rows(
    block,
):
    gen = torch.Generator().manual_seed(block)
    Q = torch.randn(2, 3, 19, 8, dtype=torch.float64, generator=gen)
    K, V = torch.randn(2, 2, 3, 31, 8, dtype=torch.float64, generator=gen).unbind(0)
    src = torch.randint(3, 9, (2, 31), generator=gen)
    src[1, 20:] = 0
    mask = padding_mask(src, 0) & torch.ones(19, 31, dtype=torch.bool).tril(
        12
    )  # (2, 1, 19, 31)
    mask = mask.expand(2, 3, 19, 31).clone()
    mask[0, 1, 4] = False  # a query that may attend to nothing
    torch.testing.assert_close(
        tiled_attention(Q, K, V, mask, block=block),
        attention(Q, K, V, mask)[0],
        rtol=0,
        atol=1e-12,
    )
    assert tiled_attention(Q, K, V, mask, block=block)[0, 1, 4].abs().max() == 0


def test_tiled_attention_without_mask_and_with_a_larger_value_width():
    Q, K = (
        torch.randn(2, 4, 10, 6, dtype=torch.float64),
        torch.randn(2, 4, 7, 6, dtype=torch.float64),
    )
    V = torch.randn(2, 4, 7, 9, dtype=torch.float64)
    torch.testing.assert_close(
        tiled_attention(Q, K, V, block=3), attention(Q, K, V)[0], rtol=0, atol=1e-12
    )


def test_tiled_attention_survives_scores_that_overflow_a_naive_softmax():
    Q, K, V = torch.randn(3, 1, 5, 4).unbind(0)
    Q = (
        Q * 1000
    )  # scores in the thousands: exp overflows float32 without the running maximum
    out = tiled_attention(Q, K, V, block=2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, attention(Q, K, V)[0], rtol=1e-4, atol=1e-4)


def test_tiled_attention_refuses_bad_blocks_and_shapes():
    Q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="at least 1"):
        tiled_attention(Q, Q, Q, block=0)
    with pytest.raises(ValueError, match="last dimensions must match"):
        tiled_attention(Q, torch.randn(1, 4, 7), torch.randn(1, 4, 8))


def test_tiled_attention_never_allocates_the_score_matrix():
    S, block = 512, 64
    Q, K, V = torch.randn(3, 1, 2, S, 32).unbind(0)
    mask = causal_mask(S)
    explicit, _ = largest_result(lambda: attention(Q, K, V, mask))
    tiled, function = largest_result(
        lambda: tiled_attention(Q, K, V, mask, block=block)
    )
    assert explicit == 2 * S * S * 4  # (B, h, S, S) float32: the scores
    # (B, h, S, D_h): the output is the largest; a tile of scores is (B, h, block, block)
    assert tiled == 2 * S * 32 * 4, function
    causal_tiles, _ = largest_result(
        lambda: tiled_attention(Q, K, V, block=block, causal=True)
    )
    assert causal_tiles == 2 * S * 32 * 4


def _grad_inputs(seed, T=9, S=13, D=4):
    gen = torch.Generator().manual_seed(seed)
    Q = torch.randn(2, 2, T, D, dtype=torch.float64, generator=gen, requires_grad=True)
    K, V = (
        torch.randn(2, 2, S, D, dtype=torch.float64, generator=gen, requires_grad=True)
        for _ in range(2)
    )
    src = torch.randint(3, 9, (2, S), generator=gen)
    src[0, S - 5 :] = 0
    pad = padding_mask(src, 0)  # (2, 1, 1, S)
    empty = pad.expand(2, 2, T, S).clone()
    empty[1, 0, 3] = False  # a query that may attend to nothing
    return Q, K, V, pad, empty


@pytest.mark.parametrize("block", [1, 4, 13])
@pytest.mark.parametrize("case", ["none", "padding", "causal", "empty", "empty+causal"])
def test_tiled_attention_gradcheck_in_float64(case, block):
    Q, K, V, pad, empty = _grad_inputs(block)
    mask = {"padding": pad, "empty": empty, "empty+causal": empty}.get(case)
    causal = "causal" in case
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, mask, block=block, causal=causal),
        (Q, K, V),
        # the full Jacobian (560 inputs, two calls each) only where one tile holds all
        # 13 keys; with several tiles a call (4 keys a block: 12 tiles; one key: 117)
        # it took 5-30 s a case, so those are checked through random projections of
        # it (gradcheck's fast mode, about 100x fewer calls)
        fast_mode=block < 13,
    )


@pytest.mark.parametrize("block", [1, 3, 4, 16])
@pytest.mark.parametrize("T, S", [(9, 13), (13, 13)])
def test_causal_tiles_equal_the_dense_causal_mask_outputs_and_gradients(block, T, S):
    Q, K, V, _, empty = _grad_inputs(block, T=T, S=S)
    dense = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    tiled = tiled_attention(Q, K, V, empty, block=block, causal=True)
    explicit = attention(Q, K, V, empty & dense)[0]
    dO = torch.randn(explicit.shape, dtype=torch.float64)
    for a, b in zip(
        (tiled, *torch.autograd.grad(tiled, (Q, K, V), dO)),
        (explicit, *torch.autograd.grad(explicit, (Q, K, V), dO)),
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_an_empty_row_gets_zero_output_and_zero_gradients():
    Q, K, V, _, empty = _grad_inputs(0)
    out = tiled_attention(Q, K, V, empty, block=4)
    out.sum().backward()
    assert out[1, 0, 3].abs().max() == 0
    assert Q.grad[1, 0, 3].abs().max() == 0
    assert torch.isfinite(K.grad).all() and torch.isfinite(V.grad).all()


def test_gradients_of_inputs_broadcast_over_the_batch():
    gen = torch.Generator().manual_seed(1)
    Q = torch.randn(3, 2, 5, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    K, V = (
        torch.randn(1, 2, 7, 4, dtype=torch.float64, generator=gen, requires_grad=True)
        for _ in range(2)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, block=3, causal=True), (Q, K, V)
    )


def test_the_forward_pass_saves_no_score_sized_tensor():
    S, block = 256, 32
    Q, K, V = (t.requires_grad_() for t in torch.randn(3, 1, 2, S, 16).unbind(0))
    sizes = []

    def pack(t):
        sizes.append(t.nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tiled_attention(Q, K, V, block=block, causal=True)
    assert max(sizes) == 2 * S * 16 * 4  # Q, K, V or O: never (S, S) nor (S, block)


@pytest.mark.parametrize("kv_heads", [0, 2, 1])
def test_the_cache_holds_what_kv_cache_bytes_says(kv_heads):
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=30,
        tgt_vocab_size=30,
        d_model=32,
        num_heads=4,
        num_encoder_layers=1,
        num_decoder_layers=2,
        d_ff=64,
        kv_heads=kv_heads,
    )
    model = build_model(config).eval()
    src = torch.randint(3, 30, (3, 11))
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        state = DecoderSteps(model, model.encode(src, src_mask), src_mask)
        ys = torch.full((3, 1), BOS_ID)
        for _ in range(5):
            ys = torch.cat([ys, state.step(ys).argmax(-1, keepdim=True)], 1)
    expected = kv_cache_bytes(config, target_len=5, source_len=11, batch=3)
    assert cache_nbytes(state.cache) == {
        k: expected[k] for k in ("self_attention", "cross_attention")
    }
    assert expected["per_token"] == 2 * 2 * (kv_heads or 4) * 8 * 4
