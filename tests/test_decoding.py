"""Decoding: greedy and beam search, the key/value cache against full recomputation, and `translate`.

Cache equality is checked on random models in float64, where the two paths differ by about 1e-15:
a "near tie" (two next tokens whose log-probabilities differ by less than the rounding error, so that
either path may legitimately pick either) then has practically no chance. Each case also measures the
smallest top-two gap the reference path saw and fails loudly if it falls below 1e-9, so a tie would be
reported instead of passing or failing by luck. The float32 check compares scores at 1e-5 and skips a
case only when such a gap below 1e-4 is actually observed.
"""

import math

import pytest
import torch

from transformer.decoding import (
    _start,
    beam_search,
    greedy_decode,
    length_penalty,
    output_limits,
)
from transformer.translation import length_batches, pad_rows, translate
from transformer.model import Transformer, TransformerConfig
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID

CASES = [(norm_first, seed) for norm_first in (False, True) for seed in range(4)]


def random_model(
    norm_first: bool, seed: int, dtype=torch.float64, vocab: int = 70
) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(
        60,
        vocab,
        d_model=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=3,
        d_ff=64,
        dropout=0.0,
        max_len=48,
        norm_first=norm_first,
    )
    model = Transformer(config).to(dtype).eval()
    with torch.no_grad():
        model.generator.bias.normal_(
            0.0, 2.0
        )  # uneven scores, so that EOS is chosen at times
    return model


def random_source(seed: int, B: int = 6, S: int = 9) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + seed)
    src = torch.randint(4, 60, (B, S), generator=g)  # (B, S)
    lengths = torch.randint(1, S + 1, (B,), generator=g)
    src[torch.arange(S)[None, :] >= lengths[:, None]] = (
        PAD_ID  # padded on the right, at least one real token
    )
    return src


@torch.no_grad()
def smallest_top2_gap(model: Transformer, src: torch.Tensor, steps: int = 15) -> float:
    """The smallest gap between the two best next tokens that greedy recomputation meets."""
    state, ys, gap = (
        _start(model, src, use_cache=False),
        torch.full((len(src), 1), BOS_ID),
        math.inf,
    )
    for _ in range(steps):
        top2, best = state.step(ys).topk(2, dim=-1)
        gap = min(gap, float((top2[:, 0] - top2[:, 1]).min()))
        ys = torch.cat([ys, best[:, :1]], dim=1)
    return gap


def tokens(nbest_lists):
    return [[h.tokens for h in n] for n in nbest_lists]


@pytest.mark.parametrize("norm_first,seed", CASES)
def test_kv_cache_greedy_decoding_equals_full_recompute(norm_first, seed):
    model, src = random_model(norm_first, seed), random_source(seed)
    assert smallest_top2_gap(model, src) > 1e-9, (
        "a near-tie: this case cannot decide equality"
    )
    cached, full = (
        greedy_decode(model, src, use_cache=True),
        greedy_decode(model, src, use_cache=False),
    )
    assert [h.tokens for h in cached] == [h.tokens for h in full]
    assert [h.finished for h in cached] == [h.finished for h in full]
    for a, b in zip(cached, full):
        assert abs(a.log_prob - b.log_prob) < 1e-9


@pytest.mark.parametrize("norm_first,seed", CASES)
def test_kv_cache_beam_search_equals_full_recompute_including_the_n_best_lists(
    norm_first, seed
):
    model, src = random_model(norm_first, seed), random_source(seed)
    cached = beam_search(model, src, beam_size=4, n_best=4, use_cache=True)
    full = beam_search(model, src, beam_size=4, n_best=4, use_cache=False)
    assert tokens(cached) == tokens(full)
    for n, f in zip(cached, full):
        for a, b in zip(n, f):
            assert abs(a.score - b.score) < 1e-9 and abs(a.log_prob - b.log_prob) < 1e-9


