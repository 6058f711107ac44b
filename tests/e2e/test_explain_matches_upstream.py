"""One planner: what `farebox policy explain --json` says is sent is what the upstream got.

Every shipped policy in `policies/` runs a corpus of requests (step kinds, thinking on and
off, effort levels, tool results, max_tokens present or absent, headers that pick rules
and tiers) through a gateway on the simulator. For OpenAI-compatible routes the body the
simulator received must equal explain's `body` (parsed JSON). For Anthropic routes litellm
turns that body into a Messages API request, so the fields the planner decides must
arrive as planned: `max_tokens`, `thinking`, the sampling fields thinking touches, and
never a top-level `reasoning_effort`. The ledger row books the step kind, the clamp flag
and the thinking enforcement explain planned. A mismatch fails with the views side by side.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.policy.cli import policy_explain
from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

POLICIES = Path(__file__).resolve().parents[2] / "policies"
USER = [{"role": "user", "content": "Plan the migration of the billing tables."}]
TOOL = [
    *USER,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "CREATE TABLE invoices (...)"},
]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "read", "parameters": {"type": "object", "properties": {}}},
    }
]
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}

CORPUS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("user turn, nothing set", {}, {"messages": USER}),
    ("user turn, small max_tokens", {}, {"messages": USER, "max_tokens": 300}),
    ("user turn, high effort", {}, {"messages": USER, "reasoning_effort": "high"}),
    ("thinking off", {}, {"messages": USER, "reasoning_effort": "none"}),
    (
        "low effort, max_tokens",
        {},
        {"messages": USER, "reasoning_effort": "low", "max_tokens": 2560},
    ),
    ("tool result", {}, {"messages": TOOL, "tools": TOOLS}),
    ("tool result, big ask", {}, {"messages": TOOL, "tools": TOOLS, "max_tokens": 50000}),
    ("streamed user turn", {}, {"messages": USER, **STREAMED}),
    ("streamed tool result", {}, {"messages": TOOL, "tools": TOOLS, **STREAMED}),
    ("streamed, usage not asked", {}, {"messages": USER, "stream": True}),
    ("sampling with thinking", {}, {"messages": USER, "temperature": 0.2}),
    ("free plan", {"X-Plan": "free"}, {"messages": USER}),
    ("paid reasoning", {"X-Plan": "pro", "X-Farebox-Tags": "reason"}, {"messages": USER}),
    ("paid, priority asked", {"X-Plan": "pro", "X-Speed-Tier": "priority"}, {"messages": USER}),
    ("interactive step (fast mode)", {"X-Farebox-Tags": "interactive"}, {"messages": USER}),
    ("deadline job", {"X-Farebox-Tags": "deadline"}, {"messages": TOOL, "tools": TOOLS}),
    ("ci project", {"X-Farebox-Project": "ci-nightly"}, {"messages": USER, "max_tokens": 900}),
    ("evals, over the cap", {"X-Farebox-Team": "evals"}, {"messages": USER, "max_tokens": 9000}),
]
# Fields of the Messages API request the planner decides for an Anthropic route, under the
# same name on both wires (`service_tier` is translated: OpenAI `default` is `standard_only`).
PLANNED_ON_MESSAGES = ("max_tokens", "thinking", "temperature", "top_k", "speed")


def _on_simulator(policy: Path, sim: SimControl, into: Path) -> tuple[Path, list[str]]:
    """The policy with every `base_url: sim` pointed at the test's simulator."""
    config = yaml.safe_load(policy.read_text())
    for route in config["models"].values():
        if route.get("base_url") == "sim":
            anthropic = route.get("provider") == "anthropic"
            route["base_url"] = sim.url if anthropic else f"{sim.url}/v1"
    into.write_text(yaml.safe_dump(config, sort_keys=False))
    chat = [alias for alias, route in config["models"].items() if route["model"] != "sim-embed"]
    return into, chat  # an embedding model answers no chat request


