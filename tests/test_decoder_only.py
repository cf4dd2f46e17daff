"""The decoder-only model (notebooks/18_decoder_only.ipynb): one stack reading `source BOS target`, its two
source masks, padding that changes nothing, the cache, training and loading through the translator's code, and
the settings it refuses."""

import pytest
import torch

from transformer.engine.loading import load_checkpoint
from transformer.engine.model_config import model_bytes
from transformer.decoder_only import DecoderOnly, sample
from transformer.engine.model_config import ModelConfig, build_model
from transformer.decoding import DecoderSteps, beam_search, greedy_decode
from transformer.translation import translate
from transformer.errors import ConfigError, InputError
from transformer.masking import causal_mask
from transformer.model import Transformer, TransformerConfig, closed_form, evaluating
from transformer.tokenizer import BOS_ID, PAD_ID

V = 40


def config(**changes) -> ModelConfig:
    settings = dict(
        src_vocab_size=V,
        tgt_vocab_size=V,
        d_model=16,
        num_heads=2,
        num_encoder_layers=0,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=24,
        pad_id=PAD_ID,
        norm_first=True,
        share_embeddings=True,
    )
    return ModelConfig(**{**settings, **changes})


def model(**changes) -> DecoderOnly:
    torch.manual_seed(0)
    return build_model(config(**changes)).eval()


VARIANTS = [
    {"source_mask": "causal"},
    {"source_mask": "prefix"},
    {"source_mask": "causal", "positions": "rotary"},
    {"source_mask": "prefix", "positions": "rotary"},
]  # rotary: each block turns a row's queries and keys by that row's own positions


SRC = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, PAD_ID, PAD_ID]])
TGT = torch.tensor([[BOS_ID, 13, 14, 15], [BOS_ID, 16, 17, PAD_ID]])


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_later_target_token_never_changes_an_earlier_output(variant):
    m = model(**variant)
    out = m(SRC, TGT)
    for t in range(1, TGT.shape[1]):
        changed = TGT.clone()
        changed[:, t] = 20
        assert torch.equal(m(SRC, changed)[:, :t], out[:, :t])
        assert not torch.allclose(m(SRC, changed)[0, t], out[0, t])


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_changes_no_logit_the_output_continues_each_rows_own_source(variant):
    """Row 1 has 3 source tokens padded to 5 and 3 target tokens padded to 4: its logits are those of the row
    alone, unpadded, so its target positions start after its own source, not after the batch's longest."""
    m = model(**variant)
    alone = m(SRC[1:, :3], TGT[1:, :3])
    torch.testing.assert_close(m(SRC, TGT)[1, :3], alone[0], atol=1e-5, rtol=0)