@pytest.mark.parametrize("norm_first", [False, True])
def test_kv_cache_in_float32_gives_the_same_tokens_and_scores_within_1e_5(norm_first):
    checked = 0
    for seed in range(6):
        model, src = random_model(norm_first, seed, torch.float32), random_source(seed)
        if smallest_top2_gap(model, src) < 1e-4:
            continue  # a real near-tie in float32: either choice is legitimate
        checked += 1
        for search in (
            lambda **kw: [[h] for h in greedy_decode(model, src, **kw)],
            lambda **kw: beam_search(model, src, beam_size=3, **kw),
        ):
            cached, full = search(use_cache=True), search(use_cache=False)
            assert tokens(cached) == tokens(full)
            assert (
                max(abs(a[0].log_prob - b[0].log_prob) for a, b in zip(cached, full))
                < 1e-5
            )
    assert checked >= 4


def test_the_cache_grows_by_one_key_and_value_row_per_layer_per_step_and_keeps_cross_attention_fixed():
    model, src = random_model(True, 0), random_source(0, B=2, S=5)
    state = _start(model, src, use_cache=True)
    layers, entries = model.decoder.layers, state.cache.entries
    ys = torch.full((2, 1), BOS_ID)
    for t in range(1, 5):
        state.step(ys)
        assert len(entries) == 2 * len(
            layers
        )  # one entry per attention block: one cache for the whole decoder
        assert all(
            x.shape == (2, 4, t, 8)
            for layer in layers
            for x in entries[layer.self_attn]
        )
        if t == 1:
            cross_before = [entries[layer.cross_attn][0].data_ptr() for layer in layers]
        assert [
            entries[layer.cross_attn][0].data_ptr() for layer in layers
        ] == cross_before  # C W^K computed once
        assert all(
            entries[layer.cross_attn][0].shape == (2, 4, 5, 8) for layer in layers
        )
        ys = torch.cat([ys, torch.full((2, 1), 7)], dim=1)
    with pytest.raises(ValueError, match="the cache holds 4 target tokens"):
        state.step(ys[:, :3])


def test_batched_greedy_decoding_equals_decoding_each_sentence_alone():
    model, src = random_model(False, 1), random_source(1)
    batch = greedy_decode(model, src)
    for i in range(len(src)):
        real = src[i][src[i] != PAD_ID][None]  # (1, S_i): no padding at all
        assert greedy_decode(model, real)[0].tokens == batch[i].tokens


def test_padding_never_enters_the_decoder_and_finished_sentences_stop_growing():
    model, src = random_model(True, 2), random_source(2)
    seen = []
    hook = model.tgt_embed.register_forward_hook(
        lambda module, args, out: seen.append(args[0].clone())
    )
    try:
        greedy_decode(model, src)
        beam_search(model, src, beam_size=4)
    finally:
        hook.remove()
    assert seen and all((x != PAD_ID).all() for x in seen)
    limits = output_limits(
        (src != PAD_ID).sum(-1).tolist(), 1.5, 10, model.config.max_len
    )
    for h, limit in zip(greedy_decode(model, src), limits):
        assert EOS_ID not in h.tokens and len(h.tokens) + h.finished <= limit


def test_beam_search_with_one_beam_and_no_length_penalty_is_greedy_decoding():
    for seed in range(3):
        model, src = random_model(False, seed), random_source(seed)
        assert [
            b[0].tokens for b in beam_search(model, src, beam_size=1, alpha=0.0)
        ] == [g.tokens for g in greedy_decode(model, src)]


def test_n_best_lists_are_sorted_by_score_and_scores_are_log_p_over_the_length_penalty():
    model, src = random_model(True, 3), random_source(3)
    for nbest in beam_search(model, src, beam_size=5, n_best=5, alpha=0.7):
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True) and len(nbest) == 5
        for h in nbest:
            assert h.score == pytest.approx(
                h.log_prob / length_penalty(len(h.tokens) + h.finished, 0.7), rel=1e-12
            )


