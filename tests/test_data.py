"""Tests for transformer.data (chapter 09): the dataset of token ids and the token-budget batches. The corpora
themselves are tests/test_corpora.py's."""

import logging
import pickle
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from transformer.engine.corpora import load_multi30k, load_parallel
from transformer.data import Batch, TokenBudgetBatchSampler, TranslationDataset, collate
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

TINY = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    sentences = [
        s for pair in load_parallel(TINY / "tiny.de", TINY / "tiny.en") for s in pair
    ]
    return train_tokenizer(
        sentences * 3, tmp_path_factory.mktemp("tok") / "tiny", vocab_size=90
    )


# --- dataset ----------------------------------------------------------------------------------------


def test_dataset_items_are_token_ids_without_bos_or_eos(tiny_tok):
    pairs = load_parallel(TINY / "tiny.de", TINY / "tiny.en")
    ds = TranslationDataset(pairs, tiny_tok, tiny_tok, max_len=64)
    assert len(ds) == 6 and ds.indices == list(range(6))
    for i, (src, tgt) in enumerate(pairs):
        assert ds[i] == (tiny_tok.encode(src), tiny_tok.encode(tgt))
        assert ds.lengths[i] == max(len(ds[i][0]), len(ds[i][1]) + 1)
    assert ds.skipped == {"empty": 0, "src_too_long": 0, "tgt_too_long": 0}


def test_too_long_pairs_are_filtered_counted_and_reported(tiny_tok, caplog):
    pairs = load_parallel(TINY / "tiny.de", TINY / "tiny.en")
    src_lens = [len(tiny_tok.encode(s)) for s, _ in pairs]
    tgt_lens = [len(tiny_tok.encode(t)) for _, t in pairs]
    max_len = sorted(max(s, t + 1) for s, t in zip(src_lens, tgt_lens))[3]
    with caplog.at_level(logging.WARNING, logger="transformer.data"):
        ds = TranslationDataset(pairs, tiny_tok, tiny_tok, max_len=max_len)
    keep = [
        i for i in range(6) if src_lens[i] <= max_len and tgt_lens[i] + 1 <= max_len
    ]
    assert ds.indices == keep and len(ds) == len(keep) < 6
    assert ds.skipped["src_too_long"] == sum(s > max_len for s in src_lens)
    assert ds.skipped["tgt_too_long"] == sum(
        s <= max_len and t + 1 > max_len for s, t in zip(src_lens, tgt_lens)
    )
    assert f"kept {len(keep)} of 6 pairs" in caplog.text and ds.report() in caplog.text
    assert all(len(s) <= max_len and len(t) + 1 <= max_len for s, t in ds)


def test_max_len_counts_the_bos_and_eos_of_the_target(tiny_tok):
    src, tgt = "a", "Ein Hund rennt über die Wiese."
    n = len(tiny_tok.encode(tgt))
    assert len(TranslationDataset([(src, tgt)], tiny_tok, tiny_tok, max_len=n + 1)) == 1
    assert len(TranslationDataset([(src, tgt)], tiny_tok, tiny_tok, max_len=n)) == 0


def test_pairs_that_encode_to_nothing_are_counted(tiny_tok):
    ds = TranslationDataset(
        [("", "A dog."), ("Ein Hund.", "A dog.")], tiny_tok, tiny_tok, max_len=32
    )
    assert len(ds) == 1 and ds.skipped["empty"] == 1
    with pytest.raises(ValueError, match="max_len=1"):
        TranslationDataset([], tiny_tok, tiny_tok, max_len=1)


def test_dataset_pickles_for_worker_processes(tiny_tok):
    ds = TranslationDataset(
        load_parallel(TINY / "tiny.de", TINY / "tiny.en"),
        tiny_tok,
        tiny_tok,
        max_len=64,
    )
    clone = pickle.loads(pickle.dumps(ds))
    assert [clone[i] for i in range(len(clone))] == [ds[i] for i in range(len(ds))]


# --- batching ---------------------------------------------------------------------------------------

lengths_strategy = st.lists(st.integers(1, 40), min_size=0, max_size=300)


@settings(max_examples=50, deadline=None)
@given(lengths_strategy, st.integers(40, 400), st.integers(0, 5), st.booleans())
def test_each_item_once_per_epoch_and_every_batch_within_budget(
    lengths, max_tokens, seed, shuffle
):
    sampler = TokenBudgetBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=seed)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(b and len(b) * max(lengths[i] for i in b) <= max_tokens for b in batches)
    assert len(sampler) == len(batches)


@settings(max_examples=50, deadline=None)
@given(
    lengths_strategy,
    st.integers(40, 400),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 3),
)
def test_every_rank_gets_the_same_number_of_batches(
    lengths, max_tokens, replicas, drop_last, epoch
):
    samplers = [
        TokenBudgetBatchSampler(
            lengths,
            max_tokens,
            seed=7,
            num_replicas=replicas,
            rank=r,
            drop_last=drop_last,
        )
        for r in range(replicas)
    ]
    for s in samplers:
        s.set_epoch(epoch)
    shards = [list(s) for s in samplers]
    assert len({len(shard) for shard in shards}) == 1
    assert all(len(s) == len(shard) for s, shard in zip(samplers, shards))
    full = TokenBudgetBatchSampler(lengths, max_tokens, seed=7)
    full.set_epoch(epoch)
    everything = list(full)
    sharded = [b for shard in shards for b in shard]
    counts = Counter(i for b in sharded for i in b)
    if drop_last:  # a cut, never a repeat
        assert (
            all(c == 1 for c in counts.values())
            and len(sharded) == len(everything) // replicas * replicas
        )
    else:  # every item, and only the top-up batches repeat
        assert set(counts) == set(range(len(lengths)))
        assert len(sharded) - len(everything) == (-len(everything)) % replicas


