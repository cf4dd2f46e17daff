"""The translator box of the rendered book (chapters 14 and 15), used as a reader uses it: headless Chromium,
the built book served on 127.0.0.1, every other host refused.

Forty sentences (twenty test sentences of each shipped model, among them the two the box starts with) are typed
into chapter 15's box; each translation must equal Python's greedy one exactly, the attention map must change
with the sentence, and the page must log no error. Prints the page's extra download and the time to translate a
fifteen-word sentence once the model is loaded. Needs Chromium and playwright, as tests/test_book_browser.py.

Then the box as a reader first meets it, on a fresh page of chapter 15 on a 2x screen: nothing of the runtime is
fetched before the first translation; Enter translates; a progress bar counts the bytes of the download; the time
shown is the translation's alone; the map is drawn at the screen's pixel density with a labelled colour scale;
Chinese is drawn with the font the book ships. And the odd inputs of a reader: an empty sentence clears the last
map, a sentence longer than the model reads says that it was cut, a model switched while the first one loads never
shows that one's translation, and a sentence starting with a byte-order mark (or other characters Python strips)
translates as `transformer translate` translates it. Prints the download's bytes and the load and translation times.
"""

import json
import time
import unicodedata
from urllib.parse import urlsplit

import pytest

from transformer.engine.shipped import load_translator
from transformer.engine.corpora import split_pairs_for
from transformer.translation import translate
from transformer.engine.command_input import read_input_lines

PAGE = "notebooks/15_end_to_end.html"
FIRST = {
    "multi30k-de-en": "Ein Mann fährt mit dem Fahrrad.",
    "tatoeba-en-zh": "I like to read books.",
}
TEST_SPLIT = {"multi30k-de-en": "test_2016_flickr", "tatoeba-en-zh": "test"}
FIFTEEN_WORDS = "Ein kleines Mädchen in einem roten Kleid läuft mit ihrem Hund über eine grüne Wiese."
DONE = ".course-translator[data-state=done], .course-translator[data-state=failed]"


def sentences(name: str, checkpoint) -> list[str]:
    test = [
        s for s, _ in split_pairs_for(checkpoint.train_config.data, TEST_SPLIT[name])
    ]
    return [FIRST[name]] + test[:19]


def run_box(page, model: str, sentence: str) -> dict:
    page.select_option(".ct-model", model)
    page.fill(".ct-input", sentence)
    page.evaluate("document.querySelector('.course-translator').dataset.state = 'busy'")
    page.click(".ct-go")
    page.wait_for_selector(DONE, timeout=120_000)
    assert page.get_attribute(".course-translator", "data-state") == "done", (
        page.inner_text(".ct-status")
    )
    return {
        "translation": page.inner_text(".ct-output"),
        "status": page.inner_text(".ct-status"),
        "map": page.get_attribute(".ct-map", "data-fingerprint"),
    }


def test_forty_typed_sentences_translate_as_python_does(
    built_book, book_site, open_offline
):
    page, errors, refused = open_offline(book_site + PAGE)
    page.wait_for_selector(".course-translator[data-state=ready]")
    assert "nothing you type is sent anywhere" in page.inner_text(".ct-status")
    mismatches, maps, checked = [], [], 0
    for name in FIRST:
        checkpoint = load_translator(name)
        batch = sentences(name, checkpoint)
        expected = translate(checkpoint, batch, beam_size=1)
        for sentence, want in zip(batch, expected):
            got = run_box(page, name, sentence)
            checked += 1
            maps.append(got["map"])
            if got["translation"] != want:
                mismatches.append((name, sentence, got["translation"], want))
    assert checked == 40
    assert not mismatches, (
        f"{len(mismatches)} of 40 differ from Python, e.g. {mismatches[0]}"
    )
    assert len(set(maps)) >= 38, "the attention map should change with the sentence"

    timed = run_box(
        page, "multi30k-de-en", FIFTEEN_WORDS
    )  # the model is loaded: this is the translation alone
    seconds = float(timed["status"].split("greedy, ")[1].split(" s")[0])
    static = built_book / "_static"
    runtime = sum(
        f.stat().st_size
        for d in ("onnxruntime-web", "sentencepiece", "translator")
        for f in (static / d).iterdir()
    )
    models = {
        d.name: sum(f.stat().st_size for f in d.iterdir())
        for d in (static / "translator-models").iterdir()
    }
    print(
        f"\nin-browser translator: runtime {runtime / 1e6:.1f} MB, models "
        + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(models.items()))
        + f"; a 15-word sentence in {seconds:.2f} s after loading (goal: under 2 s)"
    )
    assert seconds < 4, (
        f"{seconds} s for one sentence (goal 2 s; 4 s allows for a loaded machine)"
    )
    page.close()
    assert not errors, errors
    assert not refused, f"the page asked other hosts for {refused[:3]}"