def test_the_prefix_mask_lets_a_source_position_read_later_source_tokens_and_the_causal_one_does_not():
    """The first source position's keys in the second block depend on the last source token only when the
    source is read as a prefix (bidirectionally)."""
    changed = SRC.clone()
    changed[0, 4] = 30
    for mask, moves in (("causal", False), ("prefix", True)):
        m = model(source_mask=mask)
        second = m.decoder.layers[1].self_attn
        keys = [
            m.encode(s, m.make_src_mask(s)).cache.entries[second][0][0, :, 0]
            for s in (SRC, changed)
        ]
        assert (not torch.allclose(*keys)) == moves, mask


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_logits_are_those_of_one_sequence_source_bos_target_at_the_target_positions_only(
    variant,
):
    """Translation as continuation: run `source BOS target` through the stack as one sequence with one mask
    (causal, or bidirectional over the source), and the target positions' logits are the model's; the source
    positions' predictions are not among them, so chapter 10's loss on tgt_out covers the target only."""
    m, mask = model(**variant), variant["source_mask"]
    src, tgt = SRC[:1], TGT[:1]
    S, T = src.shape[1], tgt.shape[1]
    allowed = causal_mask(S + T, src.device)  # (1, 1, L, L)
    if mask == "prefix":
        allowed = allowed.clone()
        allowed[..., :S, :S] = True  # the source reads all of itself
    sequence = torch.cat([src, tgt], dim=1)  # (1, S + T)
    h = m.decoder(m.positional(m.tgt_embed(sequence)), allowed)
    logits = m(src, tgt)
    assert logits.shape == (1, T, V)
    torch.testing.assert_close(logits, m.generator(h)[:, S:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_cache_gives_what_recomputing_gives_step_by_step_greedy_and_beam(variant):
    m = model(**variant)
    src_mask = m.make_src_mask(SRC)
    memory = m.encode(SRC, src_mask)
    cached = DecoderSteps(m, memory, src_mask, use_cache=True)
    fresh = DecoderSteps(m, memory, src_mask, use_cache=False)
    ys = TGT.masked_fill(TGT == PAD_ID, 18)  # what a search feeds: no padding
    for t in range(1, ys.shape[1] + 1):
        torch.testing.assert_close(
            cached.step(ys[:, :t]), fresh.step(ys[:, :t]), atol=1e-5, rtol=0
        )
    assert [h.tokens for h in greedy_decode(m, SRC)] == [
        h.tokens for h in greedy_decode(m, SRC, use_cache=False)
    ]
    assert [b[0].tokens for b in beam_search(m, SRC, beam_size=3)] == [
        b[0].tokens for b in beam_search(m, SRC, beam_size=3, use_cache=False)
    ]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_sentence_decoded_in_a_batch_gets_what_it_gets_alone(variant):
    m = model(**variant)
    together = greedy_decode(m, SRC)
    alone = greedy_decode(m, SRC[1:, :3])
    assert together[1].tokens == alone[0].tokens


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary"])
def test_an_output_as_long_as_max_len_after_a_source_as_long_as_max_len_has_positions(
    positions,
):
    """The position table (added, or each block's rotary one) holds 2 max_len rows:
    the longest source, then the longest output."""
    m = model(positions=positions)
    src = torch.randint(3, V, (1, m.config.max_len))
    (hyp,) = greedy_decode(m, src, max_len_a=0, max_len_b=m.config.max_len)
    assert len(hyp.tokens) <= m.config.max_len - 1


@pytest.mark.parametrize(
    "setting, phrase",
    [
        (dict(temperature=0.0), "temperature=0.0: a finite number > 0"),
        (dict(temperature=float("nan")), "temperature=nan: a finite number > 0"),
        (dict(temperature=True), "temperature=True is a bool, not a number"),
        (dict(top_k=0), "top_k=0: an integer >= 1, or None"),
        (dict(top_k=2.5), "top_k=2.5: an integer >= 1, or None"),
        (dict(top_p=0.0), "top_p=0.0: a number in (0, 1]"),
        (dict(top_p=1.5), "top_p=1.5: a number in (0, 1]"),
    ],
)
def test_sample_refuses_at_its_door_a_setting_no_sampler_can_use(setting, phrase):
    """Refused once, before the first step, naming the setting: the sampler's
    distribution inside the loop trusts its caller."""
    with pytest.raises(InputError) as refused:
        sample(model(), SRC, **setting)
    assert str(refused.value).startswith(phrase)


def test_sample_takes_any_real_number_and_refuses_a_generator_that_is_not_one():
    """A Fraction passed the door and failed in the tensors' arithmetic; a seed
    given as generator=0 failed in torch.multinomial."""
    from fractions import Fraction

    from transformer.errors import InputTypeError

    m = model()
    halves = sample(m, SRC, temperature=Fraction(1, 2), top_p=Fraction(1, 2))
    assert len(halves) == len(SRC)
    with pytest.raises(InputTypeError, match="generator=0: a torch.Generator"):
        sample(m, SRC, generator=0)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    m = model()
    first = sample(m, SRC, temperature=1.0, generator=torch.Generator().manual_seed(3))
    again = sample(m, SRC, temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert [h.tokens for h in first] == [h.tokens for h in again]
    greedy = [h.tokens for h in greedy_decode(m, SRC)]
    assert [h.tokens for h in sample(m, SRC, top_k=1)] == greedy
    assert [h.tokens for h in sample(m, SRC, top_p=1e-9)] == greedy


def test_a_vanishing_temperature_or_top_p_samples_the_most_probable_token():
    """temperature=1e-45 overflowed the division (every score -inf) and top_p=1e-46
    underflowed to 0 (no token kept): both were torch's "probability tensor contains
    inf, nan". As they tend to 0, sampling tends to greedy decoding, and is it."""
    m = model()
    greedy = [h.tokens for h in greedy_decode(m, SRC)]
    for setting in (
        {"temperature": 1e-45},
        {"temperature": 1e-30, "top_k": 3},
        {"top_p": 1e-46},
        {"temperature": 1e-45, "top_p": 1e-46},
        # below float32's smallest number: the largest score was 0 / 0
        {"temperature": 1e-300},
        {"temperature": 5e-324},
    ):
        assert [h.tokens for h in sample(m, SRC, **setting)] == greedy, setting


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"share_embeddings": False}, "share_embeddings = true"),
        ({"source_mask": "bidirectional"}, "must be one of \\['causal', 'prefix'\\]"),
        ({"num_encoder_layers": -1}, "must be at least 0"),
    ],
)
def test_a_config_the_decoder_only_model_cannot_have_is_refused_with_what_to_do(
    changes, message
):
    with pytest.raises(ValueError, match=message):
        config(**changes)


def test_build_model_builds_the_model_the_config_describes():
    assert isinstance(build_model(config()), DecoderOnly)
    assert isinstance(build_model(config(num_encoder_layers=1)), Transformer)
    assert build_model(config(source_mask="prefix")).source_mask == "prefix"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_sampling_settings_outside_their_range_are_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        sample(model(), SRC, **kwargs)


