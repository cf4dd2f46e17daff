"""Tests for transformer.engine.config (appendix 92): every shipped config loads, a bad one is refused with a
message that names the setting, and any value of any field gives a config or a one-line ConfigError."""

import dataclasses
import re
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer.engine.config import (
    DataConfig,
    ModelSettings,
    OptimConfig,
    TrainConfig,
)
from transformer.errors import ConfigError

from helpers import ROOT, TINY, tiny_config, write_config

# ---------------------------------------------------------------- configuration


def test_every_shipped_config_loads():
    names = sorted(p.name for p in (ROOT / "configs").glob("*.toml"))
    assert {
        "tiny.toml",
        "multi30k-small.toml",
        "multi30k-base.toml",
        "tatoeba-en-zh-small.toml",
    } <= set(names)
    for name in names:
        config = TrainConfig.from_toml(ROOT / "configs" / name)
        assert TrainConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "learning_rate = 1.0",
            r"unknown setting\(s\) \['learning_rate'\] at the top level",
        ),
        (
            "[optim]\nlr = 0.1",
            r"unknown setting\(s\) \['lr'\] in \[optim\]; the known settings there are \[.*'lr_factor'",
        ),
        ("[model]\nlayers = 6", r"unknown setting\(s\) \['layers'\] in \[model\]"),
        (
            "[model]\nsrc_vocab_size = 100",
            r"\[model\] src_vocab_size is set from the tokenizer",
        ),
        ("[optim]\nepochs = 'ten'", r"optim.epochs must be int, got 'ten'"),
        ("[data]\ncorpus = 'wmt14'", r"data.corpus='wmt14' must be one of"),
        (
            "[optim]\nlabel_smoothing = 1.5",
            r"label_smoothing=1.5 must be a finite number in \[0, 1\)",
        ),
        ("name = 'x'\n[data", r"is not valid TOML"),
    ],
)
def test_bad_config_files_are_rejected_with_a_message_that_names_the_setting(
    tmp_path, text, message
):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_toml(path)


# ---------------------------------------------------------------- every config field, any value

SECTIONS = {
    "": TrainConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "model": ModelSettings,
}
FIELDS = [
    (section, f.name)
    for section, cls in SECTIONS.items()
    for f in cls.__dataclass_fields__.values()
    if f.name not in SECTIONS
]
FIELDS += [
    ("", "data"),
    ("", "optim"),
    ("", "model"),
    ("optim", "surprise"),
    ("model", "surprise"),
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, -1, 0.5, 1e-9, 1e300]),
    st.text(max_size=12),
    st.sampled_from(["multi30k", "tatoeba", "tsv", "en", "zh", "val", "cpu"]),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=6), scalars, max_size=2),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.dictionaries(st.sampled_from(FIELDS), values, min_size=1, max_size=3))
def test_any_value_of_any_config_field_gives_a_config_or_a_one_line_config_error(
    changes,
):
    data = tomllib.loads(TINY.read_text())
    for (section, name), value in changes.items():
        if section and not isinstance(data.get(section), dict):
            data[section] = {}
        (data[section] if section else data)[name] = value
    try:
        config = TrainConfig.from_dict(data)
    except ConfigError as e:  # never another exception: a traceback is for bugs
        assert str(e) and "\n" not in str(e), str(e)
    else:
        assert TrainConfig.from_json(config.to_json()) == config


@settings(max_examples=100, deadline=None)
@given(
    section_name=st.sampled_from(
        [f for f in FIELDS if f[1] not in ("data", "optim", "model")]
    ),
    value=st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.floats(),
        st.text(max_size=12),
        st.booleans(),
        st.lists(st.floats(), max_size=3),
    ),
)
def test_any_value_written_in_a_toml_file_gives_a_config_or_a_one_line_config_error(
    section_name, value, tmp_path_factory
):
    section, name = section_name
    folder = tmp_path_factory.mktemp("toml", numbered=True)
    data = tiny_config(folder, **{f"{section}__{name}" if section else name: value})
    try:
        TrainConfig.from_toml(write_config(folder / "c.toml", data))
    except ConfigError as e:
        assert str(e) and "\n" not in str(e), str(e)


def test_a_setting_built_in_python_is_checked_strictly():
    """Python can hand a config what no TOML file holds: bytes for a path (the run
    wrote into a folder named "b'...'" under the current one), a NumPy integer."""
    import numpy as np

    config = TrainConfig()
    for change, message in (
        ({"out_dir": b"/tmp/x"}, re.escape("out_dir must be str, got b'/tmp/x'")),
        ({"seed": np.int64(3)}, re.escape("seed must be int, got np.int64(3)")),
        ({"seed": -1}, r"seed=-1 must be in \[0, 2\*\*32\)"),
    ):
        with pytest.raises(ConfigError, match=message):
            dataclasses.replace(config, **change)


def test_a_config_file_is_checked_once_and_a_config_built_in_python_too(monkeypatch):
    """pydantic checks every setting of a file as it reads it; `__post_init__` then
    checks only the rules between settings, not each setting again. A config built
    in Python is checked in `__post_init__` (the test above)."""
    from pydantic import TypeAdapter

    from transformer.engine.loading import read_model_config

    checked = []
    for method in ("validate_json", "validate_python"):
        original = getattr(TypeAdapter, method)

        def counting(self, *args, _original=original, **kwargs):
            checked.append(getattr(self._type, "__name__", str(self._type)))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TypeAdapter, method, counting)
    TrainConfig.from_toml(TINY)
    # the file, and the model the run builds from [model] and the vocabulary sizes
    assert checked == ["TrainConfig", "ModelConfigFields"], checked
    checked.clear()
    read_model_config(ROOT / "models" / "multi30k-de-en")
    assert checked == ["ModelConfig"], checked