def test_the_menu_names_each_model_by_its_languages(built_book, book_site, chromium):
    page, errors, _ = fresh_box(chromium, book_site + PAGE)
    try:
        page.wait_for_function(
            "[...document.querySelectorAll('.ct-model option')].every(o => o.textContent.includes('→'))",
            timeout=10_000,
        )
        menu = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('.ct-model option')].map(o => [o.value, o.textContent]))"
        )
    finally:
        page.context.close()
    assert menu == {
        "tatoeba-en-zh": "English → Chinese",
        "multi30k-de-en": "German → English",
    }, menu
    assert not errors, errors


def test_the_box_says_what_to_do_when_the_book_is_opened_from_disk(
    built_book, chromium
):
    page = chromium.new_page()
    page.goto((built_book / PAGE).as_uri(), wait_until="load")
    text = page.inner_text(".course-translator")
    page.close()
    assert "served over HTTP" in text and "http.server" in text


def test_the_exported_models_in_the_book_are_those_of_models_dir(built_book):
    from transformer.engine.shipped import models_dir
    from transformer.engine.onnx_export import weights_sha256

    for name in FIRST:
        meta = json.loads(
            (
                built_book / "_static" / "translator-models" / name / "translator.json"
            ).read_text()
        )
        assert meta["weights_sha256"] == weights_sha256(models_dir() / name)
        assert meta["download_bytes"]["model"] > 1_000_000


# ---- the box as a reader first meets it ------------------------------------------------------------------

# what only a translation needs (the box reads the models' small translator.json at once, for their sizes)
RUNTIME_PATHS = (
    "/_static/onnxruntime-web/",
    "/_static/sentencepiece/",
    ".onnx",
    ".model",
    "/_static/fonts/Noto",
)
SAMPLE_PROGRESS = """() => { window.progressSeen = []; const bar = document.querySelector('.ct-progress');
  window.progressTimer = setInterval(() => { if (bar && bar.offsetParent !== null)
    window.progressSeen.push([bar.value, bar.max, document.querySelector('.ct-progress-text').textContent]); }, 20); }"""


