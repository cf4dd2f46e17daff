"""Tests for transformer.tokenizer: fixed special ids, deterministic training, exact round trips, safe save/load."""

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    train_tokenizer,
)

WORDS = [
    "the",
    "dog",
    "runs",
    "a",
    "cat",
    "sleeps",
    "on",
    "mat",
    "two",
    "children",
    "play",
    "in",
    "sand",
    "woman",
    "reads",
    "book",
    "man",
    "rides",
    "bicycle",
    "birds",
    "sit",
    "fence",
    "girl",
    "laughs",
]
SENTENCES = [
    f"{a} {b} {c} {d}."
    for a, b, c, d in zip(
        WORDS, WORDS[3:] + WORDS[:3], WORDS[7:] + WORDS[:7], WORDS[11:] + WORDS[:11]
    )
] * 4
CHINESE = [
    "我们走吧。",
    "你好！",
    "住手！",
    "你要我关灯吗？",
    "机器学习很有趣。",
    "他说“不”。",
    "我冷。",
    "等一下！",
] * 4


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    return train_tokenizer(
        SENTENCES, tmp_path_factory.mktemp("tok") / "en", vocab_size=80
    )


@pytest.fixture(scope="module")
def zh_tok(tmp_path_factory) -> Tokenizer:
    return train_tokenizer(
        CHINESE,
        tmp_path_factory.mktemp("zh") / "zh",
        vocab_size=60,
        add_dummy_prefix=False,
    )


def test_special_ids_are_fixed_constants_and_pieces(tok):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == 80


def test_encode_adds_neither_bos_nor_eos(tok):
    ids = tok.encode("the dog runs.")
    assert ids and BOS_ID not in ids and EOS_ID not in ids and PAD_ID not in ids


def test_encode_rejects_a_list_with_a_pointer_to_encode_batch(tok):
    with pytest.raises(TypeError, match="encode_batch"):
        tok.encode(["the dog"])
    assert tok.encode_batch(["the dog", "a cat"]) == [
        tok.encode("the dog"),
        tok.encode("a cat"),
    ]


def test_decode_inverts_encode_on_training_sentences(tok, zh_tok):
    for s in SENTENCES:
        assert tok.decode(tok.encode(s)) == s
    for s in CHINESE:  # full-width punctuation survives: no NFKC normalisation
        assert zh_tok.decode(zh_tok.encode(s)) == s


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12))
def test_decode_inverts_encode_for_any_sentence_of_known_characters(tok, words):
    s = " ".join(words)
    assert tok.decode(tok.encode(s)) == s
    assert "".join(tok.pieces(s)).replace("▁", " ").strip() == s


def test_decode_skips_pad_and_bos_and_stops_at_the_first_eos(tok):
    ids = tok.encode("a cat sleeps.")
    raw = [BOS_ID, *ids, EOS_ID, *tok.encode("the dog"), PAD_ID, PAD_ID]
    assert tok.decode(raw) == "a cat sleeps."
    assert tok.decode(torch.tensor(raw)) == "a cat sleeps."
    assert tok.decode_batch(
        torch.tensor(
            [raw, [BOS_ID, *ids, EOS_ID] + [PAD_ID] * (len(raw) - len(ids) - 2)]
        )
    ) == ["a cat sleeps.", "a cat sleeps."]
    assert tok.decode([]) == "" and tok.decode([EOS_ID, *ids]) == ""


def test_decode_rejects_out_of_range_ids_and_nested_batches(tok):
    with pytest.raises(ValueError, match="outside this tokenizer's vocabulary of 80"):
        tok.decode([5, 80])
    with pytest.raises(ValueError, match="decode_batch"):
        tok.decode(torch.tensor([[5, 6], [7, 8]]))


def test_unseen_characters_become_unk(tok):
    assert UNK_ID in tok.encode(
        "狗"
    )  # the model was trained on the given English sentences only


def test_training_is_deterministic_byte_for_byte(tmp_path):
    a = train_tokenizer(SENTENCES, tmp_path / "a", vocab_size=80)
    b = train_tokenizer(SENTENCES, tmp_path / "b", vocab_size=80)
    assert a.sha256 == b.sha256
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()


def test_bpe_vocabulary_does_not_depend_on_the_thread_count(tmp_path):
    # (the model bytes differ, as they record num_threads; the pieces must not)
    a = train_tokenizer(SENTENCES * 5, tmp_path / "a", vocab_size=80, num_threads=1)
    b = train_tokenizer(SENTENCES * 5, tmp_path / "b", vocab_size=80, num_threads=2)
    assert [a.id_to_piece(i) for i in range(80)] == [
        b.id_to_piece(i) for i in range(80)
    ]


def test_training_keeps_sentences_longer_than_sentencepieces_default_limit(tmp_path):
    # sentencepiece's trainer silently skips sentences over 4192 bytes; the only 'Ω' is in such a sentence
    long = " ".join(["mat"] * 1500) + " Ω"
    tok = train_tokenizer(SENTENCES + [long], tmp_path / "long", vocab_size=80)
    assert len(long.encode()) > 4192
    assert UNK_ID not in tok.encode("Ω")


def test_save_and_load_round_trip_the_model(tok, tmp_path):
    path = tok.save(tmp_path / "ckpt" / "tokenizer.model")
    loaded = Tokenizer.load(path)
    assert loaded.model_path == path and loaded.sha256 == tok.sha256
    assert loaded.encode("two birds sit.") == tok.encode("two birds sit.")
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "tokenizer.model"
    ]  # no temporary file left


def test_save_replaces_an_existing_file_atomically(tok, zh_tok, tmp_path):
    path = zh_tok.save(tmp_path / "tokenizer.model")
    tok.save(path)
    assert Tokenizer.load(path).sha256 == tok.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.model"]


def test_train_writes_the_model_file_it_returns(tmp_path):
    tok = train_tokenizer(SENTENCES, tmp_path / "sub" / "m", vocab_size=80)
    assert tok.model_path == tmp_path / "sub" / "m.model" and tok.model_path.is_file()
    assert Tokenizer.load(tok.model_path).sha256 == tok.sha256


def test_tokenizer_survives_pickling_for_dataloader_workers(tok):
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.sha256 == tok.sha256 and clone.encode("a man rides.") == tok.encode(
        "a man rides."
    )


def test_load_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_tokenizer"):
        Tokenizer.load(tmp_path / "nope.model")


def test_load_rejects_a_file_that_is_not_a_model(tmp_path):
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a sentencepiece model"):
        Tokenizer.load(tmp_path / "junk.model")


def test_load_rejects_a_model_with_other_special_ids(tmp_path):
    import io

    import sentencepiece as spm

    model = io.BytesIO()  # sentencepiece's own defaults: unk 0, bos 1, eos 2, no pad
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES),
        model_writer=model,
        vocab_size=60,
        model_type="bpe",
        minloglevel=2,
    )
    (tmp_path / "other.model").write_bytes(model.getvalue())
    with pytest.raises(ValueError, match="special ids"):
        Tokenizer.load(tmp_path / "other.model")


def test_too_large_vocabulary_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=5000"):
        train_tokenizer(SENTENCES, tmp_path / "big", vocab_size=5000)
    assert not (tmp_path / "big.model").exists()


def test_no_sentences_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no non-empty sentences"):
        train_tokenizer(["", "   "], tmp_path / "empty", vocab_size=50)
    with pytest.raises(TypeError, match=r"sentences\[0\] is bytes, not a str"):
        train_tokenizer([b"bytes"], tmp_path / "bytes", vocab_size=50)
