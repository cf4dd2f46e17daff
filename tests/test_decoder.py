"""Properties of the decoder (notebooks/07_decoder.ipynb): equal to PyTorch's, causal, reads C only where allowed."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer.decoder import Decoder, DecoderLayer
from transformer.masking import causal_mask
from transformer.cache import KVCache
from transformer.reference import copy_decoder_layer_from_torch


def key_padding(lengths: list[int], L: int) -> torch.Tensor:
    """(B, L) bool, True on padding: row b is padded after lengths[b] positions."""
    return torch.arange(L)[None, :] >= torch.tensor(lengths)[:, None]


def our_masks(
    src_pad: torch.Tensor, tgt_pad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Our convention (True = may attend) from (B, S) and (B, T) padding flags."""
    T = tgt_pad.shape[1]
    return (~src_pad)[:, None, None, :], (~tgt_pad)[:, None, None, :] & causal_mask(
        T
    )  # (B,1,1,S), (B,1,T,T)


def random_inputs(B, S, T, D, generator):
    x = torch.randn(B, T, D, generator=generator)  # (B, T, D)
    memory = torch.randn(B, S, D, generator=generator)  # (B, S, D)
    src_len = torch.randint(1, S + 1, (B,), generator=generator).tolist()
    tgt_len = torch.randint(1, T + 1, (B,), generator=generator).tolist()
    return x, memory, key_padding(src_len, S), key_padding(tgt_len, T)


@settings(max_examples=30, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 7),
    T=st.integers(1, 7),
    h=st.sampled_from([1, 2, 4]),
    D_h=st.sampled_from([2, 4, 8]),
    d_ff=st.integers(1, 24),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decoder_layer_matches_torch_transformer_decoder_layer(
    B, S, T, h, D_h, d_ff, norm_first, seed
):
    torch.manual_seed(seed)
    D = h * D_h
    ref = nn.TransformerDecoderLayer(
        D, h, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    ours = copy_decoder_layer_from_torch(
        DecoderLayer(D, h, d_ff, dropout=0.0, norm_first=norm_first), ref
    ).eval()
    x, memory, src_pad, tgt_pad = random_inputs(
        B, S, T, D, torch.Generator().manual_seed(seed)
    )
    src_mask, tgt_mask = our_masks(src_pad, tgt_pad)
    with torch.no_grad():
        expected = ref(
            x,
            memory,
            tgt_mask=~causal_mask(T),
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        got = ours(x, memory, src_mask, tgt_mask)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_torch_transformer_decoder(norm_first):
    torch.manual_seed(0)
    D, h, d_ff, N = 16, 4, 32, 3
    layer = nn.TransformerDecoderLayer(
        D, h, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerDecoder(
        layer, N, norm=nn.LayerNorm(D) if norm_first else None
    ).eval()
    for p in (
        ref.parameters()
    ):  # the stacked copies start identical; make every layer different
        nn.init.normal_(p, std=0.3)
    ours = Decoder(N, D, h, d_ff, dropout=0.0, norm_first=norm_first).eval()
    for ours_layer, ref_layer in zip(ours.layers, ref.layers, strict=True):
        copy_decoder_layer_from_torch(ours_layer, ref_layer)
    if norm_first:
        ours.norm.load_state_dict(ref.norm.state_dict())
    x, memory, src_pad, tgt_pad = random_inputs(
        2, 6, 5, D, torch.Generator().manual_seed(1)
    )
    src_mask, tgt_mask = our_masks(src_pad, tgt_pad)
    with torch.no_grad():
        expected = ref(
            x,
            memory,
            tgt_mask=~causal_mask(5),
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        got = ours(x, memory, src_mask, tgt_mask)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    T=st.integers(2, 8),
    t=st.integers(0, 6),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decoder_output_up_to_t_ignores_target_positions_after_t(
    T, t, norm_first, seed
):
    t = t % (T - 1)  # some position that has a later one
    torch.manual_seed(seed)
    dec = Decoder(2, 16, 2, 32, dropout=0.0, norm_first=norm_first).eval()
    x, memory, _, _ = random_inputs(2, 5, T, 16, torch.Generator().manual_seed(seed))
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :])
    with torch.no_grad():
        before = dec(x, memory, None, causal_mask(T))
        after = dec(changed, memory, None, causal_mask(T))
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1])
    assert not torch.allclose(
        after[:, t + 1 :], before[:, t + 1 :]
    )  # the later positions did change


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 6),
    T=st.integers(1, 6),
    layers=st.integers(1, 3),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_generating_one_position_per_call_with_the_cache_gives_the_full_outputs(
    B, S, T, layers, norm_first, seed
):
    """The cache is an optimisation: one position per call (no mask) equals all positions at once (causal mask),
    with padded sources; the self-attention cache grows by one position a call, the cross-attention's stays."""
    torch.manual_seed(seed)
    dec = Decoder(layers, 16, 4, 24, dropout=0.0, norm_first=norm_first).double().eval()
    x, memory, src_pad, _ = random_inputs(
        B, S, T, 16, torch.Generator().manual_seed(seed)
    )
    x, memory, src_mask = x.double(), memory.double(), (~src_pad)[:, None, None, :]
    cache = KVCache()
    with torch.no_grad():
        full = dec(x, memory, src_mask, causal_mask(T))  # (B, T, D)
        rows = []
        for t in range(T):
            rows.append(
                dec(x[:, t : t + 1], memory, src_mask, None, cache=cache)
            )  # (B, 1, D)
            assert cache.length == t + 1
            assert all(
                cache.entries[layer.cross_attn][0].shape[2] == S for layer in dec.layers
            )
    torch.testing.assert_close(torch.cat(rows, dim=1), full, rtol=0, atol=1e-12)


