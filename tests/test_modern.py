"""Chapter 16's options of the block (transformer.modern) and chapter 17's grouped-query attention: each part
against its definition or PyTorch's own layer, and every variant of the model kept causal, blind to padding,
and equal with and without the decoding cache."""

import math

import pytest
import torch

from transformer.decoding import greedy_decode
from transformer.blocks import PAPER, Parts
from transformer.encoder import EncoderLayer
from transformer.model import Transformer, TransformerConfig
from transformer.engine.model_config import ModelConfig, build_model
from transformer.modern import (
    RMSNorm,
    RotaryPositions,
    SwiGLU,
    rotary_angles,
    rotary_self_attention,
    rotate,
)
from transformer.attention_cost import GroupedQueryAttention, grouped_query_parts
from transformer.cache import KVCache
from transformer.multihead import MultiHeadAttention

SMALL = dict(
    src_vocab_size=40,
    tgt_vocab_size=40,
    d_model=32,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=64,
    dropout=0.0,
    max_len=64,
)
VARIANTS = [
    {"norm": "rms"},
    {"positions": "rotary"},
    {"feed_forward": "swiglu"},
    {"bias": False},
    {"kv_heads": 2},
    {
        "norm": "rms",
        "positions": "rotary",
        "feed_forward": "swiglu",
        "bias": False,
        "kv_heads": 1,
    },
]


def test_rmsnorm_is_torchs():
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    ours, ref = RMSNorm(16).double(), torch.nn.RMSNorm(16, eps=1e-6).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


def test_a_rotary_score_depends_only_on_the_distance_between_query_and_key():
    d = 16
    angles = rotary_angles(48, d)
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    turn = lambda x: rotate(
        x.expand(48, d), angles.cos(), angles.sin()
    )  # R_m x at every position m
    scores = turn(q) @ turn(k).T  # [m, n]: query at m, key at n
    for shift in range(-20, 21):
        diagonal = torch.diagonal(scores, shift)
        assert (diagonal.max() - diagonal.min()).item() < 1e-12, shift
    assert (
        turn(q).norm(dim=-1) - q.norm()
    ).abs().max() < 1e-12  # a rotation: lengths kept


