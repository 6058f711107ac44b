"""Prefix stability end to end: flagged before the provider confirms, and what it cost."""

from __future__ import annotations

import base64
import json
import re
import time
from decimal import Decimal

import httpx
import openai
import redis

from gateway.pipeline.identify import caller_id
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

GUIDE = "You are the billing agent. Follow the runbook exactly. " * 120
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_invoice",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
            "description": "Find an invoice.",
        },
    }
]


def _stamp(step: int) -> str:
    return f"2026-11-29T10:{step:02d}:07Z"


def _agent_step(step: int, volatile_first: bool) -> list[dict[str, str]]:
    """An agent loop's messages: the time either heads the system prompt or ends the turn."""
    system = f"Current time: {_stamp(step)}\n{GUIDE}" if volatile_first else GUIDE
    messages = [{"role": "system", "content": system}]
    for earlier in range(step):
        messages += [
            {"role": "user", "content": f"Check invoice {earlier}."},
            {"role": "assistant", "content": f"Invoice {earlier} is paid."},
        ]
    turn = f"Check invoice {step}."
    messages.append(
        {"role": "user", "content": turn if volatile_first else f"{turn} ({_stamp(step)})"}
    )
    return messages


def _run_loop(gateway: Gateway, task: str, volatile_first: bool) -> list[dict[str, object]]:
    """Three streamed agent steps; per step the prefix header and the usage that confirmed it."""
    client = gateway.sdk(default_headers={"X-Task-Id": task})
    steps = []
    for step in range(3):
        with client.chat.completions.with_streaming_response.create(
            model="chat",
            messages=_agent_step(step, volatile_first),  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        ) as response:
            header = response.headers["x-farebox-prefix"]  # known before any token arrives
            expected = int(response.headers["x-farebox-expected-cached-tokens"])
            usage = [chunk.usage for chunk in response.parse() if chunk.usage][-1]
        assert usage is not None and usage.prompt_tokens_details is not None
        steps.append(
            {
                "header": header,
                "expected": expected,
                "cached": usage.prompt_tokens_details.cached_tokens,
            }
        )
    return steps


def _task_cost(gateway: Gateway, task: str) -> tuple[Decimal, list[dict[str, object]]]:
    body = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30).json()
    return Decimal(body["cost"]["input"]), body["requests"]


def test_timestamp_at_the_top_is_flagged_and_moving_it_restores_the_cache(gateway: Gateway) -> None:
    broken = _run_loop(gateway, "task-volatile", volatile_first=True)
    for step in broken[1:]:
        # Flagged in the response headers, before the usage at the end confirmed the miss.
        assert "segment=system" in str(step["header"]) and "volatile_value" in str(step["header"])
        assert step["expected"] == 0 and int(step["cached"]) <= 32  # type: ignore[call-overload]

    stable = _run_loop(gateway, "task-stable", volatile_first=False)
    assert stable[0]["expected"] == 0
    for step in stable[1:]:
        assert step["header"] == "stable"
        assert int(step["cached"]) > 1000  # type: ignore[call-overload]
        # The prediction (bytes, not tokens, on the hot path) is close to what was reported.
        expected, cached = int(step["expected"]), int(step["cached"])  # type: ignore[call-overload]
        assert abs(expected - cached) <= 0.15 * cached

    broken_input, broken_rows = _task_cost(gateway, "task-volatile")
    stable_input, stable_rows = _task_cost(gateway, "task-stable")
    assert broken_input > 2 * stable_input  # the ledger shows the money difference
    assert all(str(r["prefix_status"]).endswith(":volatile_value") for r in broken_rows[1:])
    assert all(str(r["prefix_status"]).startswith("hit") for r in stable_rows[1:])
    assert all(r["expected_cached_tokens"] for r in stable_rows[1:])

    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert 'farebox_prefix_breaks_total{model="chat",reason="volatile_value"} 2.0' in metrics
    assert "farebox_prefix_actual_cached_tokens_total" in metrics
    checks = re.search(r'farebox_prefix_check_seconds_count\{model="chat"\} (\S+)', metrics)
    assert checks is not None and float(checks.group(1)) >= 3


def test_strict_route_rejects_a_volatile_prompt_and_says_where(gateway: Gateway) -> None:
    client = gateway.sdk()
    messages = [
        {"role": "system", "content": f"Request id 5f0c6a1e-8b9d-4c3e-a2f1-0d9e8c7b6a54. {GUIDE}"},
        {"role": "user", "content": "hello"},
    ]
    try:
        client.chat.completions.create(model="strict-chat", messages=messages)  # type: ignore[arg-type]
    except openai.BadRequestError as exc:
        error = exc.response.json()["error"]
    else:
        raise AssertionError("strict mode let a volatile prompt through")
    assert error["code"] == "volatile_prefix"
    assert "system" in error["message"] and "uuid" in error["message"].lower()
    clean = client.chat.completions.create(
        model="strict-chat",
        messages=[{"role": "system", "content": GUIDE}, {"role": "user", "content": "hi"}],
    )
    assert clean.choices[0].message.content


