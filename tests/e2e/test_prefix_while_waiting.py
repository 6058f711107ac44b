"""The prefix check of an observing route runs while the upstream works on the request.

A real gateway, the simulator, the real SDK: the check of a route with no prefix action
runs once the request is written (h1's `while_waiting`), and everything it feeds (the
reply's headers, streamed or whole, the ledger row, a limit's hold) is what it was when
the check ran before the call. A route with actions still checks before sending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from gateway.ledger import make_engine
from gateway.ledger.models import RequestRow
from gateway.pipeline import prefix, prefix_pending
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.e2e.upstream_seen import upstream_had_it
from tests.redis_service import require_redis

GUIDE = "You are the billing agent. Follow the runbook exactly. " * 60
MESSAGES = [{"role": "system", "content": GUIDE}, {"role": "user", "content": "Check invoice 7."}]
# What differs from one run to the next whatever the check does.
VOLATILE_HEADERS = {"x-request-id", "date", "x-farebox-upstream-ms", "server-timing"}
VOLATILE_COLUMNS = {"id", "request_id", "created_at", "task_id", "ttft_ms", "ttfat_ms"}
VOLATILE_COLUMNS |= {"duration_ms", "decode_tps", "caller"}  # each run its own caller


def _watch_checks(
    monkeypatch: pytest.MonkeyPatch, sim: SimControl, before: int | None = None
) -> list[tuple[str, bool]]:
    """Each check run, deferred or not, and whether the upstream had the request then
    (past `before` requests; not asked without it)."""
    runs: list[tuple[str, bool]] = []

    def watched(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            runs.append((kind, before is not None and upstream_had_it(sim, before)))
            return real(*args, **kwargs)

        return check

    monkeypatch.setattr(prefix, "_check", watched("before", prefix._check))
    monkeypatch.setattr(prefix_pending, "_check", watched("while", prefix_pending._check))
    return runs


def test_an_observing_route_checks_once_the_upstream_has_the_request(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = gateway.sdk()
    client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    before = len(sim.requests())
    sim.fault(delay_s=1.5)  # the simulator holds its reply past the check's wait
    runs = _watch_checks(monkeypatch, sim, before)
    reply = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert runs == [("while", True)]
    assert reply.headers["x-farebox-prefix"]
    assert gateway.last(2).prefix is not None


def test_a_strict_route_still_refuses_before_the_upstream_sees_anything(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = len(sim.requests())
    runs = _watch_checks(monkeypatch, sim, before)
    volatile = f"Request id 5f0c6a1e-8b9d-4c3e-a2f1-0d9e8c7b6a54. {GUIDE}"
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.sdk().chat.completions.create(
            model="strict-chat",
            messages=[{"role": "system", "content": volatile}, {"role": "user", "content": "hi"}],
        )
    assert refused.value.response.json()["error"]["code"] == "volatile_prefix"
    assert runs == [("before", False)]
    assert len(sim.requests()) == before


def _headers(response: httpx.Response | Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers.items() if k not in VOLATILE_HEADERS]


def _traffic(
    gateway: Gateway, key: str, extra: dict[str, str] | None = None
) -> list[list[tuple[str, str]]]:
    """Three whole and two streamed requests of one prompt; each reply's headers in order.

    `key` makes the caller: a history shared through Redis is each run's own."""
    client = gateway.sdk(api_key=key, default_headers=extra or {})
    seen = []
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
        seen.append(_headers(raw))
    for _ in range(2):
        with client.chat.completions.with_streaming_response.create(
            model="chat",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        ) as response:
            assert response.headers["x-farebox-prefix"]  # before any event
            seen.append(_headers(response))
            list(response.iter_lines())
    return seen


def _rows(gateway: Gateway, count: int) -> list[dict[str, Any]]:
    """The ledger's rows, once `count` are there, without what differs run to run."""

    async def read() -> list[dict[str, Any]]:
        engine = make_engine(gateway.settings.ledger_url())
        try:
            async with engine.connect() as connection:
                query = select(RequestRow).order_by(RequestRow.created_at)
                return [dict(row._mapping) for row in await connection.execute(query)]
        finally:
            await engine.dispose()

    deadline = time.monotonic() + 10
    while len(rows := asyncio.run(read())) < count:
        assert time.monotonic() < deadline, f"only {len(rows)} of {count} rows"
        time.sleep(0.1)
    return [{k: v for k, v in row.items() if k not in VOLATILE_COLUMNS} for row in rows]


def _both_ways(
    start: Callable[[], Gateway],
    sim: SimControl,
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str] | None = None,
) -> tuple[Any, Any, list[tuple[str, bool]]]:
    """The same traffic with the check before the call, then as it runs now."""
    sim.reset()
    with monkeypatch.context() as patched:
        patched.setattr(prefix_pending, "can_wait", lambda ctx: False)
        before = start()
        checked_first = (_traffic(before, "sk-checked-first", extra), _rows(before, 5))
    sim.reset()
    runs = _watch_checks(monkeypatch, sim)
    now = start()
    return checked_first, (_traffic(now, "sk-checked-meanwhile", extra), _rows(now, 5)), runs


