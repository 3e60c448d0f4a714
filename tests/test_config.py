"""RuntimeConfig and TFGPU_* parsing: validated once, with messages that name value and fix."""

from __future__ import annotations

import pytest

from tfgpu import env
from tfgpu.config import RuntimeConfig
from tfgpu.errors import ConfigError


def test_explicit_arguments_win_over_environment():
    config = RuntimeConfig.from_sources(
        explicit={"memory_limit_mb": 2048, "precision": None},
        environ={"TFGPU_MEMORY_LIMIT_MB": "1024", "TFGPU_PRECISION": "bf16", "TFGPU_VISIBLE_GPUS": "1,0"},
    )
    assert config.memory_limit_mb == 2048
    assert config.precision == "bf16"
    assert config.visible_gpus == (1, 0)


@pytest.mark.parametrize(
    ("variable", "raw", "field", "value"),
    [
        ("TFGPU_MEMORY_GROWTH", "yes", "memory_growth", True),
        ("TFGPU_MEMORY_GROWTH", "0", "memory_growth", False),
        ("TFGPU_MEMORY_FRACTION", "0.25", "memory_fraction", 0.25),
        ("TFGPU_VISIBLE_GPUS", "none", "visible_gpus", ()),
        ("TFGPU_VISIBLE_GPUS", "all", "visible_gpus", None),
        ("TFGPU_LOGICAL_CPUS", " 4 ", "logical_cpus", 4),
        ("TFGPU_XLA", "on", "xla", True),
    ],
)
def test_environment_values_parse(variable, raw, field, value):
    assert getattr(RuntimeConfig.from_sources(explicit={}, environ={variable: raw}), field) == value


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("TFGPU_MEMORY_GROWTH", "maybe"), ("TFGPU_SEED", "x1"), ("TFGPU_VISIBLE_GPUS", "0,zero")],
)
def test_bad_environment_value_names_the_variable(variable, raw):
    with pytest.raises(ConfigError) as info:
        RuntimeConfig.from_sources(explicit={}, environ={variable: raw})
    assert variable in str(info.value)
    assert repr(raw) in str(info.value)
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"memory_fraction": 1.5}, "memory_fraction"),
        ({"memory_fraction": 0.5, "memory_limit_mb": 100}, "both set a memory cap"),
        ({"memory_growth": True, "memory_limit_mb": 100}, "memory_growth cannot be combined"),
        ({"logical_cpus": 0}, "logical_cpus"),
        ({"precision": "fp8"}, "precision"),
        ({"allocator": "bfc"}, "allocator"),
        ({"visible_gpus": [0, 0]}, "distinct"),
        ({"intra_op_threads": -1}, "intra_op_threads"),
    ],
)
def test_invalid_settings_are_rejected_at_the_edge(kwargs, needle):
    with pytest.raises(ConfigError, match=needle) as info:
        RuntimeConfig(**kwargs)
    assert "Received:" in info.value.message
    assert "Fix:" in info.value.message


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(ConfigError, match="memory_growth"):
        RuntimeConfig.from_sources(explicit={"memory_grow": True}, environ={})


def test_visible_gpus_accepts_index_list_and_text():
    assert RuntimeConfig(visible_gpus=1).visible_gpus == (1,)
    assert RuntimeConfig(visible_gpus="0,2").visible_gpus == (0, 2)
    assert RuntimeConfig(visible_gpus=[]).visible_gpus == ()


def test_unknown_tfgpu_variables_are_found():
    assert env.unknown_variables({"TFGPU_MEMORY_GROWHT": "1", "TFGPU_SEED": "1", "PATH": "/"}) == [
        "TFGPU_MEMORY_GROWHT"
    ]


@pytest.mark.parametrize("name", ["memory_growth", "xla", "xla_cache", "deterministic"])
def test_a_switch_given_as_anything_but_a_bool_is_said(name):
    with pytest.raises(ConfigError, match=f"{name} must be True or False") as raised:
        RuntimeConfig(**{name: "no"})
    assert raised.value.value == "no"


def test_tfgpu_xla_cache_turns_xla_s_persistent_cache_off_or_on():
    assert RuntimeConfig.from_sources(explicit={}, environ={"TFGPU_XLA_CACHE": "0"}).xla_cache is False
    assert RuntimeConfig.from_sources(explicit={}, environ={"TFGPU_XLA_CACHE": "on"}).xla_cache is True
    assert RuntimeConfig.from_sources(
        explicit={"xla_cache": True}, environ={"TFGPU_XLA_CACHE": "0"}
    ).xla_cache
    with pytest.raises(ConfigError, match="TFGPU_XLA_CACHE cannot be read"):
        RuntimeConfig.from_sources(explicit={}, environ={"TFGPU_XLA_CACHE": "maybe"})
