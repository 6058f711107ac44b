"""Anthropic Messages inbound (/v1/messages), with the real `anthropic` SDK as the client.

SDK -> gateway -> simulator (which speaks the Messages wire and refuses unknown fields) ->
ledger. Checked: what the simulator received (the client's bytes, only the model name and
the policy's edits changed; the route's key, never the client's), what the client got
(the upstream's bytes and events, usage intact), and what the ledger billed (the
simulator's tokens at Claude Sonnet 4.5's prices).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anthropic
import httpx
import pytest

from gateway.rawjson import patch_object
from gateway.sim.records import redact
from tests.conftest import SimControl
from tests.e2e.conftest import ANTHROPIC_KEY, Gateway, GatewayFactory

# claude-sonnet-4-5 in litellm's map: $3 in, $0.30 cache read, $3.75 cache write, $15 out.
INPUT, CACHE_READ, CACHE_WRITE, OUTPUT = (
    Decimal("3e-6"),
    Decimal("3e-7"),
    Decimal("3.75e-6"),
    Decimal("15e-6"),
)
CLIENT_KEY = "sk-client-messages-key"
LONG_SYSTEM = "You are a careful assistant who reviews invoices line by line. " * 120
TOOLS: Any = [
    {
        "name": "lookup_invoice",
        "description": "Find an invoice by its number.",
        "input_schema": {
            "type": "object",
            "properties": {"number": {"type": "string"}},
            "required": ["number"],
        },
    }
]


class Recorded:
    """The bodies and headers an SDK client sent, as bytes on the wire."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request: Any) -> None:  # the SDK's own httpx fork's request
        self.bodies.append(request.read())
        self.headers.append(dict(request.headers))


def _client(
    gateway: Gateway, api_key: str = CLIENT_KEY, **options: Any
) -> tuple[anthropic.Anthropic, Recorded]:
    recorded = Recorded()
    http = anthropic.DefaultHttpxClient(event_hooks={"request": [recorded]})
    client = anthropic.Anthropic(
        base_url=gateway.server.url, api_key=api_key, max_retries=0, http_client=http, **options
    )
    _OPEN.append(client)
    return client, recorded


_OPEN: list[anthropic.Anthropic] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Every SDK client a test made is closed after it (no socket left to the next test)."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def _sent(sim: SimControl, path: str = "/v1/messages") -> list[dict[str, Any]]:
    """The simulator's records of calls to `path`, oldest first."""
    return [r for r in sim.requests() if r["path"] == path]


def _body(record: dict[str, Any]) -> bytes:
    return base64.b64decode(str(record["body_b64"]))


def _cost(usage: dict[str, int]) -> Decimal:
    return (
        usage.get("input_tokens", 0) * INPUT
        + usage.get("cache_read_input_tokens", 0) * CACHE_READ
        + usage.get("cache_creation_input_tokens", 0) * CACHE_WRITE
        + usage.get("output_tokens", 0) * OUTPUT
    )


