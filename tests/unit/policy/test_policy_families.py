"""A model's backend family: derived from provider and upstream, guesses said out loud."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gateway.config import GatewayConfig, ModelRoute
from gateway.policy.cli import family_of, policy_check
from gateway.policy.families import derive_family
from gateway.services import Snapshot


@pytest.mark.parametrize(
    ("provider", "base_url", "family", "derived", "guessed"),
    [
        ("openai", None, None, "openai", False),  # the SDK's default: api.openai.com
        (None, None, None, "openai", False),
        ("openai", "https://api.openai.com/v1", None, "openai", False),  # the README's example
        ("OpenAI", "https://API.OPENAI.COM/v1", None, "openai", False),
        ("openai", "sim", None, "vllm", False),  # the bundled simulator speaks vLLM
        ("openai", "http://vllm.internal:8000/v1", None, "vllm", True),
        ("openai", "http://10.0.0.7:8000/v1", None, "vllm", True),
        ("openai", "http://localhost:30000/v1", None, "vllm", True),
        ("openai", "http://sglang.internal:30000/v1", None, "sglang", True),
        ("openai", "https://api.example-host.com/v1", None, "other", True),
        ("openai", "https://api.example-host.com/v1", "vllm", "vllm", False),  # said: no guess
        ("anthropic", None, None, "anthropic", False),
        ("anthropic", "http://127.0.0.1:9000", None, "anthropic", False),
        ("gemini", None, None, "other", False),
    ],
)
def test_derive_family(
    provider: str | None, base_url: str | None, family: str | None, derived: str, guessed: bool
) -> None:
    finding = derive_family(provider, base_url, family)
    assert (finding.family, finding.guessed) == (derived, guessed)


def test_config_and_cli_derive_the_same_family() -> None:
    routes = [
        {"provider": "openai", "model": "gpt-5", "base_url": "https://api.openai.com/v1"},
        {"provider": "openai", "model": "q", "base_url": "http://gpu-box:8000/v1"},
        {"provider": "anthropic", "model": "c"},
        {"model": "m"},
    ]
    for route in routes:
        assert ModelRoute.model_validate(route).wire_family == family_of(route)


def test_policy_check_warns_when_it_had_to_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(
        "models:\n"
        "  gpt: {provider: openai, model: gpt-5, base_url: 'https://api.openai.com/v1'}\n"
        "  qwen: {provider: openai, model: Qwen/Qwen3-32B, base_url: 'http://gpu-box:8000/v1'}\n"
        "  pinned: {provider: openai, model: q, base_url: 'http://gpu-box:8000/v1', family: sglang}\n"
    )
    assert policy_check(config, json_output=True) == 0
    report = json.loads(capsys.readouterr().out)
    (warning,) = report["warnings"]
    assert warning.startswith("family guessed as vllm for model qwen")
    assert "set `family:`" in warning
    assert policy_check(config, json_output=False) == 0
    assert "family guessed as vllm for model qwen" in capsys.readouterr().out


def test_the_gateway_logs_a_guessed_family_when_it_loads_the_configuration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = GatewayConfig.model_validate(
        {
            "models": {
                "gpt": {"model": "gpt-5", "base_url": "https://api.openai.com/v1"},
                "qwen": {"model": "q", "base_url": "http://gpu-box:8000/v1"},
            }
        }
    )
    assert config.family_warnings() == [
        "family guessed as vllm for model qwen (gpu-box looks self-hosted); "
        "set `family:` to one of openai, vllm, sglang, anthropic, other"
    ]
    with caplog.at_level(logging.WARNING, logger="farebox.config"):
        Snapshot.build(config)
    assert "family guessed as vllm for model qwen" in caplog.text
