"""The checkpoint module (appendix 93): what a model folder must hold for `load_checkpoint` to trust it."""

import json
import shutil

import pytest
from safetensors.torch import save_model

from transformer.checkpoints import load_checkpoint, models_dir, save_model_files
from transformer.errors import CheckpointError
from transformer.modern import ModelConfig, build_model


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
    save_model_files(build_model(config), folder)
    return folder


def test_a_modern_model_folder_loads_as_saved(modern_folder):
    model = load_checkpoint(modern_folder).model
    assert (
        model.config.feed_forward == "swiglu"
        and model.decoder.layers[0].self_attn.num_kv_heads == 2
    )


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