def test_a_whole_message_is_forwarded_byte_faithfully_and_billed(
    gateway: Gateway, sim: SimControl
) -> None:
    client, recorded = _client(gateway)
    raw = client.messages.with_raw_response.create(
        model="claude",
        max_tokens=256,
        system="Answer briefly.",
        messages=[{"role": "user", "content": "What is a fare box?"}],
        extra_headers={"X-Task-Id": "msg-whole"},
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sim"  # the upstream's reply, as it came
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0

    (record,) = _sent(sim)
    # The SDK's own bytes with the model renamed: nothing else changed, byte for byte.
    assert _body(record) == patch_object(recorded.bodies[0], {"model": "claude-sim"}, set())
    headers = record["headers"]
    assert isinstance(headers, dict)
    assert headers["x-api-key"] == redact(ANTHROPIC_KEY)  # the route's key, not the client's
    assert headers["anthropic-version"] == recorded.headers[0]["anthropic-version"]

    ctx = gateway.last()
    assert ctx.usage is not None and ctx.cost is not None
    assert ctx.usage.prompt_tokens == message.usage.input_tokens
    assert ctx.usage.completion_tokens == message.usage.output_tokens
    expected = _cost(message.usage.model_dump(exclude_none=True))
    assert ctx.cost.total == expected
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == expected
    assert ctx.task is not None and ctx.task.task_id == "msg-whole"


def _events(stream: Any) -> list[dict[str, Any]]:
    return [event.model_dump(exclude_none=True) for event in stream]


def _stream_usage(events: list[dict[str, Any]]) -> dict[str, int]:
    """The usage a client reads: message_start's, with message_delta's over it."""
    (start,) = [e for e in events if e["type"] == "message_start"]
    usage = dict(start["message"]["usage"])
    for event in events:
        if event["type"] == "message_delta":
            usage |= {k: v for k, v in event["usage"].items() if v is not None}
    return {k: v for k, v in usage.items() if isinstance(v, int)}


def test_a_stream_with_tools_thinking_and_cache_control_is_relayed_and_billed(
    gateway: Gateway, sim: SimControl
) -> None:
    """Two calls of one task: the breakpoint writes the cache, the second call reads it."""
    client, recorded = _client(gateway)
    request: dict[str, Any] = {
        "model": "claude",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Check invoice 42."}],
        "extra_headers": {"X-Task-Id": "msg-stream", "X-Task-Step": "1"},
    }
    costs: list[Decimal] = []
    for call in range(2):
        with client.messages.stream(**request) as stream:
            events = _events(stream)
            final = stream.get_final_message()
        kinds = [e["type"] for e in events]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert "content_block_delta" in kinds and "message_delta" in kinds
        usage = _stream_usage(events)
        start_usage = events[0]["message"]["usage"]
        assert start_usage["input_tokens"] > 0  # not the 0/0 a lossy relay shows
        assert final.usage.output_tokens == usage["output_tokens"] > 0
        assert {b.type for b in final.content} >= {"thinking"}
        if call == 0:
            assert usage.get("cache_creation_input_tokens", 0) > 0
        else:
            assert usage.get("cache_read_input_tokens", 0) > 0

        record = _sent(sim)[-1]
        assert _body(record) == patch_object(recorded.bodies[-1], {"model": "claude-sim"}, set())
        ctx = gateway.last(call + 1)
        assert ctx.usage is not None and ctx.cost is not None
        prompt = (
            usage["input_tokens"]
            + usage.get("cache_read_input_tokens", 0)
            + usage.get("cache_creation_input_tokens", 0)
        )
        assert ctx.usage.prompt_tokens == prompt == record["prompt_tokens"]
        assert ctx.usage.cached_tokens == usage.get("cache_read_input_tokens", 0)
        assert ctx.usage.cache_write_tokens == usage.get("cache_creation_input_tokens", 0)
        assert ctx.usage.completion_tokens == usage["output_tokens"] == record["completion_tokens"]
        assert ctx.cost.total == _cost(usage)
        assert ctx.timings.first_token is not None
        costs.append(ctx.cost.total)

    task = httpx.get(f"{gateway.base_url}/tasks/msg-stream", timeout=30).json()
    assert task["request_count"] == 2
    assert Decimal(task["cost"]["total"]) == sum(costs)


def test_tool_use_round_trip(gateway: Gateway, sim: SimControl) -> None:
    """A tool_use answer and the tool_result turn after it pass through unchanged."""
    client, recorded = _client(gateway)
    messages: Any = [
        {"role": "user", "content": "Check invoice 42."},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "lookup_invoice",
                    "input": {"number": "42"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "paid"}],
        },
    ]
    message = client.messages.create(
        model="claude",
        max_tokens=128,
        tools=TOOLS,
        messages=messages,
    )
    assert message.content
    assert _body(_sent(sim)[-1]) == patch_object(
        recorded.bodies[-1], {"model": "claude-sim"}, set()
    )


def test_count_tokens_is_forwarded_and_matches_the_billed_prompt(
    gateway: Gateway, sim: SimControl
) -> None:
    client, recorded = _client(gateway)
    prompt: dict[str, Any] = {
        "model": "claude",
        "system": "Answer briefly.",
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "How many tokens is this?"}],
    }
    counted = client.messages.count_tokens(**prompt)
    (record,) = _sent(sim, "/v1/messages/count_tokens")
    assert _body(record) == patch_object(recorded.bodies[0], {"model": "claude-sim"}, set())
    assert record["headers"]["x-api-key"] == redact(ANTHROPIC_KEY)
    message = client.messages.create(max_tokens=64, **prompt)
    assert counted.input_tokens == message.usage.input_tokens > 0
    assert len(gateway.seen) == 1  # the count is free: no ledger row, no quota


def test_the_simulator_refuses_what_the_token_counter_refuses(sim: SimControl) -> None:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    body = {"model": "claude-sim", "messages": [{"role": "user", "content": "hi"}]}
    ok = sim.http.post("/v1/messages/count_tokens", json=body, headers=headers)
    assert ok.status_code == 200 and ok.json()["input_tokens"] > 0
    for extra in ({"max_tokens": 10}, {"stream": True}, {"temperature": 0.5}):
        refused = sim.http.post("/v1/messages/count_tokens", json=body | extra, headers=headers)
        assert refused.status_code == 400
        (name,) = extra
        assert refused.json()["error"] == {
            "type": "invalid_request_error",
            "message": f"{name}: Extra inputs are not permitted",
        }
    unversioned = sim.http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": "k"})
    assert unversioned.status_code == 400


