"""Configuration loading and the `farebox sim` command."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gateway.sim import SimConfig, default_config, load_config
from gateway.sim.command import build_config, sim

YAML = """
seed: 11
prefill_ms_per_token: 0.5
decode_ms_per_token: 20
block_size: 32
api_key: secret
models:
  - name: qwen-sim
    thinking: true
    reasoning_field: reasoning_content
    supports_thinking_budget: true
    reasoning_tokens: 10
    output_tokens: 5
  - name: claude-x
    api: anthropic
tier_timing:
  flex: {prefill: 3, decode: 3}
"""


def test_default_models() -> None:
    names = {m.name: m for m in default_config().models}
    assert set(names) == {"sim-chat", "sim-thinker", "sim-sglang-thinker", "claude-sim", "sim-embed"}
    assert names["sim-thinker"].reasoning_field == "reasoning"
    assert names["sim-sglang-thinker"].reasoning_field == "reasoning_content"
    assert names["claude-sim"].api == "anthropic"
    assert names["sim-embed"].embedding_dimensions == 1536


def test_load_yaml(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(YAML)
    config = load_config(path)
    assert config.seed == 11 and config.block_size == 32
    assert config.api_key is not None and config.api_key.get_secret_value() == "secret"
    model = config.find_model("qwen-sim", "openai")
    assert model is not None and model.reasoning_field == "reasoning_content"
    assert config.rates(model, "flex") == (1.5, 60.0)
    assert config.find_model("claude-x", "openai") is None


def test_bad_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text("models: []\n")
    with pytest.raises(ValueError):
        load_config(path)
    path.write_text("- just a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config(path)


def test_duplicate_model_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        SimConfig.model_validate({"models": [{"name": "a"}, {"name": "a"}]})


def test_command_line_overrides(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(YAML)
    config = build_config(path, 2.0, None, 99)
    assert (config.prefill_ms_per_token, config.decode_ms_per_token, config.seed) == (2.0, 20, 99)
    assert build_config(None, None, None, None) == default_config()
    with pytest.raises(ValueError):
        build_config(None, -1.0, None, None)
    realistic = build_config(None, None, 10.0, None, "realistic")
    assert realistic.decode_ms_per_token == 10.0 and realistic.max_num_seqs == 32
    with pytest.raises(ValueError, match="unknown simulator profile"):
        build_config(None, None, None, None, "turbo")


def test_command_registers_with_typer() -> None:
    app = typer.Typer()
    app.command("sim")(sim)

    @app.command("other")
    def other() -> None:
        """Keep typer in multi-command mode."""

    # A wide, colourless terminal keeps rich from wrapping or styling the option names.
    result = CliRunner().invoke(app, ["sim", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    for flag in ("--host", "--port", "--config", "--prefill-ms-per-token", "--seed"):
        assert flag in result.output
