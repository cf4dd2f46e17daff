"""Properties of the assembled model (notebooks/08_transformer.ipynb): config, masks built from pad_id, tying, learning."""

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.engine.config import parse_model_config
from transformer.engine.model_config import ModelConfig
from transformer.errors import ConfigError, InputError, InputTypeError
from transformer.model import Transformer, TransformerConfig, closed_form, evaluating

PAD, BOS, EOS = 0, 1, 2


@st.composite
def configs(draw, **overrides):
    """Small valid configurations, every switch varied."""
    h = draw(st.sampled_from([1, 2, 4]))
    D = h * draw(st.sampled_from([2, 4, 8]))
    share = draw(st.booleans())
    V_src = draw(st.integers(4, 40))
    V_tgt = V_src if share else draw(st.integers(4, 40))
    fields = dict(
        src_vocab_size=V_src,
        tgt_vocab_size=V_tgt,
        d_model=D,
        num_heads=h,
        num_encoder_layers=draw(st.integers(1, 2)),
        num_decoder_layers=draw(st.integers(1, 2)),
        d_ff=draw(st.integers(1, 32)),
        dropout=draw(st.sampled_from([0.0, 0.1])),
        max_len=16,
        pad_id=draw(st.integers(0, 3)),
        norm_first=draw(st.booleans()),
        tie_target_embeddings=draw(st.booleans()),
        share_embeddings=share,
    )
    fields.update(overrides)
    return TransformerConfig(**fields)


def random_ids(B, L, vocab_size, pad_id, lengths, generator):
    """(B, L) ids avoiding pad_id, padded after lengths[b]."""
    ids = torch.randint(0, vocab_size - 1, (B, L), generator=generator)
    ids = ids + (ids >= pad_id).long()  # skip the pad id
    ids[torch.arange(L)[None, :] >= torch.tensor(lengths)[:, None]] = pad_id
    return ids


def tiny(**overrides) -> TransformerConfig:
    fields = dict(
        src_vocab_size=11,
        tgt_vocab_size=13,
        d_model=16,
        num_heads=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.1,
        max_len=32,
    )
    return TransformerConfig(**{**fields, **overrides})


# --- configuration ----------------------------------------------------------------------------------


def checked(config: TransformerConfig) -> ModelConfig:
    """The engine's config of the same settings, checked as a user's would be."""
    return ModelConfig(**dataclasses.asdict(config))


@settings(max_examples=50, deadline=None)
@given(config=configs())
def test_config_survives_a_json_round_trip(config):
    model_config = checked(config)
    assert parse_model_config(json.loads(model_config.to_json())) == model_config
    assert parse_model_config(model_config.to_dict()) == model_config


def test_the_chapter_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny().d_model = 64


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(src_vocab_size=0), InputError, r"src_vocab_size=0\): must be >= 1"),
        (dict(d_model="64"), InputTypeError, r"d_model='64'\): a str, not a whole"),
        (dict(d_ff=128.0), InputTypeError, r"d_ff=128.0\): a float, not a whole"),
        (dict(num_heads=True), InputTypeError, r"num_heads=True\): a bool"),
        (
            dict(num_decoder_layers=0),
            InputError,
            r"num_decoder_layers=0\): must be >= 1",
        ),
        (dict(num_encoder_layers=-1), InputError, r"must be >= 0"),
        (dict(dropout=-0.1), InputError, r"dropout=-0.1\): must be a probability"),
        (dict(dropout="0.1"), InputTypeError, r"dropout='0.1'\): give a float"),
        (dict(norm_first="no"), InputTypeError, r"norm_first='no': True or False"),
        (dict(num_heads=3), InputError, r"d_model=16 is not divisible by num_heads=3"),
        (dict(pad_id=11), InputError, r"pad_id=11 is not a token id of both"),
        (dict(share_embeddings=True), InputError, r"needs one shared vocabulary"),
    ],
)
def test_the_chapter_config_refuses_sizes_no_model_can_have_when_it_is_made(
    change, error, message
):
    with pytest.raises(error, match=message):
        tiny(**change)


def test_a_model_too_large_for_the_memory_is_refused_when_built_not_when_described():
    with torch.device("meta"):  # described where nothing is weighed
        huge = tiny(
            src_vocab_size=10**9, tgt_vocab_size=10**9, d_model=512, num_heads=8
        )
    with pytest.raises(
        InputError,
        match=r"needs about [\d,.]+ GB, but cpu memory has [\d,.]+ [GM]B available: lower",
    ):
        Transformer(huge)