def test_headers_and_ledger_rows_are_those_of_the_check_before_the_call(
    make_gateway: GatewayFactory, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, now, runs = _both_ways(make_gateway, sim, monkeypatch)
    assert [kind for kind, _ in runs] == ["while"] * 5
    assert now == first
    prefixes = [dict(headers)["x-farebox-prefix"] for headers in now[0]]
    assert len(prefixes) == 5 and all(prefixes)


def test_a_task_s_small_steps_check_once_written_with_the_same_outcome(
    make_gateway: GatewayFactory, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explicit task's small requests (its history and reuse keyed by the task) are
    checked while the upstream works too, with the headers and rows of a check before."""
    first, now, runs = _both_ways(make_gateway, sim, monkeypatch, {"X-Task-Id": "agent-small"})
    assert [kind for kind, _ in runs] == ["while"] * 5
    assert now == first
    assert all(dict(headers)["x-task-id"] == "agent-small" for headers in now[0])


def test_a_limit_holds_with_the_check_estimate(
    make_gateway: GatewayFactory, sim: SimControl, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "farebox.yaml"
    config.write_text(
        f"""
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim.base_url}", family: vllm}}
prices:
  chat: {{input: 2, output: 10}}
tenants:
  teams:
    limited-{id(config)}: {{budget: {{daily_usd: 100}}}}
"""
    )
    team = {"X-Farebox-Team": f"limited-{id(config)}"}

    def start() -> Gateway:
        return make_gateway(config=config, redis_url=require_redis())

    first, now, runs = _both_ways(start, sim, monkeypatch, team)
    assert [kind for kind, _ in runs] == ["while"] * 5  # pending, settled before the hold
    assert now == first
    assert all("x-farebox-budget-reserved-usd" in dict(headers) for headers in now[0])


def test_a_failing_check_is_the_reply_error_and_the_paid_call_is_still_booked(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the check broke")

    with monkeypatch.context() as patched:
        patched.setattr(prefix_pending, "_check", broken)
        for stream in (False, True):
            reply = httpx.post(
                f"{gateway.base_url}/chat/completions",
                json={"model": "chat", "messages": MESSAGES, "stream": stream},
                timeout=10,
            )
            assert reply.status_code == 500
            assert reply.json()["error"]["type"]  # an OpenAI-style error
    assert len(sim.requests()) == 2  # both were sent, so both are paid for ...
    rows = _rows(gateway, 2)  # ... and booked
    assert [row["streamed"] for row in rows] == [False, True]
    assert all(row["prefix_status"] is None for row in rows)
    # The connection the hook ran on is as good as ever: the next request goes through.
    ok = gateway.sdk().chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert ok.headers["x-farebox-prefix"]


# A tool's output an agent carries in its history: ~330 KB, so its first sight is checked in
# a worker thread (`OFF_LOOP_BYTES`) and the steps after it repeat its bytes.
TOOL_OUTPUT = "build: compiled module ok in 12 ms; 0 warnings, cache warm. " * 5500


def _task_steps(gateway: Gateway, key: str, task: str) -> list[list[tuple[str, str]]]:
    """Four steps of one agent task over a large history (two whole, two streamed), each
    the previous one's messages with its reply and a new turn; each reply's headers."""
    client = gateway.sdk(api_key=key, default_headers={"X-Task-Id": task})
    history: list[dict[str, str]] = [
        {"role": "system", "content": GUIDE},
        {"role": "user", "content": TOOL_OUTPUT},
    ]
    seen = []
    for step in range(4):
        history.append({"role": "user", "content": f"Step {step}: continue."})
        if step < 2:
            raw = client.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
            seen.append(_headers(raw))
            answer = raw.parse().choices[0].message.content or ""
        else:
            with client.chat.completions.with_streaming_response.create(
                model="chat",
                messages=history,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            ) as response:
                assert response.headers["x-farebox-prefix"]  # before any event
                seen.append(_headers(response))
                list(response.iter_lines())
            answer = ""
        history.append({"role": "assistant", "content": answer})
    return seen


def test_a_task_s_large_steps_check_once_the_upstream_has_them(
    make_gateway: GatewayFactory, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent task's steps over a history of 330 KB: the first (all of it new) is checked
    in a worker thread before the call, as before; the next one, which repeats its bytes,
    once the upstream has it. The first streamed step is new bytes again (the SDK writes
    `"stream":true` before the messages), the second repeats it. Headers and ledger rows
    are those of the check before the call."""
    sim.reset()
    with monkeypatch.context() as patched:
        patched.setattr(prefix_pending, "can_wait", lambda ctx: False)
        before = make_gateway()
        checked_first = (_task_steps(before, "sk-task-first", "agent-7"), _rows(before, 4))
    sim.reset()
    runs: list[tuple[str, bool]] = []

    def watched(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:  # the sim logs requests in order
            runs.append((kind, upstream_had_it(sim, before=len(runs))))
            return real(*args, **kwargs)

        return check

    monkeypatch.setattr(prefix, "_check", watched("before", prefix._check))
    monkeypatch.setattr(prefix_pending, "_check", watched("while", prefix_pending._check))
    now = make_gateway()
    meanwhile = (_task_steps(now, "sk-task-meanwhile", "agent-7"), _rows(now, 4))
    # A step of new bytes is checked in a worker thread, before the upstream has it
    assert runs == [("while", False), ("while", True), ("while", False), ("while", True)]
    assert meanwhile == checked_first
    prefixes = [dict(headers)["x-farebox-prefix"] for headers in meanwhile[0]]
    assert len(prefixes) == 4 and all(prefixes)
