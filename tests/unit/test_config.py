from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config, parse_config
from gateway.settings import DEFAULT_CONFIG


def test_embedded_default_uses_the_simulator() -> None:
    config = load_config(DEFAULT_CONFIG)
    assert config.uses_simulator
    assert {"sim-chat", "sim-thinker", "sim-claude"} <= set(config.models)
    assert config.models["sim-claude"].via_litellm
    assert not config.models["sim-chat"].via_litellm


def test_error_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("models:\n  a:\n    model: x\n    temprature: 1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:4: models.a.temprature: Extra inputs"):
        load_config(path)


def test_missing_field_points_at_its_parent() -> None:
    with pytest.raises(ConfigError, match=r"f.yaml:3: models.a.model: Field required"):
        parse_config("models:\n  a:\n    provider: openai\n", "f.yaml")


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"f.yaml:2: invalid YAML"):
        parse_config("models:\n  a: x: y\n", "f.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_api_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(
        "models:\n  a:\n    provider: anthropic\n    model: m\n    api_key_env: MY_KEY\n"
    )
    monkeypatch.setenv("MY_KEY", "secret")
    assert config.models["a"].api_key() == "secret"
    assert config.models["a"].wire_family == "anthropic"
