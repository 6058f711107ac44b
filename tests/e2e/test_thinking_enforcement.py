"""Honest caps: a thinking budget is reported as held only where something held it.

An SGLang-style route without strict thinking or continuation cannot stop the model at
its budget: the ledger row, the response header, the metric and `explain` all say `hint`,
and the simulator shows the whole reasoning went through.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from gateway.policy.cli import policy_explain
from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

CONFIG = """
models:
  sglang: {{provider: openai, model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang}}
  capped: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  thinker: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
  sglang-cut: {{provider: openai, model: sim-sglang-thinker, base_url: "{sim}/v1", family: sglang}}
defaults:
  thinking_budget: 8
routing:
  sglang:
    capabilities: {{supports_reasoning: true}}   # no strict thinking, no continuation
  capped:
    capabilities: {{supports_continue_final_message: true}}
  thinker:
    capabilities: {{supports_thinking_budget: true}}
  sglang-cut:
    capabilities: {{supports_reasoning: true}}
    thinking_overrun: cut            # no continuation: end the stream at the budget
"""
QUESTION = [{"role": "user", "content": "Plan the migration."}]
HEADER = "x-farebox-thinking-enforcement"


@pytest.fixture
def config_file(tmp_path: Path, sim: SimControl) -> Path:
    path = tmp_path / "farebox.yaml"
    path.write_text(CONFIG.format(sim=sim.url))
    return path


def _explained(
    tmp_path: Path, config: Path, body: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> dict[str, object]:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(body))
    capsys.readouterr()
    assert policy_explain(request, config, [], json_output=True) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def _row(gateway_url: str, task: str) -> dict[str, object]:
    reply = httpx.get(f"{gateway_url}/tasks/{task}", timeout=30)
    reply.raise_for_status()
    (row,) = reply.json()["requests"]
    return dict(row)


@pytest.mark.parametrize("stream", [True, False])
def test_a_budget_nobody_holds_is_reported_as_a_hint(
    make_gateway: GatewayFactory,
    config_file: Path,
    sim: SimControl,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stream: bool,
) -> None:
    body: dict[str, object] = {"model": "sglang", "messages": QUESTION, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    explained = _explained(tmp_path, config_file, body, capsys)
    assert explained["thinking_budget"] == 8 and explained["thinking_enforcement"] == "hint"
    gateway = make_gateway(config=config_file)
    task = f"task-hint-{stream}"
    with httpx.stream(
        "POST",
        f"{gateway.base_url}/chat/completions",
        json=body,
        headers={"X-Task-Id": task},
        timeout=30,
    ) as reply:
        reply.read()
        assert reply.status_code == 200, reply.text
        assert reply.headers[HEADER] == "hint"
    gateway.last()
    (received,) = sim.requests()
    assert received["reasoning_tokens"] == 40  # all of it: the budget of 8 held nothing
    sent = json.loads(base64.b64decode(str(received["body_b64"])))
    assert sent["chat_template_kwargs"] == {"thinking_budget": 8}  # asked for, as a hint
    row = _row(gateway.base_url, task)
    assert row["thinking_enforcement"] == "hint" and row["reasoning_tokens"] == 40
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert 'farebox_thinking_enforcement_total{enforcement="hint",model="sglang"} 1.0' in metrics


def test_held_budgets_say_who_held_them(
    make_gateway: GatewayFactory,
    config_file: Path,
    sim: SimControl,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gateway = make_gateway(config=config_file)
    client = gateway.sdk()
    cases = [("thinker", False, "backend"), ("capped", True, "stream"), ("capped", False, "hint")]
    for alias, stream, expected in cases:
        body: dict[str, object] = {"model": alias, "messages": QUESTION, "stream": stream}
        assert _explained(tmp_path, config_file, body, capsys)["thinking_enforcement"] == expected
        raw = client.chat.completions.with_raw_response.create(
            model=alias,
            messages=QUESTION,  # type: ignore[arg-type]
            stream=stream,
        )
        assert raw.headers[HEADER] == expected, alias
        parsed = raw.parse()
        if stream:
            list(parsed)
    reasoning = [r["reasoning_tokens"] for r in sim.requests()]
    # thinker: held by vLLM at 8; capped streamed: cut at 8 and continued (the cut call
    # is counted by the gateway, the continuation thinks no more); capped whole: all 40.
    assert reasoning[0] == 8 and reasoning[-1] == 40


def test_cut_without_continuation_ends_the_stream_at_the_budget(
    make_gateway: GatewayFactory,
    config_file: Path,
    sim: SimControl,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body: dict[str, object] = {"model": "sglang-cut", "messages": QUESTION, "stream": True}
    explained = _explained(tmp_path, config_file, body, capsys)
    assert explained["thinking_enforcement"] == "stream" and explained["closes_at_budget"]
    gateway = make_gateway(config=config_file)
    raw = gateway.sdk().chat.completions.with_raw_response.create(  # type: ignore[call-overload]
        model="sglang-cut",
        messages=QUESTION,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Task-Id": "task-cut"},
    )
    assert raw.headers[HEADER] == "stream"
    chunks = list(raw.parse())
    deltas = [c.choices[0] for c in chunks if c.choices]
    reasoning = [d for d in deltas if (d.delta.model_extra or {}).get("reasoning_content")]
    assert len(reasoning) == 8  # cut at the budget; the model would think for 40
    assert deltas[-1].finish_reason == "length"
    assert not "".join(d.delta.content or "" for d in deltas)  # no answer after a cut
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 8
    (received,) = sim.requests()  # one upstream call, never a continuation
    assert "continue_final_message" not in json.loads(base64.b64decode(str(received["body_b64"])))
    gateway.last()
    row = _row(gateway.base_url, "task-cut")
    assert row["thinking_enforcement"] == "stream" and row["reasoning_tokens"] == 8
    assert row["status_code"] == 200
    whole = dict(body, stream=False)
    assert _explained(tmp_path, config_file, whole, capsys)["thinking_enforcement"] == "hint"