def test_bad_sources_are_refused_as_for_the_translator():
    m = model()
    with pytest.raises(InputError, match="outside the source vocabulary"):
        greedy_decode(m, torch.tensor([[5, V + 3]]))
    with pytest.raises(InputError, match="empty"):
        greedy_decode(m, torch.tensor([[PAD_ID, PAD_ID]]))
    with pytest.raises(InputError, match="src must be a"):
        greedy_decode(m, SRC[0])


def test_a_training_config_with_a_decoder_only_model_and_two_vocabularies_is_refused_before_training(
    tiny_train_config, tmp_path
):
    with pytest.raises(ConfigError, match="share_embeddings"):
        tiny_train_config(
            tmp_path,
            model__num_encoder_layers=0,
            model__share_embeddings=False,
            data__shared_vocab=False,
        )


def test_the_trainer_trains_saves_and_loads_it_and_translate_uses_it(
    tiny_train_config, tmp_path, course_data
):
    from transformer.engine.trainer import train

    run = tiny_train_config(
        tmp_path, model__num_encoder_layers=0, model__num_decoder_layers=2
    )
    train(run)
    checkpoint = load_checkpoint(run.out_dir)
    loaded = checkpoint.model
    assert isinstance(loaded, DecoderOnly)
    assert (loaded.config.num_encoder_layers, loaded.config.num_decoder_layers) == (
        0,
        2,
    )
    tensors = {id(t): t for t in [*loaded.parameters(), *loaded.buffers()]}
    assert model_bytes(loaded.config) == 4 * sum(t.numel() for t in tensors.values())
    again = load_checkpoint(run.out_dir).model
    src = torch.tensor([[5, 6, 7]])
    with evaluating(loaded), evaluating(again):
        assert torch.equal(loaded(src, TGT[:1, :2]), again(src, TGT[:1, :2]))
    (text,) = translate(checkpoint, ["Ein Hund läuft."])
    assert isinstance(text, str)


def test_the_attention_explorer_refuses_a_decoder_only_model_and_says_what_to_read():
    from transformer.visualize import attention_weights

    with pytest.raises(InputError, match="no cross-attention"):
        attention_weights(model(), SRC, TGT)


def test_the_onnx_export_refuses_a_decoder_only_checkpoint_before_writing_anything(
    tiny_train_config, tmp_path, course_data
):
    from transformer.engine.onnx_export import export_onnx
    from transformer.engine.trainer import train

    run = tiny_train_config(tmp_path, model__num_encoder_layers=0, optim__epochs=1)
    train(run)
    with pytest.raises(InputError, match="decoder-only model"):
        export_onnx(run.out_dir, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


def test_source_mask_is_refused_on_a_model_with_an_encoder():
    with pytest.raises(ValueError, match="an encoder always sees its whole source"):
        config(num_encoder_layers=1, source_mask="prefix")


def test_top_p_keeps_every_token_as_probable_as_the_last_one_it_needs():
    from transformer.decoder_only import sampling_distribution

    log_p = torch.tensor([[0.4, 0.3, 0.3]]).log()
    torch.testing.assert_close(
        sampling_distribution(log_p, top_p=0.6), torch.tensor([[0.4, 0.3, 0.3]])
    )
    log_p = torch.tensor([[0.5, 0.2, 0.2, 0.1]]).log()
    torch.testing.assert_close(
        sampling_distribution(log_p, top_k=2, top_p=0.7),
        torch.tensor([[5 / 9, 2 / 9, 2 / 9, 0.0]]),
    )


def test_decoding_with_a_cache_that_lacks_the_source_says_how_to_start_it():
    from transformer.cache import KVCache

    m = model()
    src_mask = m.make_src_mask(SRC)
    with pytest.raises(ValueError, match="model.new_cache"):
        m.decode(TGT[:, :1], m.encode(SRC, src_mask), src_mask, None, cache=KVCache())


def test_a_decoder_only_model_too_large_for_the_memory_is_refused_before_it_is_built():
    huge = dict(src_vocab_size=10**9, tgt_vocab_size=10**9, share_embeddings=True)
    config = TransformerConfig(**huge, num_encoder_layers=0)
    with pytest.raises(InputError, match=r"needs about [\d,.]+ GB, but cpu memory"):
        DecoderOnly(config)
    small = TransformerConfig(50, 50, d_model=16, num_heads=2, num_encoder_layers=0)
    with torch.device("meta"):  # the estimate is an upper bound of what is built
        built = DecoderOnly(small, source_mask="causal")
    size = sum(t.numel() for t in (*built.parameters(), *built.buffers()))
    assert size <= closed_form(small)["total"] + 2 * small.max_len * small.d_model
