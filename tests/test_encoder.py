"""Tests for `transformer.encoder`: the feed-forward network, the encoder layer and stack, equivalence with torch."""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer.blocks import FeedForward
from transformer.encoder import Encoder, EncoderLayer
from transformer.decoder import Decoder
from transformer.masking import padding_mask
from transformer.reference import copy_encoder_layer_from_torch

TOL = dict(rtol=1e-5, atol=1e-5)


def randomise_norms(module: nn.Module) -> nn.Module:
    """Give every LayerNorm non-trivial weights, so that a swapped norm1/norm2 cannot pass by accident."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return module


def padded_batch(
    B: int, S: int, lengths: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids with padding (id 0) after each length; returns tokens, our mask, torch's mask."""
    tokens = torch.randint(1, 20, (B, S))
    for b, length in enumerate(lengths):
        tokens[b, length:] = 0
    return tokens, padding_mask(tokens, 0), tokens == 0


def torch_encoder_and_ours(num_layers, D, h, d_ff, norm_first, dropout=0.1):
    layer = nn.TransformerEncoderLayer(
        D, h, d_ff, dropout=dropout, batch_first=True, norm_first=norm_first
    )
    ref = nn.TransformerEncoder(
        layer,
        num_layers,
        norm=nn.LayerNorm(D) if norm_first else None,
        enable_nested_tensor=False,
    )
    ref = randomise_norms(ref)
    ours = Encoder(num_layers, D, h, d_ff, dropout=dropout, norm_first=norm_first)
    for our_layer, ref_layer in zip(ours.layers, ref.layers):
        copy_encoder_layer_from_torch(our_layer, ref_layer)
    if norm_first:
        ours.norm.load_state_dict(ref.norm.state_dict())
    return ref, ours


def test_feed_forward_is_relu_of_x_w1_plus_b1_times_w2_plus_b2():
    torch.manual_seed(0)
    ffn = FeedForward(6, 24)
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    ffn = ffn.double()
    W1, b1, W2, b2 = (
        ffn.linear1.weight.T,
        ffn.linear1.bias,
        ffn.linear2.weight.T,
        ffn.linear2.bias,
    )
    torch.testing.assert_close(ffn(x), torch.clamp(x @ W1 + b1, min=0) @ W2 + b2)


@settings(max_examples=25, deadline=None)
@given(S=st.integers(1, 9), seed=st.integers(0, 1000))
def test_feed_forward_acts_on_each_position_alone(S, seed):
    torch.manual_seed(seed)
    ffn = FeedForward(8, 16)
    x = torch.randn(3, S, 8)
    perm = torch.randperm(S)
    torch.testing.assert_close(ffn(x[:, perm]), ffn(x)[:, perm])
    torch.testing.assert_close(ffn(x[:, -1:]), ffn(x)[:, -1:])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("train_mode_without_dropout", [False, True])
def test_layer_equals_torch_transformer_encoder_layer(
    norm_first, use_mask, train_mode_without_dropout
):
    """eval mode exercises torch's fused fast path; train mode with dropout=0 its plain Python path."""
    torch.manual_seed(0)
    D, h, d_ff = 24, 3, 40
    dropout = 0.0 if train_mode_without_dropout else 0.2
    ref = randomise_norms(
        nn.TransformerEncoderLayer(
            D, h, d_ff, dropout=dropout, batch_first=True, norm_first=norm_first
        )
    )
    ours = copy_encoder_layer_from_torch(
        EncoderLayer(D, h, d_ff, dropout=dropout, norm_first=norm_first), ref
    )
    ref.train(train_mode_without_dropout)
    ours.train(train_mode_without_dropout)
    _, our_mask, torch_mask = padded_batch(3, 7, [7, 4, 1])
    x = torch.randn(3, 7, D)
    got = ours(x, our_mask if use_mask else None)
    want = ref(x, src_key_padding_mask=torch_mask if use_mask else None)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_gradients_equal_torch(norm_first):
    torch.manual_seed(1)
    D, h, d_ff = 16, 4, 32
    ref = randomise_norms(
        nn.TransformerEncoderLayer(
            D, h, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
        )
    )
    ours = copy_encoder_layer_from_torch(
        EncoderLayer(D, h, d_ff, dropout=0.0, norm_first=norm_first), ref
    )
    x = torch.randn(2, 5, D)
    ours(x).square().sum().backward()
    ref(x).square().sum().backward()
    torch.testing.assert_close(
        ours.feed_forward.linear1.weight.grad, ref.linear1.weight.grad, **TOL
    )
    torch.testing.assert_close(ours.norm1.weight.grad, ref.norm1.weight.grad, **TOL)
    torch.testing.assert_close(
        ours.self_attn.W_o.weight.grad, ref.self_attn.out_proj.weight.grad, **TOL
    )