def test_ranks_are_disjoint_when_the_batches_divide_evenly():
    lengths = [5] * 64  # 64 items of 5 tokens, budget 40: 8 batches of 8
    shards = [
        list(TokenBudgetBatchSampler(lengths, 40, num_replicas=4, rank=r))
        for r in range(4)
    ]
    assert [len(s) for s in shards] == [2, 2, 2, 2]
    flat = [i for s in shards for b in s for i in b]
    assert sorted(flat) == list(range(64))


def test_sampler_is_deterministic_given_seed_and_epoch_and_changes_with_them():
    lengths = [1 + (i * 7919) % 30 for i in range(500)]
    a = TokenBudgetBatchSampler(lengths, 200, seed=3)
    b = TokenBudgetBatchSampler(lengths, 200, seed=3)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first and len(list(a)) == len(first)
    assert list(TokenBudgetBatchSampler(lengths, 200, seed=4)) != first


def test_batches_group_similar_lengths():
    lengths = [1 + (i * 7919) % 30 for i in range(500)]
    batches = list(TokenBudgetBatchSampler(lengths, 200, shuffle=False))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # without shuffling, batches come in length order
    assert list(TokenBudgetBatchSampler(lengths, 200, shuffle=False, seed=9)) == batches


def test_sampler_rejects_impossible_settings():
    with pytest.raises(
        ValueError, match="an item has 50 tokens, more than max_tokens=40"
    ):
        TokenBudgetBatchSampler([3, 50], max_tokens=40)
    with pytest.raises(ValueError, match="rank=2"):
        TokenBudgetBatchSampler([3], max_tokens=40, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="max_tokens=0"):
        TokenBudgetBatchSampler([3], max_tokens=0)
    with pytest.raises(ValueError, match="lengths must be >= 1"):
        TokenBudgetBatchSampler([3, 0], max_tokens=10)
    assert (
        list(TokenBudgetBatchSampler([], max_tokens=10)) == []
        and len(TokenBudgetBatchSampler([], 10)) == 0
    )


def test_collate_pads_and_shifts_the_target():
    batch = collate([([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])])
    assert isinstance(batch, Batch)
    assert batch.src.tolist() == [[5, 6, 7], [10, PAD_ID, PAD_ID]]  # (B, S) = (2, 3)
    assert batch.tgt_in.tolist() == [
        [BOS_ID, 8, 9, PAD_ID, PAD_ID],
        [BOS_ID, 11, 12, 13, 14],
    ]  # (B, T) = (2, 5)
    assert batch.tgt_out.tolist() == [
        [8, 9, EOS_ID, PAD_ID, PAD_ID],
        [11, 12, 13, 14, EOS_ID],
    ]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    assert batch.num_tgt_tokens == 3 + 5 and batch.num_src_tokens == 4


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(4, 99), min_size=1, max_size=9),
            st.lists(st.integers(4, 99), min_size=0, max_size=9),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_collate_tgt_in_is_tgt_out_shifted_right(items):
    batch = collate(items)
    B, T = batch.tgt_out.shape
    assert (
        batch.src.shape == (B, max(len(s) for s, _ in items))
        and T == max(len(t) for _, t in items) + 1
    )
    for b, (s, t) in enumerate(items):
        assert (
            batch.src[b, : len(s)].tolist() == s
            and (batch.src[b, len(s) :] == PAD_ID).all()
        )
        assert batch.tgt_in[b, : len(t) + 1].tolist() == [BOS_ID, *t]
        assert batch.tgt_out[b, : len(t) + 1].tolist() == [*t, EOS_ID]
        assert (batch.tgt_in[b, len(t) + 1 :] == PAD_ID).all() and (
            batch.tgt_out[b, len(t) + 1 :] == PAD_ID
        ).all()
    assert batch.num_tgt_tokens == sum(len(t) + 1 for _, t in items)


def test_collate_custom_pad_id_empty_batch_and_device_move():
    batch = collate([([5], [6])], pad_id=-1)
    assert batch.pad_id == -1 and batch.num_tgt_tokens == 2
    moved = batch.to("cpu")
    assert (
        isinstance(moved, Batch)
        and torch.equal(moved.tgt_out, batch.tgt_out)
        and moved.pad_id == -1
    )
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_batch_pins_memory_for_the_dataloader():
    assert collate([([5], [6])]).pin_memory().src.is_pinned()


def test_dataloader_with_token_budget_covers_the_real_validation_set(
    course_data, tmp_path
):
    train = load_multi30k("train", root=course_data)
    tok = train_tokenizer(
        [s for pair in train for s in pair], tmp_path / "de_en", vocab_size=8000
    )
    ds = TranslationDataset(
        load_multi30k("val", root=course_data), tok, tok, max_len=64
    )
    assert len(ds) == 1_014
    sampler = TokenBudgetBatchSampler(ds.lengths, max_tokens=1024, seed=0)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == len(sampler)
    assert sum(b.num_tgt_tokens for b in batches) == sum(len(t) + 1 for _, t in ds)
    assert all(
        b.src.shape[0] * max(b.src.shape[1], b.tgt_out.shape[1]) <= 1024
        for b in batches
    )
    assert all((b.tgt_in[:, 0] == BOS_ID).all() for b in batches)
    first = next(
        iter(
            DataLoader(
                ds,
                batch_sampler=TokenBudgetBatchSampler(ds.lengths, 1024, shuffle=False),
                collate_fn=collate,
            )
        )
    )
    assert tok.decode(first.tgt_out[0]) in {
        en for _, en in load_multi30k("val", root=course_data)
    }