def fresh_box(browser, url: str, scale: int = 1):
    """A new page (its own cache) at url, every host but localhost refused -> (page, errors, requests)."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, device_scale_factor=scale
    )
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []

    def only_localhost(route):
        requests.append(route.request.url)
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            route.abort()

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", only_localhost)
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    page.wait_for_selector(".course-translator[data-state=ready]")
    return page, errors, requests


def status_seconds(status: str) -> float:
    return float(status.split("greedy, ")[1].split(" s")[0])


@pytest.fixture(scope="module")
def first_use(built_book, book_site, chromium):
    """Chapter 15 opened on a 2x screen; the German sample translated by pressing Enter, then once more."""
    page, errors, requests = fresh_box(chromium, book_site + PAGE, scale=2)
    page.wait_for_timeout(500)
    at_open = [u for u in requests if any(p in u for p in RUNTIME_PATHS)]
    page.select_option(".ct-model", "multi30k-de-en")
    page.evaluate(SAMPLE_PROGRESS)
    page.evaluate("document.querySelector('.course-translator').dataset.state = 'busy'")
    started = time.perf_counter()
    page.press(".ct-input", "Enter")
    page.wait_for_selector(DONE, timeout=30_000)
    wall = time.perf_counter() - started
    progress = page.evaluate(
        "clearInterval(window.progressTimer) || window.progressSeen"
    )
    first = page.inner_text(".ct-status")
    again = run_box(page, "multi30k-de-en", FIRST["multi30k-de-en"])
    meta = json.loads(
        (
            built_book / "_static/translator-models/multi30k-de-en/translator.json"
        ).read_text()
    )
    yield dict(
        page=page,
        errors=errors,
        at_open=at_open,
        wall=wall,
        progress=progress,
        first=first,
        again=again["status"],
        output=again["translation"],
        meta=meta,
    )
    page.context.close()


def test_the_runtime_and_the_model_are_fetched_on_first_use_not_on_page_open(first_use):
    assert not first_use["at_open"], (
        f"opening the page fetched {first_use['at_open']} before anyone translated"
    )


def test_enter_in_the_input_translates(first_use):
    assert first_use["output"] == "A man is riding a bicycle."
    assert "greedy" in first_use["first"], first_use["first"]


def test_a_progress_bar_counts_the_bytes_of_the_first_download(first_use):
    sizes = first_use["meta"]["download_bytes"]
    seen = first_use["progress"]
    assert seen, "no progress bar was visible while the model loaded"
    assert {m for _, m, _ in seen} == {sizes["model"] + sizes["runtime"]}
    assert any(0 < v < m for v, m, _ in seen), (
        f"the bar never moved between 0 and full: {seen[:3]}…"
    )
    assert [v for v, _, _ in seen] == sorted(v for v, _, _ in seen), (
        "the bar went backwards"
    )
    assert seen[-1][2].endswith(
        f" of {(sizes['model'] + sizes['runtime']) / 1e6:.1f} MB"
    ), seen[-1][2]


def test_the_time_shown_is_the_translation_without_the_load(first_use):
    first, again = (
        status_seconds(first_use["first"]),
        status_seconds(first_use["again"]),
    )
    assert first < 0.5 * first_use["wall"], (
        f"the first translation reports {first} s of a {first_use['wall']:.1f} s wait: it counts the load"
    )
    load = float(first_use["first"].split("after ")[1].split(" s")[0])
    print(
        f"\nin-browser translator, first use on loopback: {first_use['wall']:.2f} s from Enter to the translation, "
        f"of which {load:.2f} s loading the model and runtime; translating {first:.2f} s (again: {again:.2f} s)"
    )
    assert "after" not in first_use["again"], (
        "a second translation has no load to report"
    )


def test_the_map_is_drawn_at_the_screens_pixel_density_with_a_labelled_colour_scale(
    first_use,
):
    page = first_use["page"]
    canvas = page.evaluate(
        "() => { const c = document.querySelector('.ct-map'); return [c.width, parseFloat(c.style.width) || c.clientWidth]; }"
    )
    assert canvas[0] == round(2 * canvas[1]), (
        f"canvas of {canvas[0]} px for {canvas[1]} CSS px on a 2x screen"
    )
    assert page.is_visible(".ct-scale")
    scale = page.inner_text(".ct-scale")
    assert "attention weight" in scale and "0" in scale and "1" in scale, scale


def test_chinese_is_drawn_with_the_books_own_font(first_use):
    """The output's glyphs come from the web font (a custom font for Chromium), not from the system's fonts."""
    page = first_use["page"]
    got = run_box(page, "tatoeba-en-zh", FIRST["tatoeba-en-zh"])
    assert any("\u4e00" <= c <= "\u9fff" for c in got["translation"]), got
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    node = cdp.send(
        "DOM.querySelector",
        {
            "nodeId": cdp.send("DOM.getDocument")["root"]["nodeId"],
            "selector": ".ct-output",
        },
    )["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    assert any(f["isCustomFont"] and "CJK" in f["familyName"] for f in fonts), fonts
    assert page.evaluate("document.fonts.check('12px \"Course CJK\"', '猫')")


def test_the_books_cjk_font_covers_the_chinese_models_vocabulary(built_book):
    from fontTools.ttLib import TTFont

    checkpoint = load_translator("tatoeba-en-zh")
    vocab = checkpoint.tgt_tokenizer
    pieces = [vocab.id_to_piece(i) for i in range(vocab.vocab_size)]
    font = TTFont(built_book / "_static/fonts/NotoSansCJKsc-course-subset.otf")
    covered = set(font.getBestCmap())
    wanted = {ord(c) for p in pieces for c in p if ord(c) >= 0x2E80 and c != "\u2581"}
    missing = sorted(chr(c) for c in wanted - covered)
    assert not missing, (
        f"{len(missing)} characters of the vocabulary have no glyph: {missing[:20]}"
    )


def test_an_empty_sentence_clears_the_last_map_and_a_later_menu_change_is_harmless(
    first_use,
):
    page = first_use["page"]
    run_box(page, "multi30k-de-en", FIRST["multi30k-de-en"])
    assert page.is_visible(".ct-map")
    got = run_box(page, "multi30k-de-en", "   ")
    assert got["translation"] == ""
    assert not page.is_visible(".ct-map") and not page.is_visible(".ct-controls")
    before = len(first_use["errors"])
    page.evaluate(
        "for (const s of document.querySelectorAll('.ct-layer, .ct-head')) s.dispatchEvent(new Event('change'))"
    )
    page.wait_for_timeout(200)
    assert first_use["errors"][before:] == []


def test_a_sentence_longer_than_the_model_reads_says_it_was_cut(first_use):
    page = first_use["page"]
    sentence = " ".join([FIRST["multi30k-de-en"]] * 30)
    checkpoint = load_translator("multi30k-de-en")
    cuts = []
    want = translate(
        checkpoint, [sentence], beam_size=1, on_truncate=lambda *a: cuts.append(a)
    )
    got = run_box(page, "multi30k-de-en", sentence)
    ((_, tokens, kept),) = cuts
    assert (
        f"has {tokens} tokens" in got["status"]
        and f"only its first {kept}" in got["status"]
    ), got["status"]
    assert got["translation"] == want[0]


@pytest.mark.parametrize(
    "raw",
    ["\ufeff{}", "{}\x1f", "\x85{} ", "NFD"],
    ids=["byte-order-mark", "unit-separator", "next-line", "decomposed"],
)
def test_a_sentence_translates_as_the_command_line_reads_it(first_use, raw):
    page = first_use["page"]
    first = FIRST["multi30k-de-en"]
    # NFD: "ä" as "a" and a combining mark (a Mac's file names, some editors)
    sentence = (
        unicodedata.normalize("NFD", first) if raw == "NFD" else raw.format(first)
    )
    checkpoint = load_translator("multi30k-de-en")
    lines = read_input_lines(
        sentence.encode("utf-8")
    )  # what `transformer translate < file` reads
    want = translate(checkpoint, lines, beam_size=1)
    got = run_box(page, "multi30k-de-en", sentence)
    assert got["translation"] == want[0] == "A man is riding a bicycle."


def test_switching_models_while_the_first_loads_never_shows_its_translation(
    built_book, book_site, chromium
):
    page, errors, _ = fresh_box(chromium, book_site + PAGE)
    try:
        page.select_option(".ct-model", "multi30k-de-en")
        page.click(".ct-go")
        page.wait_for_function(
            "document.querySelector('.ct-progress').value > 0", timeout=30_000
        )
        page.select_option(
            ".ct-model", "tatoeba-en-zh"
        )  # while the German model still loads
        # until the German model has loaded (or, on a page that shows its answer, until that answer is there)
        page.wait_for_function(
            "document.querySelector('.ct-output').textContent !== '' || "
            "performance.getEntriesByType('resource').some(e => e.name.endsWith('multi30k-de-en/decoder.onnx') && e.responseEnd > 0)",
            timeout=60_000,
        )
        page.wait_for_timeout(
            1500
        )  # the sessions are made from the bytes, then the sentence is translated
        assert page.inner_text(".ct-output") == "", (
            f"{page.inner_text('.ct-output')!r} shown under {page.input_value('.ct-model')}"
        )
        assert page.input_value(".ct-model") == "tatoeba-en-zh"
        got = run_box(page, "tatoeba-en-zh", FIRST["tatoeba-en-zh"])
        assert (
            got["status"].startswith("tatoeba-en-zh") and "en → zh" in got["status"]
        ), got["status"]
    finally:
        page.context.close()
    assert not errors, errors
