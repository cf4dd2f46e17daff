"""transformer.visualize and transformer.explorer: attention weights with their labels, head ablation, plots
and the explorer."""

import json

import matplotlib
import pytest
import torch

from transformer.engine.loading import load_checkpoint
from transformer.errors import InputError
from transformer.engine.shipped import load_translator, models_dir
from transformer.model import Transformer, TransformerConfig
from transformer.multihead import MultiHeadAttention
from transformer.tokenizer import BOS_ID
from transformer.visualize import (
    KINDS,
    AttentionMaps,
    attention_maps,
    attention_module,
    attention_weights,
    recording_weights,
    plot_attention,
    zeroed_head,
)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=30,
        tgt_vocab_size=30,
        d_model=16,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_len=32,
    )
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def shipped():
    if not (models_dir() / "multi30k-de-en").is_dir():
        pytest.skip("the shipped model models/multi30k-de-en is missing")
    return load_translator("multi30k-de-en")


def batch():
    src = torch.tensor(
        [[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]
    )  # (B, S) with padding in row 1
    tgt = torch.tensor([[BOS_ID, 4, 5, 6], [BOS_ID, 4, 0, 0]])  # (B, T)
    return src, tgt


def test_attention_weights_have_every_kind_layer_and_head_and_are_distributions(tiny):
    src, tgt = batch()
    w = attention_weights(tiny, src, tgt)
    assert w["encoder"].shape == (2, 2, 4, 5, 5)
    assert w["decoder"].shape == (2, 2, 4, 4, 4)
    assert w["cross"].shape == (2, 2, 4, 4, 5)
    for kind in KINDS:
        torch.testing.assert_close(w[kind].sum(-1), torch.ones(w[kind].shape[:-1]))


def test_decoder_weights_never_reach_a_later_position_and_padding_gets_none(tiny):
    src, tgt = batch()
    w = attention_weights(tiny, src, tgt)
    future = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    assert (w["decoder"][..., future] == 0).all()
    assert (w["cross"][:, 1, ..., 3:] == 0).all() and (
        w["encoder"][:, 1, ..., 3:] == 0
    ).all()


def test_weights_come_from_the_models_own_explicit_attention(tiny, monkeypatch):
    import transformer.multihead

    returned = []
    real = transformer.multihead.attention

    def recording(*args, **kwargs):
        A, weights = real(*args, **kwargs)
        returned.append(weights)
        return A, weights

    monkeypatch.setattr(transformer.multihead, "attention", recording)
    src, tgt = batch()
    w = attention_weights(tiny, src, tgt)
    assert (
        len(returned) == 2 + 2 * 2
    )  # one call per attention block: encoder self, decoder self and cross
    torch.testing.assert_close(w["encoder"][0], returned[0], rtol=0, atol=0)


def test_recording_weights_changes_no_output_and_leaves_no_hook_behind(tiny):
    src, tgt = batch()
    with torch.no_grad():
        fused = tiny(src, tgt)
        with recording_weights(tiny) as weights:
            explicit = tiny(src, tgt)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    blocks = [m for m in tiny.modules() if isinstance(m, MultiHeadAttention)]
    assert set(weights) == set(blocks)  # every block handed over its weights
    assert not any(b._forward_hooks or b._forward_pre_hooks for b in blocks)


def test_zeroed_head_zeroes_exactly_that_heads_slice_and_is_undone(tiny):
    attn = attention_module(tiny, "cross", 1)
    src, tgt = batch()
    with torch.no_grad():
        seen = []
        record = lambda module, args: seen.append(args[0].clone())  # noqa: E731
        handle = attn.W_o.register_forward_pre_hook(record)
        before = tiny(src, tgt)
        handle.remove()
        with zeroed_head(tiny, "cross", 1, 2):
            handle = attn.W_o.register_forward_pre_hook(
                record
            )  # runs after zeroed_head's hook
            during = tiny(src, tgt)
            handle.remove()
        after = tiny(src, tgt)
    D_h = 16 // 4
    assert (seen[1][..., 2 * D_h : 3 * D_h] == 0).all() and seen[0][
        ..., 2 * D_h : 3 * D_h
    ].abs().sum() > 0
    keep = [i for i in range(16) if not 2 * D_h <= i < 3 * D_h]
    torch.testing.assert_close(
        seen[1][..., keep], seen[0][..., keep], rtol=0, atol=0
    )  # layer 1's input is unchanged
    assert not torch.equal(before, during)
    torch.testing.assert_close(before, after, rtol=0, atol=0)


def test_unknown_kind_layer_or_head_says_what_exists(tiny):
    with pytest.raises(ValueError, match="choose one of"):
        attention_module(tiny, "self", 0)
    with pytest.raises(ValueError, match="layer 2 does not exist: choose 0 to 1"):
        attention_module(tiny, "decoder", 2)
    with pytest.raises(ValueError, match="does not exist: choose 0 to 3"):
        with zeroed_head(tiny, "encoder", 0, 4):
            pass


def test_attention_maps_labels_match_the_weight_shapes(shipped):
    maps = attention_maps(shipped, "Zwei Hunde spielen im Schnee.", beam_size=1)
    assert isinstance(maps, AttentionMaps) and maps.translation
    assert maps.target[0] == "<s>" and maps.source == shipped.src_tokenizer.pieces(
        "Zwei Hunde spielen im Schnee."
    )
    for kind in KINDS:
        queries, keys = maps.labels(kind)
        assert maps.weights(kind).shape[-2:] == (len(queries), len(keys))
        assert maps.weights(kind).shape[:2] == (3, 4)


def test_attention_maps_uses_a_given_translation_and_refuses_empty_input(shipped):
    maps = attention_maps(shipped, "Ein Hund.", "A dog.")
    assert maps.translation == "A dog." and maps.target == [
        "<s>"
    ] + shipped.tgt_tokenizer.pieces("A dog.")
    with pytest.raises(ValueError, match="empty"):
        attention_maps(shipped, "   ")


def _maps_and_colour_bars(fig):
    """The figure's heatmap axes and its colour-bar axes."""
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    return [ax for ax in fig.axes if ax not in bars], bars


def test_plot_attention_draws_one_map_or_the_whole_grid(shipped):
    import matplotlib.pyplot as plt

    maps = attention_maps(shipped, "Ein Hund.", "A dog.")
    grid, _ = _maps_and_colour_bars(plot_attention(maps, "cross"))
    assert len(grid) == 3 * 4
    one, _ = _maps_and_colour_bars(plot_attention(maps, "decoder", 2, 1))
    assert len(one) == 1 and one[0].get_title() == "layer 2, head 1"
    assert [t.get_text() for t in one[0].get_xticklabels()] == maps.target
    plt.close("all")


@pytest.mark.parametrize(
    "where, message",
    [
        (dict(layer=99), r"layer 99 does not exist: choose 0 to 2"),
        (dict(layer=-1), r"layer -1 does not exist"),
        (
            dict(layer=0, head="1"),
            r"head='1': give an int from 0 to 3",
        ),
        (dict(head=4), r"head 4 does not exist"),
        (dict(cell=-1), r"cell=-1, fontsize=9: must be finite, > 0"),
        (dict(fontsize=0), r"fontsize=0: must be finite, > 0"),
        (dict(cell=float("inf")), r"cell=inf, fontsize=9: must be finite, > 0"),
        (
            dict(cell=1000.0),
            r"cell=1000.0 makes a figure \d+ in wide, more than matplotlib draws",
        ),
        (dict(fontsize=1e6), r"fontsize=1000000.0: at most 500 points"),
        (dict(fig="x"), r"fig: a matplotlib Figure to draw on, or None, not 'x'"),
    ],
)
def test_plot_attention_refuses_a_map_that_does_not_exist_in_one_line(
    shipped, where, message
):
    maps = attention_maps(shipped, "Ein Hund.", "A dog.")
    with pytest.raises(InputError, match=message):
        plot_attention(maps, "cross", **where)


def test_plot_attention_names_the_query_and_key_axes_and_has_a_colour_bar(shipped):
    import matplotlib.pyplot as plt

    maps = attention_maps(shipped, "Ein Hund.", "A dog.")
    for kind, query, key in (
        ("encoder", "source", "source"),
        ("decoder", "decoder input", "decoder input"),
        ("cross", "decoder input", "source"),
    ):
        for fig in (plot_attention(maps, kind), plot_attention(maps, kind, 1, 2)):
            heatmaps, bars = _maps_and_colour_bars(fig)
            assert len(bars) == 1 and bars[0].get_ylabel() == "attention weight"
            assert bars[0].get_ylim() == (0.0, 1.0)  # one scale for every map
            (y,) = {ax.get_ylabel() for ax in heatmaps} - {""}  # one name per axis
            (x,) = {ax.get_xlabel() for ax in heatmaps} - {""}
            assert y.startswith("query") and query in y
            assert x.startswith("key") and key in x
            # in a grid, the left column names the query axis, the bottom row the key axis
            assert all(
                bool(ax.get_ylabel()) == ax.get_subplotspec().is_first_col()
                for ax in heatmaps
            )
            assert all(
                bool(ax.get_xlabel()) == ax.get_subplotspec().is_last_row()
                for ax in heatmaps
            )
            plt.close(fig)


def test_explorer_links_every_control_to_its_stacks_in_the_browser(shipped):
    import ipywidgets as W

    from transformer.explorer import attention_explorer

    box = attention_explorer(shipped, ["Ein Hund."], dpi=30)
    sentence, controls, captions, pictures, own = box.children
    kind, layer, head = controls.children
    images = [
        img
        for k in pictures.children[0].children
        for l in k.children
        for img in l.children
    ]
    assert len(images) == 3 * 3 * 4 and all(
        isinstance(i, W.Image) and i.value[:4] == b"\x89PNG" for i in images
    )
    sources = {(link.source[0].model_id, link.source[1]) for link in box._links}
    assert {(c.model_id, "index") for c in (sentence, kind, layer, head)} <= sources
    assert (
        all(type(link).__name__ == "Link" for link in box._links)
        and len(box._links) == 2 + 1 + 3 + 9
    )
    text, button = own.children
    text.value = "Zwei Katzen schlafen."
    button.click()  # what a reader's click does in a live kernel
    assert (
        len(sentence.options) == 2
        and sentence.index == 1
        and len(pictures.children) == 2
    )
    assert (
        "Zwei Katzen schlafen." in captions.children[1].value
        and len(box._links) == 2 * (2 + 1 + 3 + 9) - 2
    )


def test_the_stored_head_ablation_table_covers_every_head():
    path = models_dir() / "multi30k-de-en" / "analysis" / "head_ablation.json"
    if not path.is_file():
        pytest.skip(f"{path} is missing: run tools/head_ablation.py")
    table = json.loads(path.read_text())
    heads = {(r["kind"], r["layer"], r["head"]) for r in table["heads"]}
    assert heads == {(k, i, j) for k in KINDS for i in range(3) for j in range(4)}
    assert table["sentences"] == 1000 and 0 < table["baseline"]["bleu"] < 100
    # every row carries its paired test against the baseline, uncorrected, for chapter 14
    assert all(0 < r["p_value"] <= 1 for r in table["heads"])
    assert table["resamples"] >= 1000


def test_the_explorer_shows_markup_in_a_sentence_as_text(tiny_run, monkeypatch):
    pytest.importorskip("ipywidgets")
    import transformer.explorer as explorer

    monkeypatch.setattr(
        explorer, "_pngs", lambda maps, kind, dpi: [[b""] * 2] * 1
    )  # the pictures are not what is tested
    box = explorer.attention_explorer(
        load_checkpoint(tiny_run), ["Ein <b>Hund</b> & eine Katze."]
    )
    caption = box.children[2].children[0].value
    assert (
        "Ein &lt;b&gt;Hund&lt;/b&gt; &amp; eine Katze." in caption
        and "<b>Hund" not in caption
    )


def test_the_explorer_offers_the_deeper_stacks_layers_and_says_where_the_other_has_none(
    tiny_run,
):
    """A model with 1 encoder and 2 decoder layers: the layer dropdown offers 0 and 1
    (it took the encoder's count and hid the decoder's second layer), and the encoder's
    stack says at layer 1 that it has one layer, where it showed nothing."""
    pytest.importorskip("ipywidgets")
    import dataclasses

    import ipywidgets as W

    from transformer.engine.model_config import ModelConfig, build_model
    from transformer.explorer import attention_explorer

    ckpt = load_checkpoint(tiny_run)
    size = ckpt.src_tokenizer.vocab_size
    deeper = build_model(ModelConfig(size, size, 16, 2, 1, 2, 32, max_len=64)).eval()
    box = attention_explorer(
        dataclasses.replace(ckpt, model=deeper), ["Ein Hund."], dpi=10
    )
    layer = box.children[1].children[1]
    encoder, decoder, cross = box.children[3].children[0].children
    assert layer.options == (0, 1)
    assert isinstance(
        encoder.children[1], W.HTML
    ) and "the encoder's layers are 0 to 0" in (encoder.children[1].value)
    assert all(
        isinstance(row, W.Stack) and len(row.children) == 2
        for stack in (decoder, cross)
        for row in stack.children
    )


def test_plot_attention_of_one_layer_draws_its_heads_and_of_one_head_its_layers(tiny):
    """Only one of layer and head drew the other at 0 (one map): now a column of the
    grid (every head of the layer) or a row (the head in every layer)."""
    import matplotlib.pyplot as plt

    src, tgt = batch()
    w = attention_weights(tiny, src[:1], tgt[:1])
    pieces = (
        [str(i) for i in range(src.shape[1])],
        [str(i) for i in range(tgt.shape[1])],
    )
    maps = AttentionMaps("s", "t", *pieces, *(w[k][:, 0] for k in KINDS))
    for args, titles in (
        ({"layer": 1}, [f"layer 1, head {j}" for j in range(4)]),
        ({"head": 2}, ["layer 0, head 2", "layer 1, head 2"]),
        ({"layer": 1, "head": 2}, ["layer 1, head 2"]),
    ):
        fig = plot_attention(maps, "cross", **args)
        assert [ax.get_title() for ax in fig.axes if ax.images] == titles, args
        plt.close(fig)


def test_reading_the_weights_in_the_middle_of_training_leaves_dropout_on(tiny):
    tiny.train()
    try:
        attention_weights(tiny, *batch())
        assert all(m.training for m in tiny.modules())
    finally:
        tiny.eval()


def test_the_explorers_maps_drawn_on_one_figure_equal_each_map_drawn_on_its_own():
    """`_pngs` lays a kind's figure out once and redraws it per (layer, head): every map,
    its title included, must come out as a figure of its own would draw it."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    import transformer.explorer as explorer
    import transformer.visualize as visualize

    maps = attention_maps(load_translator("multi30k-de-en"), "Ein Hund läuft.")
    drawn = explorer._pngs(maps, "cross", dpi=48)
    for i, j in ((0, 0), (2, 3)):
        fig = plot_attention(maps, "cross", i, j, cell=0.2, fontsize=7)
        fig.axes[0].set_title("")
        fig.suptitle(
            f"{visualize.KIND_NAMES['cross']}, layer {i}, head {j}", fontsize=9
        )
        raw = io.BytesIO()
        fig.savefig(raw, format="png", dpi=48)
        plt.close(fig)
        alone = Image.open(raw).convert("RGB").quantize(64)
        picture = Image.open(io.BytesIO(drawn[i][j]))
        assert picture.tobytes() == alone.tobytes(), (i, j)