def test_a_config_too_large_for_memory_is_still_a_shape_on_the_meta_device():
    with torch.device("meta"):
        model = Transformer(tiny(src_vocab_size=10**9, d_model=512, num_heads=8))
    assert model.src_embed.embedding.weight.shape == (10**9, 512)


def test_config_from_dict_rejects_unknown_keys_and_names_them():
    d = {**checked(tiny()).to_dict(), "num_head": 4, "layers": 2}
    with pytest.raises(ConfigError, match=r"\['layers', 'num_head'\]"):
        parse_model_config(d)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_heads=3), "divisible by num_heads"),
        (dict(d_model=6, num_heads=2), "ok"),  # valid: control case
        (dict(d_model=14, num_heads=7), "ok"),
        (dict(d_model=9, num_heads=3), "must be a positive even number"),
        (dict(pad_id=11), "pad_id=11"),
        (dict(pad_id=-1), "pad_id=-1"),
        (dict(dropout=1.0), "dropout"),
        (dict(d_model=0), "d_model=0"),
        (dict(num_decoder_layers=0), "num_decoder_layers=0"),
        (dict(share_embeddings=True), "shared vocabulary"),
    ],
)
def test_the_engine_config_rejects_inconsistent_values_with_a_message(
    overrides, message
):
    fields = {**dataclasses.asdict(tiny()), **overrides}
    if message == "ok":
        ModelConfig(**fields)
        return
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**fields)


# --- shapes and masks ----------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    config=configs(),
    B=st.integers(1, 3),
    S=st.integers(1, 8),
    T=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_shapes_of_encode_decode_and_forward_over_random_configs(config, B, S, T, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = Transformer(config).eval()
    src = random_ids(B, S, config.src_vocab_size, config.pad_id, [S] * B, gen)
    tgt = random_ids(B, T, config.tgt_vocab_size, config.pad_id, [T] * B, gen)
    src_mask, tgt_mask = model.make_src_mask(src), model.make_tgt_mask(tgt)
    assert src_mask.shape == (B, 1, 1, S) and tgt_mask.shape == (B, 1, T, T)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        decoded = model.decode(tgt, memory, src_mask, tgt_mask)
        logits = model(src, tgt)
    assert memory.shape == (B, S, config.d_model)
    assert decoded.shape == (B, T, config.d_model)
    assert logits.shape == (B, T, config.tgt_vocab_size)
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits, model.generator(decoded))


def test_forward_rejects_source_and_target_batches_of_different_sizes():
    model = Transformer(tiny())
    with pytest.raises(ValueError, match="same B"):
        model(torch.ones(2, 5, dtype=torch.long), torch.ones(3, 4, dtype=torch.long))


def test_target_mask_is_causal_and_hides_target_padding():
    model = Transformer(tiny())
    tgt = torch.tensor([[1, 5, 6, 0]])
    mask = model.make_tgt_mask(tgt)[0, 0]  # (T, T)
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool
    )
    assert torch.equal(mask, expected)


@settings(max_examples=30, deadline=None)
@given(
    config=configs(dropout=0.1),
    T=st.integers(2, 8),
    t=st.integers(0, 6),
    seed=st.integers(0, 2**16),
)
def test_logits_up_to_t_do_not_change_when_target_tokens_after_t_change(
    config, T, t, seed
):
    t = t % (T - 1)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = Transformer(config).eval()  # eval: dropout off, so any difference is a leak
    src = random_ids(2, 5, config.src_vocab_size, config.pad_id, [5, 3], gen)
    tgt = random_ids(2, T, config.tgt_vocab_size, config.pad_id, [T, T], gen)
    changed = tgt.clone()
    changed[:, t + 1 :] = random_ids(
        2, T - t - 1, config.tgt_vocab_size, config.pad_id, [T, T], gen
    )
    with torch.no_grad():
        before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1])