def test_claude_codes_session_header_is_the_task(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    session = "5b0c7f3e-2a6d-4c1e-9d8e-0f1a2b3c4d5e"
    for _ in range(2):
        client.messages.create(
            model="claude",
            max_tokens=32,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Claude-Code-Session-Id": session},
        )
    task = httpx.get(f"{gateway.base_url}/tasks/{session}", timeout=30).json()
    assert task["request_count"] == 2
    # An explicit task id wins over the session.
    client.messages.create(
        model="claude",
        max_tokens=32,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Claude-Code-Session-Id": session, "X-Task-Id": "named-task"},
    )
    named = gateway.last(3).task
    assert named is not None and named.task_id == "named-task"


def test_errors_come_in_anthropics_shape_as_the_sdks_own_classes(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    hi: Any = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=8, messages=hi)
    assert missing.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": missing.value.body["error"]["message"]},  # type: ignore[index]
        "request_id": missing.value.response.headers["x-request-id"],
    }
    assert "no-such-model" in missing.value.message
    with pytest.raises(anthropic.BadRequestError) as chat_route:
        pdf: Any = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}
        document: Any = [{"role": "user", "content": [{"type": "document", "source": pdf}]}]
        client.messages.create(model="chat", max_tokens=8, messages=document)
    assert "chat completions" in chat_route.value.message  # translated, but no documents
    with pytest.raises(anthropic.BadRequestError) as empty:
        client.messages.create(model="claude", max_tokens=8, messages=[])
    assert "messages" in empty.value.message
    # The upstream's own refusal, relayed with its message.
    with pytest.raises(anthropic.BadRequestError) as upstream:
        client.messages.create(
            model="claude", max_tokens=8, messages=hi, extra_body={"frobnicate": 1}
        )
    assert upstream.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "frobnicate: Extra inputs are not permitted" in upstream.value.message
    assert not gateway.seen or all(c.status_code != 200 for c in gateway.seen)


def test_fast_mode_gets_its_beta_and_is_billed_as_fast(gateway: Gateway, sim: SimControl) -> None:
    client, recorded = _client(gateway)
    raw = client.messages.with_raw_response.create(
        model="claude",
        max_tokens=32,
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"speed": "fast"},
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
    )
    record = _sent(sim)[-1]
    betas = record["headers"]["anthropic-beta"].split(",")
    # The client's beta kept, the one fast mode needs added by the policy.
    assert betas == ["interleaved-thinking-2025-05-14", "fast-mode-2026-02-01"]
    assert _body(record) == patch_object(recorded.bodies[-1], {"model": "claude-sim"}, set())
    ctx = gateway.last()
    assert ctx.tier_served == "fast" and ctx.tier_confirmed is True
    assert raw.headers["x-farebox-tier"] == "fast"


def test_an_upstream_refusal_before_the_stream_keeps_its_status_and_retry_after(
    gateway: Gateway, sim: SimControl
) -> None:
    sim.fault(match={"path": "/v1/messages"}, status=429, headers={"retry-after": "7"})
    client, _ = _client(gateway)
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    assert limited.value.response.headers["retry-after"] == "7"
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    ctx = gateway.last()
    assert ctx.status_code == 429 and ctx.cost is not None and ctx.cost.total == 0


def test_a_stream_cut_by_the_upstream_ends_with_an_anthropic_error_and_is_booked(
    gateway: Gateway, sim: SimControl
) -> None:
    sim.fault(match={"path": "/v1/messages"}, drop_after_chunks=4)
    client, _ = _client(gateway)
    seen: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as cut,
        client.messages.stream(
            model="claude", max_tokens=512, messages=[{"role": "user", "content": "Tell a story."}]
        ) as stream,
    ):
        for event in stream:
            seen.append(event.type)
    assert seen and seen[0] == "message_start"  # the events before the cut were relayed
    assert cut.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert "before a complete reply" in cut.value.body["error"]["message"]  # type: ignore[index]
    ctx = gateway.last()
    assert ctx.status_code == 502 and ctx.error_type == "upstream_unreachable"
    # What the upstream already reported (message_start's input) is billed.
    assert ctx.usage is not None and ctx.usage.prompt_tokens > 0