def _explain(
    request: Path, config: Path, headers: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    status = policy_explain(request, config, [f"{k}: {v}" for k, v in headers.items()], True)
    return status, json.loads(capsys.readouterr().out)


def _received(sim: SimControl) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each request the simulator got: its body and its (lower-cased) headers."""
    return [
        (json.loads(base64.b64decode(str(r["body_b64"]))), dict(r["headers"]))  # type: ignore[call-overload]
        for r in sim.requests()
    ]


def _missing_headers(explained: dict[str, Any], headers: dict[str, str]) -> list[str]:
    """Upstream headers the plan adds (Anthropic's fast-mode beta) that did not arrive."""
    return [
        f"header {name}"
        for name, value in explained["headers"].items()
        if value not in headers.get(name.lower(), "")
    ]


def _differences(explained: dict[str, Any], received: dict[str, Any]) -> list[str]:
    """What differs between explain's body and the upstream's, in the planner's terms."""
    planned = explained["body"]
    if explained["family"] != "anthropic":
        return [] if planned == received else ["body"]
    problems = ["reasoning_effort"] if "reasoning_effort" in received else []
    for field in PLANNED_ON_MESSAGES:
        if planned.get(field) != received.get(field):
            problems.append(field)
    return problems


def _send(gateway_url: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    with httpx.stream(
        "POST", f"{gateway_url}/chat/completions", json=body, headers=headers, timeout=60
    ) as reply:
        reply.read()
        return reply


def _ledger_differences(gateway_url: str, task: str, explained: dict[str, Any]) -> list[str]:
    """What the ledger row books that explain did not plan."""
    reply = httpx.get(f"{gateway_url}/tasks/{task}", timeout=30)
    reply.raise_for_status()
    (row,) = reply.json()["requests"]
    booked = (row["thinking_enforcement"], row["step_kind"], row["output_cap_clamped"])
    planned = (explained["thinking_enforcement"], explained["step_kind"], bool(explained["clamps"]))
    return [] if booked == planned else [f"ledger {booked} vs explain {planned}"]


def _check(
    case: str, explained: dict[str, Any], reply: httpx.Response, received: list[Any]
) -> list[str]:
    """The mismatches of one served request: header, body and upstream headers."""
    assert reply.status_code == 200, f"{case}: {reply.status_code} {reply.text}"
    assert len(received) == 1, f"{case}: {len(received)} upstream calls"
    body_received, headers_received = received[0]
    problems = _differences(explained, body_received)
    problems += _missing_headers(explained, headers_received)
    held = reply.headers.get("x-farebox-thinking-enforcement")
    if held != explained["thinking_enforcement"]:
        problems.append(f"header {held} vs explain {explained['thinking_enforcement']}")
    if not problems:
        return []
    return [
        f"{case}: {problems}\n  explain:  {json.dumps(explained['body'])}\n"
        f"  received: {json.dumps(body_received)}"
    ]


@pytest.mark.parametrize("name", sorted(p.stem for p in POLICIES.glob("*.yaml")))
def test_explain_says_what_the_upstream_receives(
    name: str,
    make_gateway: GatewayFactory,
    sim: SimControl,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAREBOX_SIM_ANTHROPIC_KEY", "sk-ant-sim-0123456789")
    config, aliases = _on_simulator(POLICIES / f"{name}.yaml", sim, tmp_path / f"{name}.yaml")
    gateway = make_gateway(config=config)
    mismatches: list[str] = []
    served: list[tuple[str, str, dict[str, Any]]] = []
    for alias in aliases:
        for index, (label, headers, fields) in enumerate(CORPUS):
            body = {"model": alias, **fields}
            request = tmp_path / "request.json"
            request.write_text(json.dumps(body))
            status, explained = _explain(request, config, headers, capsys)
            sim.http.delete("/sim/requests").raise_for_status()
            task = f"corpus-{name}-{alias}-{index}"  # a task's first step: its effort pins
            reply = _send(gateway.base_url, body, {**headers, "X-Task-Id": task})
            received = _received(sim)
            case = f"{name} / {alias} / {label}"
            if status != 0:  # a strict rule refused it: so must the gateway, before sending
                assert explained["rejection"] is not None, case
                assert reply.status_code == 400 and received == [], case
                continue
            mismatches += _check(case, explained, reply, received)
            served.append((case, task, explained))
    for case, task, explained in served:
        mismatches += [
            f"{case}: {p}" for p in _ledger_differences(gateway.base_url, task, explained)
        ]
    assert len(served) >= len(aliases) * (len(CORPUS) - 4)
    assert not mismatches, "\n".join(mismatches)
