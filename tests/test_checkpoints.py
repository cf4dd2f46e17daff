"""The checkpoint module (appendix 93): what a model folder must hold for `load_checkpoint` to trust it."""

import dataclasses
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file, save_model

from helpers import ROOT, SENTENCE, edit_json, latest
from transformer.engine.checkpoints import (
    load_checkpoint,
    read_train_config,
    save_model_files,
)
from transformer.engine.config import ModelSettings, check_resume_compatible
from transformer.decoding import translate
from transformer.engine.shipped import models_dir
from transformer.errors import CheckpointError, InputError
from transformer.model import Transformer
from transformer.modern import ModelConfig


@pytest.fixture
def modern_folder(tmp_path):
    """The shipped de-en folder with the weights of a modern-block model of its shape (random, not trained)."""
    folder = tmp_path / "modern"
    shutil.copytree(models_dir() / "multi30k-de-en", folder)
    shipped = json.loads((folder / "model_config.json").read_text())
    config = ModelConfig(
        **{
            **shipped,
            "norm": "rms",
            "feed_forward": "swiglu",
            "bias": False,
            "kv_heads": 2,
        }
    )
    save_model_files(Transformer(config), folder)
    return folder


def test_a_modern_model_folder_loads_as_saved(modern_folder):
    model = load_checkpoint(modern_folder).model
    assert (
        model.config.feed_forward == "swiglu"
        and model.decoder.layers[0].self_attn.num_kv_heads == 2
    )


def test_a_model_built_with_parts_its_config_does_not_describe_is_not_saved(tmp_path):
    """RMSNorm and a LayerNorm without bias hold the same tensors: saved, such a model
    would load as the model its config describes, silently another one."""
    from transformer.modern import RMSNorm

    config = ModelConfig(30, 30, d_model=16, num_heads=2, d_ff=32, bias=False)
    other = dataclasses.replace(config.parts(), norm=RMSNorm)
    with pytest.raises(InputError, match="parts of its own"):
        save_model_files(Transformer(config, other), tmp_path)
    assert not any(tmp_path.iterdir())
    save_model_files(Transformer(config), tmp_path)  # its config's parts: saved


@pytest.mark.parametrize(
    "setting, value", [("d_ff", 2048), ("kv_heads", 1), ("bias", True)]
)
def test_every_shape_is_checked_against_the_config_whatever_the_parts(
    modern_folder, setting, value
):
    """Weights saved without the config in their metadata (as before it was kept) are still checked tensor by
    tensor against the model the config describes: a SwiGLU's d_ff, the key/value heads, the biases."""
    model = load_checkpoint(modern_folder).model
    save_model(model, str(modern_folder / "model.safetensors"))  # no metadata
    edited = {
        **json.loads((modern_folder / "model_config.json").read_text()),
        setting: value,
    }
    (modern_folder / "model_config.json").write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="model_config.json"):
        load_checkpoint(modern_folder)


# ---------------------------------------------------------------- a model folder: what is tied, what loads as before


def test_weights_saved_before_the_config_was_tied_to_them_load_as_before_and_their_sizes_are_still_checked(
    tiny_run, tmp_path
):
    """Weights written before model.safetensors carried its model config load as they always did, and the checks that
    need no tie still hold: max_len against the training data, and the memory a config asks for."""
    model = tmp_path / "old"
    shutil.copytree(latest(tiny_run), model)
    tensors = load_file(str(model / "model.safetensors"))
    save_file(
        tensors, str(model / "model.safetensors")
    )  # no metadata: as the course's first checkpoints were
    assert translate(load_checkpoint(model), [SENTENCE]) == translate(
        load_checkpoint(tiny_run), [SENTENCE]
    )
    edit_json(model / "model_config.json", max_len=1)
    with pytest.raises(
        CheckpointError,
        match="says max_len=1, but the model was trained on sentences of up to 64",
    ):
        load_checkpoint(model)
    edit_json(model / "model_config.json", max_len=2**40)
    with pytest.raises(
        CheckpointError, match=r"describes needs about [\d,.]+ GB, but cpu memory has"
    ):
        load_checkpoint(model)


def test_the_shipped_models_carry_the_config_they_were_saved_with():
    from safetensors import safe_open

    for name in ("multi30k-de-en", "tatoeba-en-zh"):
        folder = ROOT / "models" / name
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            saved = json.loads(f.metadata()["model_config"])
        written = ModelConfig(
            **json.loads((folder / "model_config.json").read_text())
        )  # defaults filled in
        assert saved == written.to_dict(), name


def test_a_checkpoint_whose_config_names_only_some_model_settings_loads_and_resumes_as_before(
    tiny_run, tmp_path
):
    """Before the [model] table was typed, a checkpoint's train_config.json held only the model settings the
    TOML file set; the others are the defaults, so the config read back is the one a run writes now."""
    copy = tmp_path / "old-config"
    shutil.copytree(latest(tiny_run), copy)
    path = copy / "train_config.json"
    written = json.loads(path.read_text())
    defaults = dataclasses.asdict(ModelSettings())
    written["model"] = {k: v for k, v in written["model"].items() if v != defaults[k]}
    assert 0 < len(written["model"]) < len(defaults)
    path.write_text(json.dumps(written))
    now = read_train_config(latest(tiny_run))
    assert read_train_config(copy) == now
    check_resume_compatible(now, read_train_config(copy))  # raises if they differ
    assert translate(load_checkpoint(copy), [SENTENCE]) == translate(
        load_checkpoint(tiny_run), [SENTENCE]
    )


def test_model_config_json_says_its_format_and_a_later_format_is_refused_in_one_line(
    modern_folder,
):
    path = modern_folder / "model_config.json"
    written = json.loads(path.read_text())
    assert written["format"] == 1  # written by save_model_files
    expected = load_checkpoint(modern_folder).model.config
    del written["format"]  # as every folder saved before the format was written
    path.write_text(json.dumps(written))
    assert load_checkpoint(modern_folder).model.config == expected
    for version in (2, "1", 0):
        path.write_text(json.dumps({**written, "format": version}))
        with pytest.raises(CheckpointError, match="in format .* reads formats 1 to 1"):
            load_checkpoint(modern_folder)
