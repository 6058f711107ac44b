"""The Anthropic Messages route, in-process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from gateway.sim import SimConfig, SimModel, create_sim_app

EventParser = Callable[[str], list[tuple[str, dict[str, Any]]]]
URL = "/v1/messages"
HEADERS = {"anthropic-version": "2023-06-01"}
# Well over claude-sim's 1024-token minimum for a cacheable prefix.
BIG_SYSTEM = "Follow the house style guide and answer briefly. " * 150


def request(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sim",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": BIG_SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hello"}],
    }
    return {**body, **extra}


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post(URL, json=body, headers=HEADERS)


async def test_message_shape_and_cache_write_then_read(client: httpx.AsyncClient) -> None:
    first = await post(client, request())
    assert first.status_code == 200
    body = first.json()
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["id"].startswith("msg_") and body["stop_reason"] == "end_turn"
    assert body["stop_sequence"] is None
    assert [block["type"] for block in body["content"]] == ["text"]
    usage = body["usage"]
    written = usage["cache_creation_input_tokens"]
    assert written > 1024 and usage["cache_read_input_tokens"] == 0
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": written,
        "ephemeral_1h_input_tokens": 0,
    }
    assert usage["output_tokens"] == 24 and usage["service_tier"] == "standard"
    second = (await post(client, request())).json()["usage"]
    assert second["cache_read_input_tokens"] == written
    assert second["cache_creation_input_tokens"] == 0
    # input_tokens excludes cache reads and writes: the same small tail both times.
    assert second["input_tokens"] == usage["input_tokens"] < 20


async def test_automatic_top_level_cache_control_and_1h(client: httpx.AsyncClient) -> None:
    body = request(system=BIG_SYSTEM, cache_control={"type": "ephemeral", "ttl": "1h"})
    first = (await post(client, body)).json()["usage"]
    assert first["cache_creation"]["ephemeral_1h_input_tokens"] > 1024
    assert first["input_tokens"] < 10  # only the "Assistant:" suffix is after the breakpoint
    body["messages"] += [
        {"role": "assistant", "content": "Earlier answer."},
        {"role": "user", "content": "And a follow-up question."},
    ]
    second = (await post(client, body)).json()["usage"]
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert 0 < second["cache_creation_input_tokens"] < 30


async def test_no_breakpoint_no_cache_and_short_prefix(client: httpx.AsyncClient) -> None:
    plain = request(system=BIG_SYSTEM)
    for _ in range(2):
        usage = (await post(client, plain)).json()["usage"]
        assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0
    short = request(
        system=[{"type": "text", "text": "tiny", "cache_control": {"type": "ephemeral"}}]
    )
    for _ in range(2):
        usage = (await post(client, short)).json()["usage"]
        assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0


async def test_thinking_enabled_budget_and_max_tokens(client: httpx.AsyncClient) -> None:
    body = (await post(client, request(thinking={"type": "enabled", "budget_tokens": 1024}))).json()
    thinking, text = body["content"]
    assert thinking["type"] == "thinking" and thinking["signature"]
    assert text["type"] == "text"
    assert len(thinking["thinking"].split(" ")) == 80  # default effort is high
    assert body["usage"]["output_tokens"] == 80 + 24
    low = request(thinking={"type": "adaptive"}, output_config={"effort": "low"})
    assert (await post(client, low)).json()["usage"]["output_tokens"] == 20 + 24
    disabled = (await post(client, request(thinking={"type": "disabled"}))).json()
    assert [block["type"] for block in disabled["content"]] == ["text"]
    truncated = (await post(client, request(max_tokens=10))).json()
    assert truncated["stop_reason"] == "max_tokens"
    assert truncated["usage"]["output_tokens"] == 10


async def test_stream_event_sequence(client: httpx.AsyncClient, events_of: EventParser) -> None:
    body = request(stream=True, thinking={"type": "enabled", "budget_tokens": 2000})
    response = await post(client, body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response.text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 1
    assert start["usage"]["cache_creation_input_tokens"] > 1024
    blocks = [
        data["content_block"]["type"] for name, data in events if name == "content_block_start"
    ]
    assert blocks == ["thinking", "text"]
    deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"]
    assert deltas == ["thinking_delta"] * 80 + ["signature_delta"] + ["text_delta"] * 24
    stops = [data["index"] for name, data in events if name == "content_block_stop"]
    assert stops == [0, 1]
    final = events[-2][1]
    assert final["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert final["usage"]["output_tokens"] == 104
    assert (
        final["usage"]["cache_creation_input_tokens"]
        == start["usage"]["cache_creation_input_tokens"]
    )


async def test_stream_matches_non_stream(client: httpx.AsyncClient, events_of: EventParser) -> None:
    whole = (await post(client, request(thinking={"type": "adaptive"}))).json()
    events = events_of(
        (await post(client, request(thinking={"type": "adaptive"}, stream=True))).text
    )
    thinking = "".join(
        d["delta"].get("thinking", "") for n, d in events if n == "content_block_delta"
    )
    text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
    signature = next(
        d["delta"]["signature"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    )
    assert [thinking, text] == [whole["content"][0]["thinking"], whole["content"][1]["text"]]
    assert signature == whole["content"][0]["signature"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_tokens": None}, "max_tokens: Field required"),
        ({"thinking": {"type": "enabled", "budget_tokens": 500}}, "greater than or equal to 1024"),
        ({"thinking": {"type": "enabled", "budget_tokens": 5000}}, "must be greater than"),
        ({"thinking": {"type": "adaptive"}, "temperature": 0.5}, "temperature"),
        ({"cache_control": {"type": "persistent"}}, "cache_control"),
        # OpenAI fields have no place in a Messages API body.
        ({"reasoning_effort": "high"}, "reasoning_effort: Extra inputs are not permitted"),
        ({"n": 2}, "n: Extra inputs are not permitted"),
    ],
)
async def test_validation(client: httpx.AsyncClient, change: dict[str, Any], message: str) -> None:
    body = {k: v for k, v in {**request(), **change}.items() if v is not None}
    response = await post(client, body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert message in error["error"]["message"]


async def test_too_many_breakpoints(client: httpx.AsyncClient) -> None:
    blocks = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    response = await post(client, request(system=blocks))
    assert response.status_code == 400 and "maximum of 4" in response.json()["error"]["message"]


async def test_version_header_model_and_key() -> None:
    app = create_sim_app(SimConfig(api_key=SecretStr("ak")))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        denied = await client.post(URL, json=request(), headers=HEADERS)
        assert denied.status_code == 401
        assert denied.json()["error"]["type"] == "authentication_error"
        keyed = {"x-api-key": "ak"}
        no_version = await client.post(URL, json=request(), headers=keyed)
        assert no_version.status_code == 400
        unknown = await client.post(
            URL, json=request(model="claude-x"), headers={**keyed, **HEADERS}
        )
        assert unknown.status_code == 404
        assert unknown.json()["error"]["type"] == "not_found_error"
        ok = await client.post(URL, json=request(), headers={**keyed, **HEADERS})
        assert ok.status_code == 200 and ok.headers["request-id"].startswith("req_")


async def test_fast_mode_speeds_decode_only() -> None:
    config = SimConfig(
        prefill_ms_per_token=1.0,
        decode_ms_per_token=1.0,
        models=[SimModel(name="claude-fast", api="anthropic", supports_fast_mode=True)],
    )
    transport = httpx.ASGITransport(app=create_sim_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        body = request(model="claude-fast", system="short")
        standard = await post(client, body)
        fast_beta = {**HEADERS, "anthropic-beta": "fast-mode-2026-02-01"}
        fast = await client.post(URL, json={**body, "speed": "fast"}, headers=fast_beta)
        assert fast.json()["usage"]["speed"] == "fast"
        assert "speed" not in standard.json()["usage"]
        assert float(standard.headers["x-sim-decode-ms"]) == pytest.approx(24.0)
        assert float(fast.headers["x-sim-decode-ms"]) == pytest.approx(24.0 * 0.4)
        assert fast.headers["x-sim-prefill-ms"] == standard.headers["x-sim-prefill-ms"]


async def test_tool_history_and_dropped_thinking(client: httpx.AsyncClient) -> None:
    def turn(thinking_text: str) -> dict[str, Any]:
        return request(
            system="short",
            tools=[{"name": "lookup", "input_schema": {"type": "object"}}],
            messages=[
                {"role": "user", "content": "find it"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": thinking_text, "signature": "sig"},
                        {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "found"}],
                },
            ],
        )

    short = (await post(client, turn("brief"))).json()
    long = (await post(client, turn("a much longer chain of thought " * 20))).json()
    # Earlier turns' thinking is stripped from the context, so it costs no input tokens.
    assert short["usage"]["input_tokens"] == long["usage"]["input_tokens"]
