"""Tests for transformer.engine.corpora (appendix 91): the real corpora and their split sizes, where files come from and
offline downloads, reading files with every bad input, and splitting."""

import gzip
import hashlib
import logging
import shutil
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer.engine.corpora as corpora
import transformer.engine.corpus_files as corpus_files
from transformer.engine.corpus_files import (
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    data_search_path,
    default_data_dir,
    download_file,
    fetch_file,
)
from transformer.errors import ChecksumError, CorpusFormatError, CorpusNotFoundError
from transformer.engine.corpora import (
    load_multi30k,
    load_parallel,
    load_tatoeba,
    load_tsv,
    read_lines,
    split_pairs,
)

TINY = Path(__file__).parent / "data"
MULTI30K_SIZES = {
    "train": 29_000,
    "val": 1_014,
    "test_2016_flickr": 1_000,
    "test_2017_flickr": 1_000,
    "test_2018_flickr": 1_071,
}
TATOEBA_SIZES = {
    "train": 25_328,
    "val": 1_378,
    "test": 1_388,
}  # seed 0, 5 % + 5 % of English sentences


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test runs offline: only file:// URLs may be opened."""
    real = urllib.request.urlopen

    def guarded(request, *args, **kwargs):
        url = (
            request.full_url if isinstance(request, urllib.request.Request) else request
        )
        if not url.startswith("file:"):
            raise AssertionError(f"a test tried to reach the network: {url}")
        return real(request, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", guarded)


@pytest.fixture
def offline(monkeypatch):
    """Make every download fail the way it does on a machine without network."""

    def refuse(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture
def no_checkout(monkeypatch):
    """Pretend the course's own copy (the repository's data/) is not there."""
    monkeypatch.setattr(
        corpus_files, "course_data_dir", lambda: None
    )  # where data_search_path looks it up


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the real corpora -------------------------------------------------------------------------------


@pytest.mark.parametrize("split", MULTI30K_SPLITS)
def test_multi30k_split_sizes_are_the_published_ones(course_data, split):
    pairs = load_multi30k(split, root=course_data)
    assert len(pairs) == MULTI30K_SIZES[split]
    assert all(de and en for de, en in pairs)


def test_multi30k_pairs_are_german_english_and_can_be_reversed(course_data):
    de_en = load_multi30k("train", root=course_data)
    assert de_en[0] == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
        "Two young, White males are outside near many bushes.",
    )
    en_de = load_multi30k("train", root=course_data, src_lang="en", tgt_lang="de")
    assert en_de == [(en, de) for de, en in de_en]


def test_multi30k_checksums_in_the_module_match_the_course_copy(course_data):
    sums = dict(
        reversed(line.split())
        for line in (course_data / "SHA256SUMS").read_text().splitlines()
        if line
    )
    assert {f"multi30k/{name}": value for name, value in MULTI30K_SHA256.items()} == {
        k: v for k, v in sums.items() if k.startswith("multi30k/")
    }
    for name, value in MULTI30K_SHA256.items():
        assert sha256(course_data / "multi30k" / name) == value


def test_sha256sums_covers_every_file_of_data_and_each_text_is_pinned(course_data):
    """data/SHA256SUMS lists every corpus file with its sum, and CORPUS_SHA256 pins the text of each."""
    sums = dict(
        reversed(line.split())
        for line in (course_data / "SHA256SUMS").read_text().splitlines()
        if line
    )
    on_disk = {p.relative_to(course_data).as_posix() for p in course_data.rglob("*.gz")}
    assert set(sums) == on_disk == set(corpus_files.CORPUS_SHA256)
    for relpath, value in sums.items():
        assert sha256(course_data / relpath) == value, relpath
        text = gzip.decompress((course_data / relpath).read_bytes())
        assert (
            hashlib.sha256(text).hexdigest() == corpus_files.CORPUS_SHA256[relpath]
        ), relpath
    assert (
        "CC-BY 2.0" in (course_data / "README.md").read_text()
        and "Elliott" in (course_data / "README.md").read_text()
    )


def test_the_course_copy_is_found_in_the_repository_without_any_other_folder(
    course_data, monkeypatch, tmp_path
):
    monkeypatch.delenv(corpus_files.DATA_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda *a, **k: pytest.fail("tried to download")
    )
    assert corpus_files.course_data_dir().resolve() == course_data.resolve()
    assert (
        len(load_multi30k("val")) == 1_014
        and len(load_tatoeba("test")) == TATOEBA_SIZES["test"]
    )


@pytest.mark.parametrize(
    "damage", ["changed byte", "truncated gzip", "uncompressed, one letter changed"]
)
@pytest.mark.parametrize("relpath", ["multi30k/val.de.gz", "tatoeba/cmn-eng.tsv.gz"])
def test_a_damaged_corpus_file_is_one_line_naming_it_and_the_fix(
    course_data, tmp_path, monkeypatch, damage, relpath
):
    """A damaged copy is refused with one line, never read as a silently different corpus (and other splits)."""
    root = tmp_path / "data"
    shutil.copytree(course_data, root)
    monkeypatch.setattr(
        corpus_files, "course_data_dir", lambda: root
    )  # as if the damaged folder were the repository's
    target = root / relpath
    raw = target.read_bytes()
    if damage == "changed byte":
        text = bytearray(gzip.decompress(raw))
        text[len(text) // 2] ^= 0x01
        target.write_bytes(gzip.compress(bytes(text), mtime=0))
    elif damage == "truncated gzip":
        target.write_bytes(raw[: len(raw) - 1000])
    else:
        text = gzip.decompress(raw).replace(b"a", b"e", 1)
        target.unlink()
        target.with_suffix("").write_bytes(text)
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda *a, **k: pytest.fail("tried to download")
    )
    load = (
        (lambda: load_multi30k("val"))
        if relpath.startswith("multi30k")
        else (lambda: load_tatoeba("train"))
    )
    with pytest.raises(ChecksumError) as info:
        load()
    message = str(info.value)
    assert "\n" not in message and relpath.removesuffix(".gz") in message
    assert "git checkout -- data/" in message


def test_an_uncompressed_copy_of_the_right_text_is_accepted(course_data, tmp_path):
    (tmp_path / "tatoeba").mkdir()
    (tmp_path / "tatoeba" / "cmn-eng.tsv").write_bytes(
        gzip.decompress((course_data / corpus_files.TATOEBA_FILE).read_bytes())
    )
    assert load_tatoeba("val", root=tmp_path) == load_tatoeba("val", root=course_data)


def test_multi30k_rejects_unknown_split_and_identical_languages(course_data):
    with pytest.raises(ValueError, match="test_2016_flickr"):
        load_multi30k("test", root=course_data)
    with pytest.raises(ValueError, match="two languages"):
        load_multi30k("val", root=course_data, src_lang="en", tgt_lang="en")


def test_multi30k_language_without_checksum_is_never_downloaded(course_data, tmp_path):
    with pytest.raises(CorpusNotFoundError, match="no checksum is known for val.fr.gz"):
        load_multi30k("val", root=tmp_path, src_lang="fr", tgt_lang="en")
    assert not any(tmp_path.rglob("*.gz"))


def test_tatoeba_split_sizes(course_data):
    sizes = {
        split: len(load_tatoeba(split, root=course_data)) for split in TATOEBA_SIZES
    }
    assert sizes == TATOEBA_SIZES
    assert sum(sizes.values()) == 28_094
    assert load_tatoeba("valid", root=course_data) == load_tatoeba(
        "val", root=course_data
    )


def test_tatoeba_no_english_sentence_is_in_two_splits(course_data):
    english = {
        split: {en for en, _ in load_tatoeba(split, root=course_data)}
        for split in TATOEBA_SIZES
    }
    assert not english["train"] & english["val"]
    assert not english["train"] & english["test"]
    assert not english["val"] & english["test"]


def test_tatoeba_pairs_are_english_chinese_without_byte_order_mark(course_data):
    train = load_tatoeba("train", root=course_data)
    assert train[:2] == [
        ("Hi.", "嗨。"),
        ("Hi.", "你好。"),
    ]  # the file starts with U+FEFF


def test_tatoeba_trailing_blank_line_is_counted_and_reported(course_data, caplog):
    with caplog.at_level(logging.WARNING, logger="transformer.data"):
        load_tatoeba("test", root=course_data)
    assert (
        "1 of 28095 lines are blank or have an empty side (line 28095)" in caplog.text
    )


def test_tatoeba_split_changes_with_the_seed_and_still_covers_every_pair(course_data):
    seed0 = load_tatoeba("test", root=course_data, seed=0)
    seed1 = load_tatoeba("test", root=course_data, seed=1)
    assert seed0 != seed1
    total = sum(len(load_tatoeba(s, root=course_data, seed=1)) for s in TATOEBA_SIZES)
    assert total == 28_094


def test_tatoeba_rejects_unknown_split(course_data):
    with pytest.raises(ValueError, match="'train', 'val'"):
        load_tatoeba("dev", root=course_data)


def test_course_data_files_match_their_published_checksums(course_data):
    for line in (course_data / "SHA256SUMS").read_text().splitlines():
        value, name = line.split()
        assert sha256(course_data / name) == value, name


# --- where files come from, and downloads (all offline) --------------------------------------------


def test_present_files_never_touch_the_network(course_data, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("network used although the files are present")

    monkeypatch.setattr(urllib.request, "urlopen", fail)
    assert len(load_multi30k("val", root=course_data)) == 1_014
    monkeypatch.setenv(corpus_files.DATA_ENV_VAR, str(course_data))
    assert len(load_multi30k("val")) == 1_014
    assert len(load_tatoeba("val")) == TATOEBA_SIZES["val"]


def test_default_data_dir_is_env_var_then_xdg_cache_then_home_cache(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(corpus_files.DATA_ENV_VAR, str(tmp_path / "env"))
    assert default_data_dir() == tmp_path / "env"
    monkeypatch.delenv(corpus_files.DATA_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "transformer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".cache" / "transformer"


def test_search_path_is_root_alone_or_env_course_copy_cache(monkeypatch, tmp_path):
    assert data_search_path(tmp_path) == [tmp_path]
    monkeypatch.setenv(corpus_files.DATA_ENV_VAR, str(tmp_path / "env"))
    monkeypatch.setattr(
        corpus_files, "course_data_dir", lambda: tmp_path / "repo" / "data"
    )
    assert data_search_path() == [tmp_path / "env", tmp_path / "repo" / "data"]
    monkeypatch.delenv(corpus_files.DATA_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_search_path() == [
        tmp_path / "repo" / "data",
        tmp_path / "xdg" / "transformer",
    ]


def test_course_data_dir_is_the_repository_data_folder(course_data):
    assert corpus_files.course_data_dir().resolve() == course_data.resolve()


def test_download_writes_the_verified_file(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(b"x" * 3_000_000)  # more than one 1 MiB chunk
    dest = download_file(
        source.as_uri(), tmp_path / "out" / "file.bin", sha256=sha256(source)
    )
    assert dest.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_download_with_wrong_checksum_leaves_nothing_behind(tmp_path):
    source = tmp_path / "src.bin"
    source.write_bytes(b"payload")
    (tmp_path / "out").mkdir()
    with pytest.raises(ChecksumError, match="expected 0000"):
        download_file(source.as_uri(), tmp_path / "out" / "file.bin", sha256="0" * 64)
    assert list((tmp_path / "out").iterdir()) == []


def test_download_keeps_the_old_file_when_the_new_one_is_bad(tmp_path):
    good = tmp_path / "out" / "file.bin"
    good.parent.mkdir()
    good.write_bytes(b"old, verified")
    source = tmp_path / "src.bin"
    source.write_bytes(b"new, corrupt")
    with pytest.raises(ChecksumError):
        download_file(source.as_uri(), good, sha256=sha256(good))
    assert good.read_bytes() == b"old, verified"


def test_missing_multi30k_is_downloaded_verified_and_then_read_from_disk(
    course_data, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        corpora, "MULTI30K_URL", (course_data / "multi30k").as_uri() + "/{name}"
    )
    pairs = load_multi30k("val", root=tmp_path)
    assert len(pairs) == 1_014
    assert sha256(tmp_path / "multi30k" / "val.de.gz") == MULTI30K_SHA256["val.de.gz"]
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda *a, **k: pytest.fail("downloaded twice")
    )
    assert load_multi30k("val", root=tmp_path) == pairs


def test_missing_corpus_goes_to_the_cache_when_no_root_is_given(
    course_data, tmp_path, monkeypatch, no_checkout
):
    monkeypatch.setattr(
        corpora, "MULTI30K_URL", (course_data / "multi30k").as_uri() + "/{name}"
    )
    monkeypatch.delenv(corpus_files.DATA_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert len(load_multi30k("test_2017_flickr")) == 1_000
    assert (tmp_path / "transformer" / "multi30k" / "test_2017_flickr.en.gz").is_file()


def test_corrupt_multi30k_download_is_rejected(course_data, tmp_path, monkeypatch):
    monkeypatch.setattr(
        corpora, "MULTI30K_URL", (course_data / "multi30k" / "val.en.gz").as_uri()
    )  # wrong file
    with pytest.raises(ChecksumError, match="val.de.gz"):
        load_multi30k("val", root=tmp_path)
    assert not any(tmp_path.iterdir())  # nor the folder made for it


def test_missing_corpus_while_offline_is_a_clear_error(
    tmp_path, offline, no_checkout, monkeypatch
):
    monkeypatch.setenv(corpus_files.DATA_ENV_VAR, str(tmp_path / "cache"))
    with pytest.raises(CorpusNotFoundError) as info:
        load_multi30k("train")
    message = str(info.value)
    assert (
        "multi30k/train.de.gz is not in" in message
        and str(tmp_path / "cache") in message
    )
    assert corpus_files.MULTI30K_URL.format(name="train.de.gz") in message
    assert "Temporary failure in name resolution" in message and "offline" in message
    assert corpus_files.DATA_ENV_VAR in message
    assert isinstance(info.value, FileNotFoundError)
    assert (
        info.value.__cause__ is None and info.value.__suppress_context__
    )  # no library traceback chained
    # the ninth trial's M10: the failed download left an empty cache/multi30k/
    assert not (tmp_path / "cache").exists()
    with pytest.raises(CorpusNotFoundError, match="tatoeba/cmn-eng.tsv.gz"):
        load_tatoeba("train")


def test_download_false_fails_without_trying(tmp_path, monkeypatch):
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda *a, **k: pytest.fail("tried to download")
    )
    with pytest.raises(CorpusNotFoundError, match="not to be downloaded"):
        load_multi30k("val", root=tmp_path, download=False)


def test_fetch_file_accepts_a_flat_folder(tmp_path):
    (tmp_path / "val.de.gz").write_bytes(b"")
    assert (
        fetch_file("multi30k/val.de.gz", "file:///nowhere", root=tmp_path)
        == tmp_path / "val.de.gz"
    )


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return path


def test_missing_tatoeba_is_extracted_from_the_zip_when_it_is_the_course_copy(
    course_data, tmp_path, monkeypatch
):
    text = gzip.decompress((course_data / corpus_files.TATOEBA_FILE).read_bytes())
    archive = _zip(tmp_path / "cmn-eng.zip", {"cmn.txt": text, "_about.txt": b"about"})
    monkeypatch.setattr(corpora, "TATOEBA_URL", archive.as_uri())
    root = tmp_path / "data"
    assert load_tatoeba("test", root=root) == load_tatoeba("test", root=course_data)
    assert sorted(p.name for p in (root / "tatoeba").iterdir()) == [
        "cmn-eng.tsv.gz"
    ]  # zip and temporaries gone


@pytest.mark.parametrize(
    "members, error, kind",
    [
        ({"other.txt": b"x"}, "not the expected cmn.txt", CorpusFormatError),
        (
            {"cmn.txt": (TINY / "tiny.tsv").read_bytes()},
            "not the course's copy of Tatoeba",
            ChecksumError,
        ),  # another bundle
        (
            {"cmn.txt": b"Hi.\t\xe4\xbd\nBye.\tx\n"},
            "not the course's copy of Tatoeba",
            ChecksumError,
        ),
    ],
)
def test_a_tatoeba_download_other_than_the_course_copy_is_refused_and_not_installed(
    tmp_path, monkeypatch, members, error, kind
):
    monkeypatch.setattr(
        corpora, "TATOEBA_URL", _zip(tmp_path / "bad.zip", members).as_uri()
    )
    with pytest.raises(kind, match=error):
        load_tatoeba("train", root=tmp_path / "data")
    assert not any(p.is_file() for p in (tmp_path / "data").rglob("*"))


# --- reading files: every bad input -----------------------------------------------------------------


def test_load_parallel_reads_aligned_files():
    pairs = load_parallel(TINY / "tiny.de", TINY / "tiny.en")
    assert len(pairs) == 6
    assert pairs[0] == (
        "Ein Hund rennt über die Wiese.",
        "A dog runs across the meadow.",
    )


def test_files_with_different_line_counts_are_an_error(tmp_path):
    (tmp_path / "x.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "x.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(
        CorpusFormatError,
        match=r"x.de has 3 lines but .*x.en has 2: .*aligned line by line",
    ):
        load_parallel(tmp_path / "x.de", tmp_path / "x.en")


def test_non_utf8_bytes_are_an_error_naming_file_and_line(tmp_path):
    (tmp_path / "x.de").write_bytes("Ein Hund.\nSchöne Blumen.\n".encode("latin-1"))
    (tmp_path / "x.en").write_text("A dog.\nNice flowers.\n", encoding="utf-8")
    with pytest.raises(
        CorpusFormatError,
        match=r"x.de, line 2: byte 0xf6 is not valid UTF-8; re-encode",
    ):
        load_parallel(tmp_path / "x.de", tmp_path / "x.en")
    with pytest.raises(ValueError):  # CorpusFormatError is a ValueError
        read_lines(tmp_path / "x.de")


def test_empty_lines_are_skipped_counted_and_reported(tmp_path, caplog):
    (tmp_path / "x.de").write_text(
        "Ein Hund.\n\nZwei Vögel.\n   \nEin Baum.\n", encoding="utf-8"
    )
    (tmp_path / "x.en").write_text(
        "A dog.\nA cat.\nTwo birds.\nA fish.\n\n", encoding="utf-8"
    )
    with caplog.at_level(logging.WARNING, logger="transformer.data"):
        pairs = load_parallel(tmp_path / "x.de", tmp_path / "x.en")
    assert pairs == [("Ein Hund.", "A dog."), ("Zwei Vögel.", "Two birds.")]
    assert "3 of 5 lines are blank or have an empty side (line 2, 4, 5)" in caplog.text
    assert "2 pairs remain" in caplog.text


def test_empty_lines_can_be_made_an_error(tmp_path):
    (tmp_path / "x.de").write_text("Ein Hund.\n\n", encoding="utf-8")
    (tmp_path / "x.en").write_text("A dog.\nA cat.\n", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"1 of 2 lines .* \(line 2\)"):
        load_parallel(tmp_path / "x.de", tmp_path / "x.en", on_empty="error")
    with pytest.raises(ValueError, match="on_empty"):
        load_parallel(tmp_path / "x.de", tmp_path / "x.en", on_empty="ignore")


def test_many_empty_lines_are_summarised(tmp_path, caplog):
    (tmp_path / "x.de").write_text("\n" * 7 + "Ein Hund.\n", encoding="utf-8")
    (tmp_path / "x.en").write_text("x\n" * 7 + "A dog.\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="transformer.data"):
        assert load_parallel(tmp_path / "x.de", tmp_path / "x.en") == [
            ("Ein Hund.", "A dog.")
        ]
    assert "7 of 8 lines" in caplog.text and "(line 1, 2, 3, 4, 5, ...)" in caplog.text


def test_lines_break_only_at_newline(tmp_path):
    (tmp_path / "x.de").write_text(
        "Satz\u2028mit Trenner\x0b.\r\nZweiter\x1cSatz.\n", encoding="utf-8"
    )
    (tmp_path / "x.en").write_text("Sentence one.\nSentence two.\n", encoding="utf-8")
    pairs = load_parallel(tmp_path / "x.de", tmp_path / "x.en")
    assert [de for de, _ in pairs] == ["Satz\u2028mit Trenner\x0b.", "Zweiter\x1cSatz."]


def test_byte_order_mark_and_crlf_are_removed_and_gzip_is_read(tmp_path):
    with gzip.open(tmp_path / "x.txt.gz", "wb") as f:
        f.write("\ufeffErste Zeile\r\nZweite Zeile\r\n".encode("utf-8"))
    assert read_lines(tmp_path / "x.txt.gz") == ["Erste Zeile", "Zweite Zeile"]


def test_a_file_with_old_mac_line_endings_is_refused_not_read_as_one_line(tmp_path):
    """300 lines ending in "\\r" alone were one pair; "\\r\\n" and a stray "\\r"
    inside a line are read as before."""
    (tmp_path / "mac.tsv").write_bytes(
        b"".join(b"Hello %d.\tHallo %d.\r" % (i, i) for i in range(300))
    )
    with pytest.raises(CorpusFormatError, match="old Mac line endings") as refused:
        load_tsv(tmp_path / "mac.tsv")
    assert "tr '\\r' '\\n'" in str(refused.value)
    (tmp_path / "ok.txt").write_bytes(b"a\rb\r\nc\n")
    assert read_lines(tmp_path / "ok.txt") == ["a\rb", "c"]


def test_broken_gzip_and_missing_file_are_clear_errors(tmp_path):
    (tmp_path / "x.gz").write_bytes(b"not gzip")
    with pytest.raises(CorpusFormatError, match="not a complete gzip file"):
        read_lines(tmp_path / "x.gz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_lines(tmp_path / "missing.txt")


def test_load_tsv_reads_columns_and_keeps_quotes():
    pairs = load_tsv(TINY / "tiny.tsv")
    assert pairs[2] == ('He said "no".', '他说"不"。')
    assert load_tsv(TINY / "tiny.tsv", src_col=1, tgt_col=0) == [
        (b, a) for a, b in pairs
    ]
    assert load_tsv(TINY / "tiny.tsv", src_col=0, tgt_col=2)[0][1].startswith(
        "CC-BY 2.0"
    )


def test_load_tsv_row_without_the_column_is_an_error_with_its_line(tmp_path):
    (tmp_path / "x.tsv").write_text("a\tb\nc d\n", encoding="utf-8")
    with pytest.raises(
        CorpusFormatError, match=r"x.tsv, line 2: 1 tab-separated field"
    ):
        load_tsv(tmp_path / "x.tsv")
    with pytest.raises(ValueError, match="two different columns"):
        load_tsv(tmp_path / "x.tsv", src_col=1, tgt_col=1)


def test_load_tsv_blank_lines_and_empty_fields_are_reported(tmp_path, caplog):
    (tmp_path / "x.tsv").write_text("a\tb\n\nc\t\n\td\ne\tf\n\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="transformer.data"):
        assert load_tsv(tmp_path / "x.tsv") == [("a", "b"), ("e", "f")]
    assert (
        "4 of 6 lines are blank or have an empty side (line 2, 3, 4, 6)" in caplog.text
    )


# --- splitting ------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=6), st.text(min_size=1, max_size=6)),
        max_size=60,
    ),
    st.integers(0, 3),
)
def test_split_pairs_partitions_by_key_and_is_stable(pairs, seed):
    splits = split_pairs(pairs, seed=seed, val_fraction=0.2, test_fraction=0.2)
    assert Counter(p for part in splits.values() for p in part) == Counter(pairs)
    where = {}
    for name, part in splits.items():
        for src, _ in part:
            assert where.setdefault(src, name) == name  # one split per source sentence
    half = split_pairs(
        pairs[: len(pairs) // 2], seed=seed, val_fraction=0.2, test_fraction=0.2
    )
    for (
        name,
        part,
    ) in half.items():  # a sentence's split does not depend on the rest of the corpus
        assert all(where[src] == name for src, _ in part)


def test_split_pairs_fractions_are_about_right_and_validated():
    pairs = [(f"sentence {i}", f"Satz {i}") for i in range(20_000)]
    sizes = {
        k: len(v)
        for k, v in split_pairs(pairs, val_fraction=0.05, test_fraction=0.1).items()
    }
    assert abs(sizes["val"] - 1_000) < 150 and abs(sizes["test"] - 2_000) < 200
    with pytest.raises(ValueError, match="sum to < 1"):
        split_pairs(pairs, val_fraction=0.5, test_fraction=0.5)