@settings(max_examples=30, deadline=None)
@given(config=configs(), extra=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_appending_padding_to_the_source_changes_no_logit(config, extra, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    # float64: the property is exact, and float32's rounding (which the kernels' blocking changes with the
    # number of keys) can exceed any fixed tolerance at widths as small as d_model=2
    model = Transformer(config).double().eval()
    src = random_ids(3, 6, config.src_vocab_size, config.pad_id, [6, 4, 1], gen)
    tgt = random_ids(3, 5, config.tgt_vocab_size, config.pad_id, [5, 5, 2], gen)
    longer = torch.cat([src, torch.full((3, extra), config.pad_id)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(
            model(longer, tgt), model(src, tgt), rtol=1e-9, atol=1e-10
        )


@settings(max_examples=25, deadline=None)
@given(config=configs(), extra=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_appending_padding_to_the_target_changes_no_logit_at_the_real_positions(
    config, extra, seed
):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = Transformer(config).double().eval()  # float64, as for the source above
    src = random_ids(2, 6, config.src_vocab_size, config.pad_id, [6, 2], gen)
    tgt = random_ids(2, 4, config.tgt_vocab_size, config.pad_id, [4, 4], gen)
    longer = torch.cat([tgt, torch.full((2, extra), config.pad_id)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(
            model(src, longer)[:, :4], model(src, tgt), rtol=1e-9, atol=1e-10
        )


# --- tying, initialisation, parameter count ----------------------------------------------------------


def test_tied_generator_weight_is_the_target_embedding_parameter():
    model = Transformer(tiny(tie_target_embeddings=True))
    assert model.generator.weight is model.tgt_embed.embedding.weight
    # one tensor: it is listed once, and a gradient step through either use moves both
    assert sum(p is model.generator.weight for p in model.parameters()) == 1
    src, tgt = torch.tensor([[3, 4, 5]]), torch.tensor([[1, 6, 7]])
    F.cross_entropy(model(src, tgt).flatten(0, 1), torch.tensor([6, 7, 2])).backward()
    before = model.tgt_embed.embedding.weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert not torch.equal(model.tgt_embed.embedding.weight, before)
    assert torch.equal(model.generator.weight, model.tgt_embed.embedding.weight)


def test_untied_generator_has_its_own_weight():
    model = Transformer(tiny(tie_target_embeddings=False))
    assert model.generator.weight is not model.tgt_embed.embedding.weight
    assert (
        model.generator.weight.data_ptr() != model.tgt_embed.embedding.weight.data_ptr()
    )


def test_shared_embeddings_use_one_module_for_source_target_and_generator():
    model = Transformer(tiny(tgt_vocab_size=11, share_embeddings=True))
    assert model.src_embed is model.tgt_embed
    assert model.generator.weight is model.src_embed.embedding.weight
    counts = model.count_parameters()
    assert (
        counts["tgt_embed"] == 0 and counts["generator"] == 11
    )  # only the bias is new


@settings(max_examples=30, deadline=None)
@given(config=configs())
def test_count_parameters_counts_every_tensor_once(config):
    model = Transformer(config)
    counts = model.count_parameters()
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] == sum(n for part, n in counts.items() if part != "total")
    assert counts["positional"] == 0
    assert counts == closed_form(config)  # the count the config's door weighs


def test_paper_base_model_with_shared_37000_vocabulary_has_63_1_million_parameters():
    base = TransformerConfig(
        src_vocab_size=37000, tgt_vocab_size=37000, share_embeddings=True
    )
    with torch.device("meta"):  # shapes only, no memory
        counts = Transformer(base).count_parameters()
    D, d_ff, V = 512, 2048, 37000
    attn, ffn, norm = 4 * (D * D + D), 2 * D * d_ff + d_ff + D, 2 * D
    assert counts["encoder"] == 6 * (attn + ffn + 2 * norm)
    assert counts["decoder"] == 6 * (2 * attn + ffn + 3 * norm)
    assert counts["src_embed"] == V * D and counts["generator"] == V
    assert counts["total"] == 63_119_496
    assert abs(counts["total"] - 65e6) / 65e6 < 0.03  # the paper's "65 x 10^6"


def test_matrices_start_within_the_xavier_bound_and_padding_rows_at_zero():
    model = Transformer(tiny(pad_id=3, tie_target_embeddings=False))
    for name, p in model.named_parameters():
        if p.dim() == 2:
            fan_out, fan_in = p.shape
            assert p.abs().max() <= math.sqrt(6 / (fan_in + fan_out)) + 1e-6, name
    assert (model.src_embed.embedding.weight[3] == 0).all()
    assert (model.tgt_embed.embedding.weight[3] == 0).all()


def test_a_model_rebuilt_from_json_and_state_dict_gives_the_same_logits():
    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    saved = json.dumps(dataclasses.asdict(model.config))
    clone = Transformer(TransformerConfig(**json.loads(saved))).eval()
    clone.load_state_dict(model.state_dict())
    assert (
        clone.generator.weight is clone.tgt_embed.embedding.weight
    )  # tying survives loading
    src, tgt = torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(clone(src, tgt), model(src, tgt))


# --- learning ---------------------------------------------------------------------------------------------


def copy_batch(B, L, num_symbols, generator):
    """Source "x1 .. xn #", decoder input "$ x1 .. xn", labels "x1 .. xn #", padded to L + 1."""
    lengths = torch.randint(1, L + 1, (B,), generator=generator)
    symbols = torch.randint(3, 3 + num_symbols, (B, L), generator=generator)
    real = torch.arange(L)[None, :] < lengths[:, None]
    body = symbols.where(real, PAD)
    pad_col, rows = torch.full((B, 1), PAD), torch.arange(B)
    src = torch.cat([body, pad_col], 1)
    src[rows, lengths] = EOS
    return src, torch.cat([torch.full((B, 1), BOS), body], 1), src.clone()


def test_a_tiny_model_learns_to_copy():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    L, num_symbols = 6, 5
    config = TransformerConfig(
        src_vocab_size=3 + num_symbols,
        tgt_vocab_size=3 + num_symbols,
        d_model=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_ff=64,
        dropout=0.0,
        max_len=16,
        share_embeddings=True,
    )
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    for _ in range(300):
        src, tgt_in, labels = copy_batch(32, L, num_symbols, gen)
        loss = F.cross_entropy(
            model(src, tgt_in).flatten(0, 1), labels.flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    # greedy decoding on unseen sequences: the model's own outputs are fed back in
    model.eval()
    src, _, labels = copy_batch(200, L, num_symbols, torch.Generator().manual_seed(1))
    with torch.no_grad():
        src_mask = model.make_src_mask(src)
        memory = model.encode(src, src_mask)
        ys = torch.full((200, 1), BOS)
        for _ in range(labels.shape[1]):
            logits = model.generator(
                model.decode(ys, memory, src_mask, model.make_tgt_mask(ys))[:, -1]
            )
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
    real = labels != PAD
    accuracy = ((ys[:, 1:] == labels) & real).sum() / real.sum()
    assert accuracy >= 0.95, f"token accuracy {accuracy:.3f} after training to copy"


def test_evaluating_switches_dropout_off_and_restores_the_mode_even_after_an_error():
    model = Transformer(TransformerConfig(20, 20, d_model=8, num_heads=2, d_ff=16))
    for was_training in (True, False):
        model.train(was_training)
        with evaluating(model):
            assert not any(m.training for m in model.modules())
        assert all(m.training == was_training for m in model.modules())
    model.train()
    with pytest.raises(RuntimeError), evaluating(model):
        raise RuntimeError("a failure inside the block")
    assert all(m.training for m in model.modules())


def test_a_config_that_chooses_parts_is_refused_without_them():
    """The engine's ModelConfig names parts (RMSNorm, rotary, ...) that the paper's
    defaults would silently replace: Transformer refuses it unless given the parts."""
    from transformer.engine.model_config import ModelConfig, build_model

    config = ModelConfig(30, 30, d_model=16, num_heads=2, d_ff=32, norm="rms")
    with pytest.raises(TypeError, match="build it with transformer.build_model"):
        Transformer(config)
    assert type(build_model(config).decoder.layers[0].norm1).__name__ == "RMSNorm"


def test_build_model_names_what_it_takes():
    from transformer.engine.model_config import build_model
    from transformer.errors import InputError

    with pytest.raises(InputError, match="build_model takes a ModelConfig, got dict"):
        build_model({"d_model": 32})


@settings(max_examples=10, deadline=None)
@given(
    D_h=st.sampled_from([2, 4]),
    h=st.integers(1, 3),
    N=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_the_one_screen_listing_computes_the_package_model(D_h, h, N, seed):
    """Chapter 08's one-screen reference and the package's `Transformer` (post-norm,
    one shared embedding, no dropout) give the same logits on a padded batch."""
    from transformer.reference import OneScreenTransformer, one_screen_weights

    D, V = D_h * h, 13
    torch.manual_seed(seed)
    config = TransformerConfig(
        V,
        V,
        d_model=D,
        num_heads=h,
        num_encoder_layers=N,
        num_decoder_layers=N,
        d_ff=2 * D,
        dropout=0.0,
        max_len=16,
        share_embeddings=True,
    )
    package = Transformer(config).eval()
    one_screen = OneScreenTransformer(V, D, h, N, 2 * D, pad_id=0, max_len=16).eval()
    one_screen.load_state_dict(one_screen_weights(package.state_dict()))
    src = torch.randint(4, V, (3, 7))
    src[1, 5:] = 0  # padding on the right
    tgt = torch.randint(4, V, (3, 6))
    tgt[2, 4:] = 0
    with torch.no_grad():
        torch.testing.assert_close(
            one_screen(src, tgt), package(src, tgt), rtol=1e-5, atol=1e-5
        )