def test_the_early_stop_never_changes_the_best_hypothesis():
    for seed in range(3):
        model, src = random_model(False, seed), random_source(seed)
        early = beam_search(model, src, beam_size=4, n_best=1)
        late = beam_search(
            model, src, beam_size=4, n_best=4
        )  # keeps searching until four are final
        assert [e[0].tokens for e in early] == [l[0].tokens for l in late]


def test_beam_search_rejects_bad_arguments_with_a_message():
    model, src = random_model(True, 0), random_source(0)
    with pytest.raises(ValueError, match="beam_size=0: give an integer from 1"):
        beam_search(model, src, beam_size=0)
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, src, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="empty"):
        greedy_decode(model, torch.zeros(1, 3, dtype=torch.long))


def test_a_tiny_vocabulary_smaller_than_twice_the_beam_still_works():
    model, src = random_model(True, 0, vocab=6), random_source(0)
    out = beam_search(model, src, beam_size=4, n_best=2)
    assert all(len(n) == 2 for n in out)


# ---------------------------------------------------------------- translate, on a checkpoint of configs/tiny.toml


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_run):
    from transformer.engine.loading import load_checkpoint

    return load_checkpoint(tiny_run)


def test_translate_keeps_the_order_and_gives_empty_lines_empty_outputs(tiny_checkpoint):
    lines = [
        "Ein Hund läuft.",
        "",
        "Zwei Männer stehen auf einer Straße und reden miteinander.",
        "   ",
        "Ein Kind.",
    ]
    out = translate(tiny_checkpoint, lines, beam_size=3, batch_size=2)
    assert len(out) == 5 and out[1] == "" and out[3] == ""
    one_by_one = [translate(tiny_checkpoint, [line], beam_size=3)[0] for line in lines]
    assert out == one_by_one
    assert translate(tiny_checkpoint, lines, beam_size=1) == [
        translate(tiny_checkpoint, [x], beam_size=1)[0] for x in lines
    ]


def test_translate_cuts_a_sentence_longer_than_the_model_and_names_it(tiny_checkpoint):
    long = " ".join(["Hund"] * 200)
    with pytest.warns(
        UserWarning, match="sentence 2 has .* tokens but the model reads at most 64"
    ):
        out = translate(tiny_checkpoint, ["Ein Hund.", long], beam_size=2)
    assert len(out) == 2
    told = []
    translate(
        tiny_checkpoint, [long], on_truncate=lambda i, n, kept: told.append((i, kept))
    )
    assert told == [(0, 64)]
    with pytest.raises(ValueError, match="beam_size=0"):
        translate(tiny_checkpoint, ["x"], beam_size=0)


def test_the_length_rule_and_the_batches_are_one_helper_each():
    """a * S + b, capped so every position has an encoding; batches of sentences of about one length, empties left out."""
    assert output_limits([0, 4, 10, 10**9], 1.5, 10, 64) == [10, 16, 25, 63]
    assert output_limits([3], 1e308, 10**30, 64) == [
        63
    ]  # huge settings stay within the table, no overflow
    assert length_batches([3, 0, 1, 5, 2], 2) == [[2, 4], [0, 3]]
    assert pad_rows([[5], [6, 7, 8]], 0) == [[5, 0, 0], [6, 7, 8]]


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_decoding_in_the_middle_of_training_leaves_dropout_on(search):
    model = random_model(False, 0).train()
    search(model, random_source(0))
    assert all(m.training for m in model.modules())


def test_a_leading_byte_order_mark_is_not_part_of_the_sentence():
    """An editor's BOM is not text: translate reads the sentence without it, as the
    command line and the book's translator box do."""
    from transformer.engine.shipped import load_translator

    checkpoint = load_translator("multi30k-de-en")
    sentence = "Ein Mann fährt mit dem Fahrrad."
    with_bom, plain = translate(checkpoint, ["\ufeff" + sentence, sentence])
    assert with_bom == plain