@settings(max_examples=20, deadline=None)
@given(
    num_layers=st.integers(1, 3),
    h=st.sampled_from([1, 2, 4]),
    D_h=st.integers(1, 6),
    S=st.integers(1, 8),
    norm_first=st.booleans(),
    use_mask=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_stack_equals_torch_transformer_encoder(
    num_layers, h, D_h, S, norm_first, use_mask, seed
):
    torch.manual_seed(seed)
    D = h * D_h
    ref, ours = torch_encoder_and_ours(num_layers, D, h, 2 * D, norm_first)
    ref.eval()
    ours.eval()
    lengths = torch.randint(1, S + 1, (2,)).tolist()
    _, our_mask, torch_mask = padded_batch(2, S, lengths)
    x = torch.randn(2, S, D)
    got = ours(x, our_mask if use_mask else None)
    want = ref(x, src_key_padding_mask=torch_mask if use_mask else None)
    torch.testing.assert_close(got, want, **TOL)


def test_stack_equals_torch_nested_tensor_fast_path_at_real_positions():
    torch.manual_seed(2)
    D, h, d_ff = 16, 2, 32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: nested tensors are a prototype
        ref = randomise_norms(
            nn.TransformerEncoder(
                nn.TransformerEncoderLayer(D, h, d_ff, batch_first=True), 2
            )
        ).eval()
        ours = Encoder(2, D, h, d_ff).eval()
        for our_layer, ref_layer in zip(ours.layers, ref.layers):
            copy_encoder_layer_from_torch(our_layer, ref_layer)
        tokens, our_mask, torch_mask = padded_batch(3, 6, [6, 3, 2])
        x = torch.randn(3, 6, D)
        with torch.no_grad():
            got, want = ours(x, our_mask), ref(x, src_key_padding_mask=torch_mask)
    real = tokens != 0
    torch.testing.assert_close(got[real], want[real], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_appending_padding_leaves_real_positions_unchanged(norm_first):
    torch.manual_seed(3)
    encoder = Encoder(2, 16, 4, 32, norm_first=norm_first).eval()
    x = torch.randn(1, 5, 16)
    mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    padded = torch.cat(
        [x, 100 * torch.randn(1, 3, 16)], dim=1
    )  # garbage in the padded slots
    padded_mask = torch.tensor([[[[True] * 5 + [False] * 3]]])
    torch.testing.assert_close(
        encoder(padded, padded_mask)[:, :5], encoder(x, mask), **TOL
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_is_permutation_equivariant_without_positions(norm_first):
    torch.manual_seed(4)
    encoder = Encoder(2, 16, 4, 32, norm_first=norm_first).eval()
    x = torch.randn(2, 7, 16)
    perm = torch.randperm(7)
    torch.testing.assert_close(encoder(x[:, perm]), encoder(x)[:, perm], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_eval_mode_is_deterministic_and_train_mode_applies_dropout(norm_first):
    torch.manual_seed(5)
    encoder = Encoder(2, 16, 4, 32, dropout=0.3, norm_first=norm_first)
    x = torch.randn(2, 6, 16)
    encoder.eval()
    assert torch.equal(encoder(x), encoder(x))
    encoder.train()
    assert not torch.allclose(encoder(x), encoder(x))


def test_post_norm_layer_output_is_normalised_per_position():
    torch.manual_seed(6)
    layer = EncoderLayer(
        16, 4, 32, norm_first=False
    ).eval()  # fresh LayerNorm: gamma = 1, beta = 0
    y = layer(5 * torch.randn(3, 4, 16) + 2)
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(3, 4), atol=1e-3, rtol=0
    )


def test_pre_norm_layer_keeps_the_identity_path():
    """With every sublayer's output projection zeroed, a pre-norm layer is the identity; post-norm is not."""
    torch.manual_seed(7)
    x = 3 * torch.randn(2, 5, 16) + 1
    for norm_first in (True, False):
        layer = EncoderLayer(16, 4, 32, norm_first=norm_first).eval()
        with torch.no_grad():
            for linear in (layer.self_attn.W_o, layer.feed_forward.linear2):
                linear.weight.zero_()
                linear.bias.zero_()
        assert torch.allclose(layer(x), x) == norm_first


def test_final_norm_only_in_pre_norm_stack():
    assert isinstance(Encoder(2, 8, 2, 16, norm_first=True).norm, nn.LayerNorm)
    assert isinstance(Encoder(2, 8, 2, 16, norm_first=False).norm, nn.Identity)


@settings(max_examples=25, deadline=None)
@given(
    num_layers=st.integers(1, 3),
    h=st.sampled_from([1, 2, 4]),
    D_h=st.integers(1, 5),
    B=st.integers(1, 3),
    S=st.integers(1, 8),
    norm_first=st.booleans(),
)
def test_output_has_the_shape_of_the_input(num_layers, h, D_h, B, S, norm_first):
    D = h * D_h
    encoder = Encoder(num_layers, D, h, 3 * D, norm_first=norm_first)
    assert encoder(torch.randn(B, S, D)).shape == (B, S, D)


def test_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    encoder = Encoder(2, 16, 4, 32, norm_first=True)
    out = encoder(torch.randn(2, 5, 16))
    # a random direction: the plain sum of a LayerNorm's output has no gradient at
    # all (each normalised row sums to 0), only rounding noise, which may be 0
    (out * torch.randn_like(out)).sum().backward()
    missing = [
        name
        for name, p in encoder.named_parameters()
        if p.grad is None or not p.grad.abs().sum() > 0
    ]
    assert not missing, missing


def test_weight_copy_rejects_mismatched_torch_layers_with_clear_errors():
    with pytest.raises(ValueError, match="norm_first differs"):
        copy_encoder_layer_from_torch(
            EncoderLayer(8, 2, 16, norm_first=False),
            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True),
        )
    with pytest.raises(ValueError, match="activation"):
        copy_encoder_layer_from_torch(
            EncoderLayer(8, 2, 16),
            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, activation="gelu"),
        )
    with pytest.raises(ValueError, match="d_ff differs"):
        copy_encoder_layer_from_torch(
            EncoderLayer(8, 2, 16),
            nn.TransformerEncoderLayer(8, 2, 32, batch_first=True),
        )


@pytest.mark.parametrize("stack", [Encoder, Decoder])
def test_a_stack_without_layers_is_refused_by_the_one_rule_both_stacks_share(stack):
    with pytest.raises(
        ValueError, match="num_layers=0: a stack needs at least one layer"
    ):
        stack(0, d_model=8, num_heads=2, d_ff=16)