def test_rotary_uses_chapter_05s_frequencies_and_the_module_matches_the_function():
    d = 8
    theta = rotary_angles(2, d)[
        1
    ]  # position 1: the angles are the frequencies themselves
    torch.testing.assert_close(
        theta,
        torch.tensor(
            [10000 ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64
        ),
    )
    x = torch.randn(2, 3, 5, d)
    angles = rotary_angles(20, d)[7:12]  # positions 7..11
    torch.testing.assert_close(
        RotaryPositions(d, 20)(x, 7),
        rotate(x.double(), angles.cos(), angles.sin()).float(),
    )
    with pytest.raises(ValueError, match="raise max_len"):
        RotaryPositions(d, 20)(x, 18)  # positions 18..22: past the table
    rotary = RotaryPositions(d, 20)
    per_row = rotary(x, torch.tensor([7, 0]))  # row 0 from position 7, row 1 from 0
    torch.testing.assert_close(per_row[0], rotary(x[:1], 7)[0])
    torch.testing.assert_close(per_row[1], rotary(x[1:], 0)[0])
    with pytest.raises(ValueError, match="raise max_len"):
        rotary(x, torch.tensor([0, 16]))  # row 1: positions 16..20
    flat = torch.randn(2, 5, d)  # (B, L, d_head): no head axis
    torch.testing.assert_close(
        rotary(flat, torch.tensor([7, 0]))[0], rotary(flat, 7)[0]
    )
    with pytest.raises(ValueError, match="one per row"):
        rotary(x, torch.tensor([7, 0, 1]))  # three offsets for two rows


def test_a_rotary_block_with_cached_positions_and_no_offset_is_refused():
    """Its positions come from the model's decode; without them it would turn the new
    query as if it stood at position 0."""
    block = rotary_self_attention(16, 2, 0.0, max_len=8)
    cache, x = KVCache(), torch.randn(1, 1, 16)
    block(x, x, x, cache=cache, offset=0)
    block(x, x, x, cache=cache, offset=1)
    with pytest.raises(ValueError, match="pass offset="):
        block(x, x, x, cache=cache)


def test_swiglu_keeps_the_relu_networks_parameter_count_within_half_a_percent():
    from transformer.blocks import FeedForward

    relu, gated = FeedForward(256, 1024), SwiGLU(256, 1024)
    n_relu, n_gated = (sum(p.numel() for p in m.parameters()) for m in (relu, gated))
    assert abs(n_gated - n_relu) / n_relu < 0.005


def test_grouped_query_attention_with_as_many_groups_as_heads_is_multi_head_attention():
    torch.manual_seed(0)
    mha, gqa = MultiHeadAttention(32, 4), GroupedQueryAttention(32, 4, num_kv_heads=4)
    gqa.load_state_dict(mha.state_dict())
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(gqa(x, x, x), mha(x, x, x))


def _masks(B, T, S):
    """Masks of every layout the model passes: none, padding (B, 1, 1, S), causal
    (T, S), and one per head with rows that allow no key."""
    g = torch.Generator().manual_seed(3)
    per_head = torch.rand(B, 4, T, S, generator=g) > 0.5
    per_head[:, 1, 2] = False  # head 1's query 2 may attend to nothing
    padding = torch.ones(B, 1, 1, S, dtype=torch.bool)
    padding[0, ..., -2:] = False
    return {
        "none": None,
        "padding": padding,
        "causal": torch.ones(T, S, dtype=torch.bool).tril(),
        "per head": per_head,
    }


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("mask", ["none", "padding", "causal", "per head"])
def test_grouped_query_attention_is_attention_with_each_key_value_head_repeated(
    mask, need_weights
):
    """The grouped queries (no copy of K or V) compute what repeating each key/value
    head for its query heads computes, weights included."""
    torch.manual_seed(0)
    gqa, mha = GroupedQueryAttention(32, 4, num_kv_heads=2), MultiHeadAttention(32, 4)
    with torch.no_grad():
        mha.W_q.load_state_dict(gqa.W_q.state_dict())
        mha.W_o.load_state_dict(gqa.W_o.state_dict())
        for name in ("W_k", "W_v"):  # kv head j serves query heads 2j and 2j + 1
            w, b = (
                getattr(gqa, name).weight.view(2, 8, 32),
                getattr(gqa, name).bias.view(2, 8),
            )
            getattr(mha, name).weight.copy_(
                w.repeat_interleave(2, dim=0).reshape(32, 32)
            )
            getattr(mha, name).bias.copy_(b.repeat_interleave(2, dim=0).reshape(32))
    x = torch.randn(2, 5, 32)
    m = _masks(2, 5, 5)[mask]
    out = gqa(x, x, x, m, need_weights=need_weights)
    torch.testing.assert_close(out, mha(x, x, x, m, need_weights=need_weights))


def test_the_cache_of_grouped_query_attention_holds_only_its_key_value_heads():
    attn, cache = GroupedQueryAttention(32, 4, num_kv_heads=1), KVCache()
    for _ in range(3):
        x = torch.randn(2, 1, 32)
        attn(x, x, x, cache=cache)
    assert cache.entries[attn][0].shape == (
        2,
        1,
        3,
        8,
    )  # (B, h_kv, L, D_h): a quarter of multi-head attention's


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary"])
def test_grouped_query_attention_is_in_the_decoders_two_attentions_only(positions):
    model = build_model(ModelConfig(**SMALL, kv_heads=1, positions=positions))
    for layer in model.encoder.layers:  # nothing is cached there: all h heads
        assert type(layer.self_attn) is MultiHeadAttention
    for layer in model.decoder.layers:
        assert layer.self_attn.num_kv_heads == layer.cross_attn.num_kv_heads == 1
        assert (layer.self_attn.rotary is None) == (positions == "sinusoidal")
        assert layer.cross_attn.rotary is None


def test_num_kv_heads_must_divide_the_heads():
    with pytest.raises(ValueError, match="must divide"):
        GroupedQueryAttention(32, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="kv_heads"):
        ModelConfig(**SMALL, kv_heads=3)


def test_chapter_08s_config_knows_only_the_papers_settings_and_the_choices_are_the_literals():
    with pytest.raises(TypeError):
        TransformerConfig(
            **SMALL, norm="rms"
        )  # chapter 16's settings live in chapter 16's config
    with pytest.raises(ValueError, match=r"must be one of \['relu', 'swiglu'\]"):
        ModelConfig(**SMALL, feed_forward="gelu")


def test_the_paper_config_builds_the_very_model_of_chapter_08_draw_for_draw():
    torch.manual_seed(0)
    paper = Transformer(TransformerConfig(**SMALL))
    torch.manual_seed(0)
    built = build_model(ModelConfig(**SMALL))
    assert paper.state_dict().keys() == built.state_dict().keys()
    assert all(
        torch.equal(a, b)
        for a, b in zip(paper.state_dict().values(), built.state_dict().values())
    )


def test_a_layer_is_made_of_the_parts_it_is_given_and_nothing_reaches_into_it_afterwards():
    parts = grouped_query_parts(
        2,
        norm="rms",
        positions="rotary",
        feed_forward="swiglu",
        bias=False,
        max_len=512,
    )
    layer = EncoderLayer(32, 4, 64, parts=parts)
    assert isinstance(layer.norm1, RMSNorm) and isinstance(layer.feed_forward, SwiGLU)
    # an encoder layer: all heads (grouped-query attention is the decoder's)
    assert (
        isinstance(layer.self_attn.rotary, RotaryPositions)
        and type(layer.self_attn) is MultiHeadAttention
    )
    assert (
        type(EncoderLayer(32, 4, 64).norm1) is torch.nn.LayerNorm and PAPER == Parts()
    )

    model = build_model(ModelConfig(**SMALL, positions="rotary"))
    rotaries = [
        layer.self_attn.rotary
        for layer in (*model.encoder.layers, *model.decoder.layers)
    ]
    assert all(isinstance(r, RotaryPositions) for r in rotaries) and len(
        {id(r) for r in rotaries}
    ) == len(rotaries)
    assert all(
        layer.cross_attn.rotary is None for layer in model.decoder.layers
    )  # no distance from target to source


@pytest.mark.parametrize(
    "options", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_every_variant_is_causal_blind_to_padding_and_decodes_the_same_with_the_cache(
    options,
):
    torch.manual_seed(0)
    model = build_model(ModelConfig(**SMALL, **options)).double().eval()
    if options.get("bias") is False:
        assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    src = torch.randint(4, 40, (2, 7))
    tgt = torch.randint(4, 40, (2, 6))
    tgt[:, 0] = 2
    with torch.no_grad():
        out = model(src, tgt)
        changed = tgt.clone()
        changed[:, 4:] = 5  # later target tokens must not change earlier outputs
        torch.testing.assert_close(
            model(src, changed)[:, :4], out[:, :4], rtol=0, atol=1e-10
        )
        padded = torch.cat(
            [src, torch.zeros(2, 3, dtype=torch.long)], dim=1
        )  # padding must change nothing
        torch.testing.assert_close(model(padded, tgt), out, rtol=0, atol=1e-10)
    cached, full = (
        greedy_decode(model, src, use_cache=True),
        greedy_decode(model, src, use_cache=False),
    )
    assert [h.tokens for h in cached] == [h.tokens for h in full]
    assert all(
        math.isclose(a.log_prob, b.log_prob, abs_tol=1e-9) for a, b in zip(cached, full)
    )