def test_normalize_and_sticky_cache_key_change_only_their_fields(
    gateway: Gateway, sim: SimControl
) -> None:
    client = gateway.sdk()
    reordered = [
        {
            "type": "function",
            "function": {
                "parameters": TOOLS[0]["function"]["parameters"],
                "description": "Find an invoice.",
                "name": "lookup_invoice",
            },  # type: ignore[index]
        }
    ]
    for tools in (TOOLS, reordered):
        client.chat.completions.create(
            model="tidy-chat",
            messages=[{"role": "system", "content": GUIDE}, {"role": "user", "content": "hi"}],
            tools=tools,  # type: ignore[arg-type]
        )
    bodies = [json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests()]
    first, second = bodies[-2], bodies[-1]
    assert first["tools"] == second["tools"]
    assert list(first["tools"][0]["function"]) == list(
        second["tools"][0]["function"]
    )  # canonical key order
    assert first["prompt_cache_key"] == second["prompt_cache_key"]
    assert first["prompt_cache_key"].startswith("fbx-") or len(first["prompt_cache_key"]) >= 8


def test_anthropic_breakpoints_make_the_repeat_a_cache_read(
    gateway: Gateway, sim: SimControl
) -> None:
    client = gateway.sdk()
    messages = [
        {"role": "system", "content": GUIDE},
        {"role": "user", "content": "First question."},
    ]
    first = client.chat.completions.create(model="claude-cached", messages=messages)  # type: ignore[arg-type]
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "Next."},
    ]
    second = client.chat.completions.create(model="claude-cached", messages=messages)  # type: ignore[arg-type]
    sent = json.loads(base64.b64decode(str(sim.requests()[-1]["body_b64"])))
    assert "cache_control" in json.dumps(sent)  # breakpoints reached Anthropic's wire format
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    assert (second.usage.prompt_tokens_details.cached_tokens or 0) > 1000


def test_lint_endpoint_reports_spans_without_calling_a_model(
    gateway: Gateway, sim: SimControl
) -> None:
    body = {"model": "chat", "messages": _agent_step(1, volatile_first=True)}
    report = httpx.post(f"{gateway.base_url}/prefix/lint", json=body, timeout=10).json()
    assert report["clean"] is False
    (finding,) = [f for f in report["findings"] if f["kind"] == "timestamp"]
    assert finding["segment"] == "system" and finding["text"] == _stamp(1)
    assert sim.requests() == []
    clean = httpx.post(
        f"{gateway.base_url}/prefix/lint",
        json={"model": "chat", "messages": _agent_step(1, False)[:1]},
    )
    assert clean.json()["clean"] is True


def test_two_gateways_share_prefix_history_through_redis(make_gateway: GatewayFactory) -> None:
    from tests.redis_service import require_redis

    url = require_redis()
    first, second, alone = make_gateway(redis_url=url), make_gateway(redis_url=url), make_gateway()
    messages = [{"role": "system", "content": GUIDE}, {"role": "user", "content": "shared prefix"}]
    key = "sk-redis-shared-" + str(id(first))
    first.sdk(api_key=key).chat.completions.create(model="chat", messages=messages)  # type: ignore[arg-type]
    # The first gateway keeps the prompt's history after its reply is sent: wait for it.
    _wait_for_redis_key(url, f"farebox:prefix:caller:{caller_id(f'Bearer {key}')}:chat")
    raw = second.sdk(api_key=key).chat.completions.with_raw_response.create(
        model="chat", messages=messages
    )  # type: ignore[arg-type]
    assert int(raw.headers["x-farebox-expected-cached-tokens"]) > 1000
    assert raw.headers["x-farebox-prefix"] == "stable"
    raw = alone.sdk(api_key=key).chat.completions.with_raw_response.create(
        model="chat", messages=messages
    )  # type: ignore[arg-type]
    assert (
        int(raw.headers["x-farebox-expected-cached-tokens"]) == 0
    )  # in-process history is its own


def test_a_small_scan_budget_leaves_segments_for_later_and_counts_them(
    make_gateway: GatewayFactory,
) -> None:
    gateway = make_gateway(prefix_scan_budget=0)  # scan nothing: everything waits
    client = gateway.sdk()
    history = [
        {"role": "system", "content": f"Now: 2026-03-12T14:03:07Z. {GUIDE}"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=history)
    # Nothing was scanned, and the header says so rather than claiming a clean prompt.
    left = re.fullmatch(r"stable; unscanned=(\d+)", raw.headers["x-farebox-prefix"])
    assert left is not None and int(left.group(1)) >= 3  # system, first question, answer
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    counted = re.search(r'farebox_prefix_unscanned_segments_total\{model="chat"\} (\S+)', metrics)
    assert counted is not None and float(counted.group(1)) == int(left.group(1))

    scanning = make_gateway()  # the default budget scans the same prompt whole
    raw = scanning.sdk().chat.completions.with_raw_response.create(model="chat", messages=history)
    assert raw.headers["x-farebox-prefix"].startswith("volatile; segment=system; kind=timestamp")


def _wait_for_redis_key(url: str, name: str, timeout: float = 10.0) -> None:
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + timeout
        while not client.exists(name):
            assert time.monotonic() < deadline, f"{name} never reached Redis"
            time.sleep(0.01)
    finally:
        client.close()
