"""The shipped translators as ONNX (transformer.engine.onnx_export, appendix 96): the files `transformer export-onnx`
writes compute what the PyTorch model computes, and translate as it does.

Both models are exported once, through the command line, into a temporary folder (about 10 s each).
"""

import dataclasses
import json

import numpy as np
import pytest
import torch

from transformer.engine.shipped import SHIPPED_MODELS, load_translator
from transformer.engine.cli import main
from transformer.engine.corpora import split_pairs_for
from transformer.translation import translate
from transformer.engine.onnx_export import weights_sha256
from transformer.engine.onnx_translator import OnnxTranslator
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.visualize import recording_weights
from helpers import shipped_settings

onnxruntime = pytest.importorskip("onnxruntime")

TEST_SPLIT = {"multi30k-de-en": "test_2016_flickr", "tatoeba-en-zh": "test"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{model name: (checkpoint, ONNX folder)}, exported with `transformer export-onnx`."""
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name in SHIPPED_MODELS:
        assert main(["export-onnx", "--model", name, "--out", str(root / name)]) == 0
        out[name] = load_translator(name), root / name
    return out


def test_export_writes_both_graphs_the_tokenizers_and_what_the_page_needs(exported):
    for name, (checkpoint, folder) in exported.items():
        meta = json.loads((folder / "translator.json").read_text(encoding="utf-8"))
        c = checkpoint.model.config
        assert (
            meta["num_layers"] == c.num_decoder_layers
            and meta["num_heads"] == c.num_heads
        )
        assert meta["weights_sha256"] == weights_sha256(checkpoint.path)
        assert (folder / "source.model").read_bytes() == checkpoint.src_tokenizer._proto
        assert (folder / "target.model").read_bytes() == checkpoint.tgt_tokenizer._proto
        # float16 initializers: the two graphs together are smaller than the float32 weights would be
        params = sum(p.numel() for p in checkpoint.model.parameters())
        size = (folder / "encoder.onnx").stat().st_size + (
            folder / "decoder.onnx"
        ).stat().st_size
        assert size < 4 * params, f"{name}: {size / 1e6:.1f} MB for {params} parameters"


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_scores_memory_and_cross_attention_match_pytorch(exported, name):
    checkpoint, folder = exported[name]
    model = checkpoint.model
    pairs = split_pairs_for(checkpoint.train_config.data, "val")[:6]
    ids = checkpoint.src_tokenizer.encode_batch([s for s, _ in pairs])
    src = torch.full(
        (len(ids), max(map(len, ids))), PAD_ID
    )  # padded: the mask must be in the graph
    for r, x in enumerate(ids):
        src[r, : len(x)] = torch.tensor(x)
    tgt = torch.tensor(
        [
            [BOS_ID] + (checkpoint.tgt_tokenizer.encode(t) + [5] * 7)[:7]
            for _, t in pairs
        ]
    )
    with torch.no_grad(), recording_weights(model) as weights:
        memory = model.encode(src, model.make_src_mask(src))
        h = model.decode(
            tgt, memory, model.make_src_mask(src), model.make_tgt_mask(tgt)
        )
        scores = model.generator(h)[:, -1]
    cross = torch.stack([weights[layer.cross_attn] for layer in model.decoder.layers])

    t = OnnxTranslator(folder)
    (memory_ort,) = t.encoder.run(None, {"src": src.numpy()})
    scores_ort, cross_ort = t.step(memory_ort, src.numpy(), tgt.numpy())
    assert np.abs(memory_ort - memory.numpy()).max() < 1e-4
    assert np.abs(scores_ort - scores.numpy()).max() < 1e-4
    assert cross_ort.shape == tuple(cross.shape)
    assert np.abs(cross_ort - cross.numpy()).max() < 1e-5
    padded = cross_ort * (src == PAD_ID).numpy()[None, :, None, None, :]
    assert np.abs(padded).max() == 0.0, "a padded source position got attention weight"


def test_the_decoder_graph_returns_its_weights_outside_any_context(exported):
    """DecoderGraph keeps the weights of its own pass; it needs no caller to switch
    the blocks to the explicit path first, and leaves them as they were."""
    from transformer.engine.onnx_export import DecoderGraph

    model = exported[SHIPPED_MODELS[0]][0].model
    src = torch.tensor([[5, 6, 7, 8], [9, 10, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 11], [BOS_ID, 12]])
    with torch.no_grad():
        memory = model.encode(src, model.make_src_mask(src))
        scores, cross = DecoderGraph(model)(memory, src, tgt)
    layers, heads = model.config.num_decoder_layers, model.config.num_heads
    assert scores.shape == (2, model.config.tgt_vocab_size)
    assert cross.shape == (layers, 2, heads, 2, 4)
    torch.testing.assert_close(cross.sum(-1), torch.ones(layers, 2, heads, 2))
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()), (
        "a block was left with a hook"
    )


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_greedy_translations_of_200_test_sentences_equal_pytorchs(exported, name):
    checkpoint, folder = exported[name]
    sources = [
        s
        for s, _ in split_pairs_for(checkpoint.train_config.data, TEST_SPLIT[name])[
            :200
        ]
    ]
    ours = OnnxTranslator(folder).translate(sources)
    reference = translate(checkpoint, sources, beam_size=1)
    different = [(s, a, b) for s, a, b in zip(sources, ours, reference) if a != b]
    assert not different, f"{len(different)} of 200 differ, e.g. {different[0]}"


def test_an_empty_sentence_gives_an_empty_translation_and_a_long_one_is_cut(exported):
    checkpoint, folder = exported["multi30k-de-en"]
    t = OnnxTranslator(folder)
    long = " ".join(["Hund"] * 400)
    with pytest.warns(UserWarning, match="sentence 3 has 400 tokens but the model"):
        assert t.translate(["", "  ", long])[:2] == ["", ""]


def test_export_of_a_model_that_does_not_exist_is_one_error_line(tmp_path, capsys):
    assert (
        main(
            [
                "export-onnx",
                "--model",
                str(tmp_path / "nothing"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no model at")
    assert not (tmp_path / "out").exists()


def test_a_model_with_every_option_of_chapters_16_and_17_exports_and_computes_what_pytorch_does(
    tmp_path,
):
    """RMSNorm, rotary positions, SwiGLU, no biases and grouped-query attention go through the same export."""
    import shutil

    from transformer.engine.loading import load_checkpoint
    from transformer.engine.model_files import save_model_files
    from transformer.engine.shipped import models_dir
    from transformer.engine.config import ModelSettings
    from transformer.engine.model_config import ModelConfig, build_model

    shipped = models_dir() / "multi30k-de-en"
    folder = tmp_path / "modern"
    folder.mkdir()
    for name in ("tokenizer.model", "train_config.json"):
        shutil.copyfile(shipped / name, folder / name)
    base = shipped_settings()
    config = ModelConfig(
        **{
            **base,
            "d_model": 32,
            "num_heads": 4,
            "d_ff": 64,
            "num_encoder_layers": 2,
            "num_decoder_layers": 2,
            "norm": "rms",
            "positions": "rotary",
            "feed_forward": "swiglu",
            "bias": False,
            "kv_heads": 2,
        }
    )
    train = json.loads((folder / "train_config.json").read_text())
    train["model"] = {  # this model's
        f.name: getattr(config, f.name) for f in dataclasses.fields(ModelSettings)
    }
    (folder / "train_config.json").write_text(json.dumps(train))
    torch.manual_seed(0)
    save_model_files(build_model(config), folder)  # the weights and their config
    assert (
        main(["export-onnx", "--model", str(folder), "--out", str(tmp_path / "onnx")])
        == 0
    )

    checkpoint = load_checkpoint(folder)
    first = checkpoint.src_tokenizer.encode("Zwei Hunde spielen im Schnee.") + [EOS_ID]
    second = [7, 8, 9, EOS_ID] + [PAD_ID] * (
        len(first) - 4
    )  # padded: the mask must be in the graph
    src = torch.tensor([first, second])
    tgt = torch.tensor([[BOS_ID, 11, 12, 13], [BOS_ID, 14, 15, 16]])
    with torch.no_grad():
        memory = checkpoint.model.encode(src, checkpoint.model.make_src_mask(src))
        h = checkpoint.model.decode(
            tgt,
            memory,
            checkpoint.model.make_src_mask(src),
            checkpoint.model.make_tgt_mask(tgt),
        )
    t = OnnxTranslator(tmp_path / "onnx")
    (memory_ort,) = t.encoder.run(None, {"src": src.numpy()})
    scores_ort, _ = t.step(memory_ort, src.numpy(), tgt.numpy())
    assert np.abs(memory_ort - memory.numpy()).max() < 1e-4
    assert (
        np.abs(scores_ort - checkpoint.model.generator(h)[:, -1].detach().numpy()).max()
        < 1e-4
    )
    sentences = ["Ein Hund läuft.", "Eine Frau liest ein Buch im Park."]
    assert t.translate(sentences) == translate(checkpoint, sentences, beam_size=1)