def test_the_cache_follows_selected_rows():
    """select(rows) reorders and repeats the cached rows, so a beam keeps the keys and values of its own prefix."""
    torch.manual_seed(0)
    dec = Decoder(2, 16, 4, 24, dropout=0.0).double().eval()
    x, memory, _, _ = random_inputs(3, 5, 4, 16, torch.Generator().manual_seed(1))
    x, memory = x.double(), memory.double()
    rows = torch.tensor([2, 0, 0])
    cache = KVCache()
    with torch.no_grad():
        full = dec(x[rows], memory[rows], None, causal_mask(4))
        dec(
            x[:, :2], memory, None, causal_mask(2), cache=cache
        )  # two positions of all three rows at once
        cache.select(rows)
        rest = dec(
            x[rows, 2:], memory[rows], None, causal_mask(4)[..., 2:, :], cache=cache
        )  # (3, 2, D)
    torch.testing.assert_close(rest, full[:, 2:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_output_ignores_memory_rows_at_padded_source_positions(norm_first):
    torch.manual_seed(0)
    dec = Decoder(2, 16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    x, memory, _, _ = random_inputs(2, 6, 4, 16, torch.Generator().manual_seed(0))
    src_pad = key_padding([6, 3], 6)
    src_mask = (~src_pad)[:, None, None, :]
    garbage = memory.clone()
    garbage[src_pad] = 1e3 * torch.randn_like(
        garbage[src_pad]
    )  # rewrite only the padded rows
    with torch.no_grad():
        torch.testing.assert_close(
            dec(x, garbage, src_mask, causal_mask(4)),
            dec(x, memory, src_mask, causal_mask(4)),
        )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_output_depends_on_every_real_memory_row(norm_first):
    torch.manual_seed(0)
    dec = Decoder(1, 16, 2, 32, dropout=0.0, norm_first=norm_first).eval()
    x, memory, _, _ = random_inputs(1, 4, 3, 16, torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = dec(x, memory, None, causal_mask(3))
        for s in range(4):
            changed = memory.clone()
            changed[:, s] += 1.0
            assert not torch.allclose(dec(x, changed, None, causal_mask(3)), before), (
                f"memory row {s} is not read"
            )


@settings(max_examples=25, deadline=None)
@given(S=st.integers(1, 7), norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_decoder_is_invariant_to_a_joint_permutation_of_memory_rows_and_source_mask(
    S, norm_first, seed
):
    torch.manual_seed(seed)
    dec = Decoder(2, 16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    gen = torch.Generator().manual_seed(seed)
    x, memory, src_pad, _ = random_inputs(2, S, 4, 16, gen)
    src_mask = (~src_pad)[:, None, None, :]
    perm = torch.randperm(S, generator=gen)
    with torch.no_grad():
        before = dec(x, memory, src_mask, causal_mask(4))
        after = dec(x, memory[:, perm], src_mask[..., perm], causal_mask(4))
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)


def test_cross_attention_queries_come_from_the_first_sublayer_output_and_keys_values_from_memory():
    torch.manual_seed(0)
    layer = DecoderLayer(16, 2, 32, dropout=0.0).eval()
    x, memory, _, _ = random_inputs(2, 5, 4, 16, torch.Generator().manual_seed(0))
    seen = {}
    hook = layer.cross_attn.register_forward_pre_hook(
        lambda m, args: seen.update(q=args[0], k=args[1], v=args[2])
    )
    with torch.no_grad():
        layer(x, memory, None, causal_mask(4))
        y1 = layer.norm1(x + layer.self_attn(x, x, x, causal_mask(4)))
    hook.remove()
    torch.testing.assert_close(seen["q"], y1)
    assert seen["k"] is memory and seen["v"] is memory


def test_dropout_acts_in_training_mode_only():
    torch.manual_seed(0)
    dec = Decoder(1, 16, 2, 32, dropout=0.5)
    x, memory, _, _ = random_inputs(2, 5, 4, 16, torch.Generator().manual_seed(0))
    dec.train()
    assert not torch.allclose(
        dec(x, memory, None, causal_mask(4)), dec(x, memory, None, causal_mask(4))
    )
    dec.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            dec(x, memory, None, causal_mask(4)), dec(x, memory, None, causal_mask(4))
        )


def test_decoder_needs_at_least_one_layer():
    with pytest.raises(ValueError, match="num_layers=0"):
        Decoder(0, 8, 2, 16)


def test_copy_from_torch_refuses_a_different_norm_placement():
    ref = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        copy_decoder_layer_from_torch(DecoderLayer(8, 2, 16, norm_first=False), ref)