def test_images_and_documents_pass_through_untouched(gateway: Gateway, sim: SimControl) -> None:
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    pdf = base64.b64encode(b"%PDF-1.4 a tiny document").decode()
    content: Any = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "text", "text": "What is in these?"},
    ]
    client, recorded = _client(gateway)
    message = client.messages.create(
        model="claude", max_tokens=64, messages=[{"role": "user", "content": content}]
    )
    assert message.usage.input_tokens > 0
    assert _body(_sent(sim)[-1]) == patch_object(
        recorded.bodies[-1], {"model": "claude-sim"}, set()
    )
    ctx = gateway.last()
    assert ctx.cost is not None and ctx.cost.total == _cost(
        message.usage.model_dump(exclude_none=True)
    )


def test_a_client_that_leaves_mid_stream_is_booked_and_the_upstream_closed(
    gateway: Gateway, sim: SimControl
) -> None:
    sim.http.post("/sim/config", json={"decode_ms_per_token": 20}).raise_for_status()
    body = {
        "model": "claude",
        "max_tokens": 2000,
        "stream": True,
        "messages": [{"role": "user", "content": "Write at length."}],
    }
    headers = {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"}
    url = f"{gateway.server.url}/v1/messages"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        first = next(response.iter_bytes())
        assert b"message_start" in first
    ctx = gateway.last()
    assert ctx.status_code == 499 and ctx.error_type == "client_disconnected"
    assert ctx.usage is not None and ctx.usage.prompt_tokens > 0  # message_start's input
    assert ctx.usage.estimated  # the output, never counted upstream, estimated from the text
    # The simulator marks the call cancelled when it notices the closed connection: poll.
    deadline = time.monotonic() + 10
    while _sent(sim)[-1]["cancelled"] is not True:
        assert time.monotonic() < deadline, "the upstream call was not cancelled"
        time.sleep(0.05)


def test_a_long_prompt_is_taken_and_one_over_the_limit_refused_as_request_too_large(
    make_gateway: GatewayFactory, sim: SimControl
) -> None:
    """Claude Code's prompts run to megabytes: the prompt limit applies, not the 1 MiB API one."""
    gateway = make_gateway(max_body_bytes=3 * 1024 * 1024)
    client, recorded = _client(gateway)
    long_text = "Line of a long transcript, repeated. " * 50_000  # about 1.8 MB
    hi: Any = [{"role": "user", "content": long_text}]
    message = client.messages.create(model="claude", max_tokens=16, messages=hi)
    assert message.usage.input_tokens > 100_000
    assert _body(_sent(sim)[-1]) == patch_object(
        recorded.bodies[-1], {"model": "claude-sim"}, set()
    )
    huge: Any = [{"role": "user", "content": long_text * 2}]
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.messages.create(model="claude", max_tokens=16, messages=huge)
    assert refused.value.status_code == 413
    assert refused.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]


def _prefix_run(gateway: Gateway, task: str, systems: list[str]) -> list[dict[str, Any]]:
    """One call per system prompt (a breakpoint on it), in one task; what each said."""
    client, _ = _client(gateway)
    seen: list[dict[str, Any]] = []
    for step, system in enumerate(systems):
        raw = client.messages.with_raw_response.create(
            model="claude",
            max_tokens=32,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": f"Check invoice {step}."}],
            extra_headers={"X-Task-Id": task},
        )
        usage = raw.parse().usage
        seen.append(
            {
                "header": raw.headers["x-farebox-prefix"],
                "expected": int(raw.headers["x-farebox-expected-cached-tokens"]),
                "cached": usage.cache_read_input_tokens or 0,
                "verdict": gateway.last(step + 1).prefix,
            }
        )
    return seen


def test_the_prefix_check_reads_the_messages_layout(gateway: Gateway) -> None:
    stable = _prefix_run(gateway, "prefix-stable", [LONG_SYSTEM] * 3)
    assert stable[0]["expected"] == 0
    for step in stable[1:]:
        assert step["header"] == "stable"
        assert step["cached"] > 1000
        assert abs(step["expected"] - step["cached"]) <= 0.15 * step["cached"]
        assert step["verdict"].verdict.status.value == "hit"  # the expected prefix was read
    stamped = [f"Current time: 2026-11-29T10:{m:02d}:07Z\n{LONG_SYSTEM}" for m in range(3)]
    volatile = _prefix_run(gateway, "prefix-volatile", stamped)
    for step in volatile[1:]:
        assert "segment=system" in step["header"] and "volatile" in step["header"]
        assert step["expected"] == 0 and step["cached"] == 0


def test_a_prompt_without_breakpoints_is_reported_uncacheable(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    raw = client.messages.with_raw_response.create(
        model="claude",
        max_tokens=16,
        system=LONG_SYSTEM,
        messages=[{"role": "user", "content": "hi"}],
    )
    assert raw.headers["x-farebox-prefix"].startswith("uncacheable")
