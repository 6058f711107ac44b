"""`explain` JSON and rendering, `policy_check` and `policy_explain` with their exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from gateway.policy import explain, render_decision
from gateway.policy.cli import (
    ExplainInputError,
    family_of,
    parse_headers,
    policy_check,
    policy_explain,
)
from tests.unit.policy.helpers import Planner, user_body

EXAMPLES = Path(__file__).resolve().parents[3] / "policies"
CONFIG = """\
models:
  thinker: {provider: openai, model: qwen3-32b, base_url: "http://vllm:8000/v1"}
  claude: {provider: anthropic, model: claude-sonnet-4-5}
  fast-pool: {provider: openai, model: qwen3-32b, base_url: "http://h200:8000/v1"}
prices: {}
tasks: {idle_timeout_s: 60}
defaults:
  max_tokens: {default: 500, ceiling: 2000}
  effort: medium
rules:
  - name: ci
    match: {project: ci-*}
    strict: true
routing:
  thinker:
    capabilities: {supports_thinking_budget: true}
    tiers:
      fast: {alias: fast-pool}
    fallbacks:
      - {statuses: [503], alias: claude, tier: standard}
"""


def console() -> Console:
    return Console(width=200, force_terminal=False, color_system=None)


def write(tmp_path: Path, name: str, content: str | dict) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_explain_json(make_plan: Planner) -> None:
    policy = {"defaults": {"max_tokens": {"ceiling": 100}, "effort": "low"}}
    decision = make_plan(
        policy, user_body(max_tokens=5000), "vllm", headers={"X-Speed-Tier": "fast"}
    )
    data = explain(decision, user_body(max_tokens=5000))
    assert orjson.loads(orjson.dumps(data)) == data  # JSON-ready
    assert data["rule"] == "defaults" and data["step_kind"] == "user_turn"
    assert data["tier"] == {"served": "standard", "requested": "fast"}
    assert data["edits"] == {
        "set": {"max_tokens": 100 + 1024, "reasoning_effort": "low"},
        "remove": [],
    }
    assert data["clamps"] == [
        {
            "field": "max_tokens",
            "original": 5000,
            "new": 1124,
            "reason": "ceiling of rule 'defaults'",
        }
    ]
    assert data["body"]["max_tokens"] == 1124
    # No hard cap on this route and a whole (non-streamed) request: the budget is a hint.
    assert data["thinking_budget"] == 1024 and data["thinking_enforcement"] == "hint"
    assert data["stream_enforcement"] is False
    assert set(data["timeouts"]) == {"connect_s", "first_token_s", "idle_s"}
    assert data["rejection"] is None


def test_explain_rejection(make_plan: Planner) -> None:
    policy = {"defaults": {"strict": True, "max_tokens": {"ceiling": 10}}}
    data = explain(make_plan(policy, user_body(max_tokens=50)), user_body(max_tokens=50))
    assert data["rejection"]["field"] == "max_tokens"
    assert "body" not in data and data["edits"] == {"set": {}, "remove": []}


def test_render_decision(make_plan: Planner) -> None:
    policy = {
        "defaults": {"max_tokens": {"ceiling": 100}},
        "routing": {
            "m": {"fallbacks": [{"from_tier": "flex", "statuses": [429], "tier": "standard"}]}
        },
    }
    out = console()
    with out.capture() as captured:
        render_decision(
            make_plan(
                policy, user_body(max_tokens=500, messages=[{"role": "user", "content": "[bold]x"}])
            ),
            out,
        )
    text = captured.get()
    assert "rule             defaults" in text
    assert "stream enforcement" not in text  # it claimed a cut that needs a stream
    assert "set    max_tokens = 100" in text
    assert "clamp  max_tokens: 500 -> 100" in text
    assert "fallback from flex on 429 -> m/standard" in text
    with out.capture() as captured:
        render_decision(
            make_plan(
                {}, user_body(speed="fast"), "anthropic", headers={"X-Speed-Tier": "standard"}
            ),
            out,
        )
    assert "remove speed" in captured.get()
    with out.capture() as captured:
        render_decision(
            make_plan({}, user_body(), "anthropic", headers={"X-Speed-Tier": "fast"}), out
        )
    assert "header anthropic-beta: fast-mode-2026-02-01" in captured.get()
    rejected = make_plan(
        {"defaults": {"strict": True, "max_tokens": {"ceiling": 1}}}, user_body(max_tokens=5)
    )
    with out.capture() as captured:
        render_decision(rejected, out)
    assert "rejected by rule 'defaults'" in captured.get()


@pytest.mark.parametrize(
    ("route", "family"),
    [
        ({"provider": "openai"}, "openai"),
        ({"provider": "OpenAI", "base_url": "http://x"}, "vllm"),
        ({"provider": "openai", "base_url": "http://x", "family": "sglang"}, "sglang"),
        ({"provider": "anthropic"}, "anthropic"),
        ({"provider": "gemini"}, "other"),
        ({}, "openai"),
    ],
)
def test_family_of(route: dict, family: str) -> None:
    assert family_of(route) == family


def test_parse_headers() -> None:
    assert parse_headers(["X-Speed-Tier: flex", "a:b:c"]) == {"x-speed-tier": "flex", "a": "b:c"}
    with pytest.raises(ExplainInputError):
        parse_headers(["no colon"])


@pytest.mark.parametrize("name", ["chat-product", "coding-agent", "overnight-batch"])
def test_policy_check_accepts_the_examples(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert policy_check(EXAMPLES / f"{name}.yaml", json_output=True) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["rules"] > 0


def test_policy_check_reports_file_line_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path, "bad.yaml", CONFIG.replace("effort: medium", "effort: loud"))
    assert policy_check(bad, json_output=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    (error,) = report["errors"]
    assert (error["line"], error["location"]) == (9, "defaults.effort")
    out = console()
    with out.capture() as captured:
        assert policy_check(bad, json_output=False, console=out) == 1
    assert f"{bad}:9: defaults.effort: Input should be" in captured.get()


def test_policy_check_ok_and_unreadable(tmp_path: Path) -> None:
    out = console()
    with out.capture() as captured:
        assert policy_check(write(tmp_path, "ok.yaml", CONFIG), json_output=False, console=out) == 0
        assert policy_check(tmp_path / "missing.yaml", json_output=False, console=out) == 2
    text = captured.get()
    assert "1 rule(s), routing for thinker" in text
    assert "cannot read the file" in text


def test_policy_explain_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, "farebox.yaml", CONFIG)
    request = write(tmp_path, "req.json", user_body(model="thinker", max_tokens=99999))
    assert policy_explain(request, config, ["X-Speed-Tier: fast"], json_output=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["family"] == "vllm"
    assert (data["alias"], data["upstream_model"], data["tier"]["served"]) == (
        "fast-pool",
        "qwen3-32b",
        "fast",
    )
    assert data["edits"]["set"]["thinking_token_budget"] == 4096
    assert data["clamps"][0]["new"] == 2000 + 4096
    assert data["fallbacks"] == [{"statuses": [503], "alias": "claude", "tier": "standard"}]


def test_policy_explain_rejection_exits_1(tmp_path: Path) -> None:
    config = write(tmp_path, "farebox.yaml", CONFIG)
    request = write(tmp_path, "req.json", user_body(model="claude", max_tokens=99999))
    out = console()
    with out.capture() as captured:
        code = policy_explain(
            request, config, ["X-Farebox-Project: ci-nightly"], False, console=out
        )
    assert code == 1
    assert "max_tokens 99999 is over the ceiling" in captured.get()
    with out.capture():
        assert policy_explain(request, config, [], False, console=out) == 0


@pytest.mark.parametrize(
    ("request_body", "headers", "code", "message"),
    [
        (user_body(model="nope"), [], 1, "model 'nope' is not configured"),
        ({"messages": []}, [], 1, "'model' string"),
        ("{not json", [], 1, "not valid JSON"),
        (user_body(model="thinker"), ["bad header"], 1, "Name: value"),
    ],
)
def test_policy_explain_input_errors(
    tmp_path: Path, request_body: dict | str, headers: list[str], code: int, message: str
) -> None:
    config = write(tmp_path, "farebox.yaml", CONFIG)
    request = write(tmp_path, "req.json", request_body)
    out = console()
    with out.capture() as captured:
        assert policy_explain(request, config, headers, False, console=out) == code
    assert message in captured.get()


def test_policy_explain_bad_config_and_missing_files(tmp_path: Path) -> None:
    request = write(tmp_path, "req.json", user_body(model="thinker"))
    bad = write(tmp_path, "bad.yaml", "rules:\n  - tier: {force: warp}\n")
    out = console()
    with out.capture() as captured:
        assert policy_explain(request, bad, [], False, console=out) == 1
        assert (
            policy_explain(
                tmp_path / "none.json", write(tmp_path, "c.yaml", CONFIG), [], False, console=out
            )
            == 2
        )
        assert policy_explain(request, tmp_path / "none.yaml", [], False, console=out) == 2
    text = captured.get()
    assert f"{bad}:2: rules[0].tier.force" in text
    assert "cannot read" in text


def test_policy_explain_runs_on_the_example_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = [
        {"role": "user", "content": "fix the test"},
        {"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "1", "content": "FAILED"},
    ]
    request = write(tmp_path, "req.json", {"model": "sim-thinker", "messages": messages})
    assert policy_explain(request, EXAMPLES / "overnight-batch.yaml", [], json_output=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["rule"], data["tier"]["served"]) == ("tool-steps-on-flex", "flex")
    assert data["edits"]["set"]["service_tier"] == "flex"
    assert data["fallbacks"][0]["from_tier"] == "flex"
    assert policy_explain(request, EXAMPLES / "coding-agent.yaml", [], json_output=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["rule"], data["thinking_budget"]) == ("read-tool-output", 1024)
    assert data["edits"]["set"]["thinking_token_budget"] == 1024
