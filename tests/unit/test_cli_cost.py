from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from typer.testing import CliRunner

from gateway import cli

runner = CliRunner()


def _cost(*args: str) -> tuple[int, str]:
    result = runner.invoke(cli.app, ["cost", *args])
    return result.exit_code, result.output


def test_scoping_a_task_on_a_map_model() -> None:
    code, out = _cost(
        "--model",
        "claude-sonnet-4-5",
        "--input",
        "50000",
        "--cached",
        "40000",
        "--output",
        "15000",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["total_usd"] == "0.267"
    assert doc["components"]["cached"] == {"tokens": 40000, "cost_usd": "0.012", "share": "0.0449"}
    assert doc["components"]["input"]["tokens"] == 10000
    assert sum(Decimal(c["cost_usd"]) for c in doc["components"].values()) == Decimal("0.267")


def test_provider_prefixed_model_reasoning_and_tier() -> None:
    code, out = _cost(
        "--model",
        "zai/glm-5.3",
        "--input",
        "1000",
        "--output",
        "1000",
        "--reasoning",
        "400",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    # $1.40/M in, $4.40/M out, reasoning billed as output.
    assert doc["components"]["reasoning"]["cost_usd"] == "0.00176"
    assert Decimal(doc["total_usd"]) == Decimal("0.0014") + Decimal("0.0044")
    code, out = _cost("--model", "gpt-5", "--input", "1000000", "--tier", "flex", "--json")
    assert code == 0 and json.loads(out)["total_usd"] == "0.625"


def test_config_prices_override_the_map(tmp_path: Path) -> None:
    config = tmp_path / "prices.yaml"
    config.write_text(
        "models:\n  agent:\n    model: gpt-5\nprices:\n  agent:\n    input: 2\n    output: 8\n"
    )
    code, out = _cost(
        "--model",
        "agent",
        "--input",
        "1000000",
        "--output",
        "1000000",
        "--config",
        str(config),
        "--json",
    )
    assert code == 0 and json.loads(out)["total_usd"] == "10"


def test_problems_exit_non_zero_with_a_clear_message() -> None:
    code, out = _cost("--model", "no-such-model", "--input", "5")
    assert code == 2 and "no-such-model" in out
    code, out = _cost("--model", "claude-sonnet-4-5", "--input", "10", "--cached", "20")
    assert code == 2 and "--cached" in out


def test_table_output() -> None:
    code, out = _cost("--model", "claude-sonnet-4-5", "--input", "100", "--output", "100")
    assert code == 0 and "total" in out and "claude-sonnet-4-5" in out
