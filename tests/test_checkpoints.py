"""The checkpoint module (appendix 93): what a model folder must hold for `load_checkpoint` to trust it."""

import dataclasses
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file, save_model

from helpers import ROOT, SENTENCE, edit_json, latest, shipped_settings
from transformer.engine.loading import load_checkpoint, read_train_config
from transformer.engine.model_files import save_model_files
from transformer.engine.config import ModelSettings
from transformer.engine.config_parsing import check_resume_compatible
from transformer.translation import translate
from transformer.engine.shipped import models_dir
from transformer.errors import CheckpointError, InputError
from transformer.model import Transformer
from transformer.engine.model_config import ModelConfig, build_model
from transformer.model import TransformerConfig


@pytest.fixture
def modern_folder(tmp_path):
    """The shipped de-en folder with the weights of a modern-block model of its shape (random, not trained)."""
    folder = tmp_path / "modern"
    shutil.copytree(models_dir() / "multi30k-de-en", folder)
    config = ModelConfig(
        **{
            **shipped_settings(),
            "norm": "rms",
            "feed_forward": "swiglu",
            "bias": False,
            "kv_heads": 2,
        }
    )
    save_model_files(build_model(config), folder)
    modern = ("norm", "feed_forward", "bias", "kv_heads")
    edit_json(
        folder / "train_config.json",
        **{f"model__{k}": getattr(config, k) for k in modern},
    )
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
    from transformer.modern import RMSNorm, modern_parts

    config = ModelConfig(30, 30, d_model=16, num_heads=2, d_ff=32, bias=False)
    parts = modern_parts(bias=False, max_len=config.max_len)
    other = dataclasses.replace(parts, norm=RMSNorm)
    sizes = TransformerConfig(
        **{
            k: v
            for k, v in config.to_dict().items()
            if k in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "d_ff")
        }
    )
    for model in (Transformer(config, other), Transformer(sizes)):
        with pytest.raises(InputError, match="parts of its own"):
            save_model_files(model, tmp_path)
    assert not any(tmp_path.iterdir())
    save_model_files(build_model(config), tmp_path)  # its config's parts: saved


@pytest.mark.parametrize(
    "setting, value", [("d_ff", 2048), ("kv_heads", 1), ("bias", True)]
)
def test_every_shape_is_checked_against_the_config_whatever_the_parts(
    modern_folder, setting, value
):
    """Weights whose tensors do not have the shapes their config describes (the config,
    its copy in the metadata and train_config.json edited alike) are refused tensor by tensor: a SwiGLU's
    d_ff, the key/value heads, the biases."""
    model = load_checkpoint(modern_folder).model
    written = json.loads((modern_folder / "model_config.json").read_text())
    edited = {**written, setting: value}
    (modern_folder / "model_config.json").write_text(json.dumps(edited))
    edit_json(modern_folder / "train_config.json", **{f"model__{setting}": value})
    settings = {k: v for k, v in edited.items() if k != "format"}
    save_model(
        model,
        str(modern_folder / "model.safetensors"),
        metadata={"model_config": json.dumps(settings)},
    )
    with pytest.raises(CheckpointError, match="model_config.json"):
        load_checkpoint(modern_folder)


# ---------------------------------------------------------------- a model folder: what is tied, what loads as before


def test_weights_saved_without_their_config_are_refused_and_a_max_len_below_the_data_too(
    tiny_run, tmp_path
):
    """Weights that do not carry the config they were saved with are not loaded on
    trust (no migration of the package's own earlier files); a config whose max_len
    is below the training data's, or that asks for more memory than there is, is
    refused before anything is allocated."""
    model = tmp_path / "old"
    shutil.copytree(latest(tiny_run), model)
    tensors = load_file(str(model / "model.safetensors"))
    save_file(tensors, str(model / "model.safetensors"))  # no metadata
    with pytest.raises(CheckpointError, match="does not carry the model config"):
        load_checkpoint(model)
    shutil.rmtree(model)
    shutil.copytree(latest(tiny_run), model)
    edit_json(model / "model_config.json", max_len=1)
    with pytest.raises(CheckpointError, match="max_len"):
        load_checkpoint(model)


def test_one_load_reads_the_weights_header_once(monkeypatch):
    """The checks before the load and the digests after it share the header that
    check_stored_weights read (the file itself is read twice: loaded, and hashed)."""
    import safetensors
    import transformer.engine.digests as digests
    import transformer.engine.model_files as model_files

    opened = []

    def counting(path, *args, **kwargs):
        opened.append(str(path))
        return safetensors.safe_open(path, *args, **kwargs)

    for module in (model_files, digests):
        monkeypatch.setattr(module, "safe_open", counting)
    load_checkpoint(models_dir() / "multi30k-de-en")
    assert len(opened) == 1, opened


def test_the_shipped_models_carry_the_config_they_were_saved_with():
    from safetensors import safe_open

    for name in ("multi30k-de-en", "tatoeba-en-zh"):
        folder = ROOT / "models" / name
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            saved = json.loads(f.metadata()["model_config"])
        written = json.loads((folder / "model_config.json").read_text())
        assert next(iter(written)) == "format" and written.pop("format") == 2, name
        assert ModelConfig(**saved) == ModelConfig(**written), name


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
    assert written["format"] == 2  # written by save_model_files
    del written["format"]  # as every folder saved before the format was written
    path.write_text(json.dumps(written))
    with pytest.raises(CheckpointError, match='does not say its "format"'):
        load_checkpoint(modern_folder)
    for version in (3, 0):
        path.write_text(json.dumps({**written, "format": version}))
        with pytest.raises(CheckpointError, match="in format .* reads formats 1 to 2"):
            load_checkpoint(modern_folder)
    for version in ("1", 2.0, True):  # not "a newer one wrote it": not a format at all
        path.write_text(json.dumps({**written, "format": version}))
        with pytest.raises(CheckpointError, match="the format must be an integer"):
            load_checkpoint(modern_folder)


def test_load_weights_checks_the_header_it_is_given(tmp_path):
    """A header read by the caller (`read_stored_weights`, unchecked) is checked
    before the load: integer weights are refused, not cast to float."""
    import torch

    from transformer.engine.model_files import load_weights, read_stored_weights

    model = build_model(ModelConfig(**shipped_settings()))
    state = {k: v.to(torch.int32) for k, v in model.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "w.safetensors")
    with pytest.raises(CheckpointError, match="is stored as I32"):
        load_weights(model, read_stored_weights(tmp_path / "w.safetensors"))
