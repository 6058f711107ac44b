"""The chat relay sends what one read brought as one message: the client sees the same events.

A real upstream on a real port writes one stream two ways: all of it in one write (as the
perf-floor mock does, so the relay gets every event in one read and forwards them in one
message) and in small pieces with pauses between them (each read completes at most part of
an event). Either way the client must get the upstream's events byte for byte and in
order, the usage chunk dropped when it did not ask for it and carrying its cost when it
did, and the attempt booked once with the upstream's own counts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Gateway, GatewayFactory
from tests.loop_server import LoopServer

TOKENS = [f" tok{i}" for i in range(16)]
USAGE = {"prompt_tokens": 9, "completion_tokens": len(TOKENS), "total_tokens": 9 + len(TOKENS)}
CONFIG = """models:
  batch: {{provider: openai, model: up-model, base_url: "{url}/v1", family: vllm}}
  batch-claude:
    {{provider: anthropic, model: up-claude, base_url: "{url}", api_key_env: FAREBOX_TEST_ANTHROPIC_KEY}}
prices:
  batch: {{input: 1.0, output: 2.0}}
  batch-claude: {{input: 3.0, output: 15.0}}
"""


def _chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-batch",
        "object": "chat.completion.chunk",
        "created": 1764547200,
        "model": "up-model",
    }
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    body["choices"] = [choice] if delta is not None else []
    return b"data: " + json.dumps(body | extra, separators=(",", ":")).encode() + b"\n\n"


EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    *[_chunk({"content": token}) for token in TOKENS],
    _chunk({}, "stop"),
    _chunk(None, usage=USAGE),
    b"data: [DONE]\n\n",
]
USAGE_EVENT = EVENTS[-2]


def _typed(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **payload}, separators=(",", ":")).encode()
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


MESSAGE: dict[str, Any] = {
    "id": "msg_batch",
    "type": "message",
    "role": "assistant",
    "model": "up-claude",
}
MESSAGE |= {"content": [], "stop_reason": None, "stop_sequence": None}
MESSAGES_EVENTS = [
    _typed(
        "message_start", {"message": MESSAGE | {"usage": {"input_tokens": 9, "output_tokens": 1}}}
    ),
    _typed("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
    *[
        _typed("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": t}})
        for t in TOKENS
    ],
    _typed("content_block_stop", {"index": 0}),
    _typed(
        "message_delta",
        {
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 16},
        },
    ),
    _typed("message_stop", {}),
]


class Upstream(LoopServer):
    """An OpenAI-compatible stream on a real port: chunked, in one write or in pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.piece = 0  # 0: everything in one write; else bytes per write, 2 ms apart

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: the gateway reuses its connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                messages = head.split(b" ", 2)[1].endswith(b"/messages")
                await self._stream(writer, MESSAGES_EVENTS if messages else EVENTS)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, events: list[bytes]) -> None:
        body = b"".join(events)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        wire = head + b"transfer-encoding: chunked\r\n\r\n"
        if not self.piece:
            writer.write(wire + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            await writer.drain()
            return
        writer.write(wire)
        for start in range(0, len(body), self.piece):
            part = body[start : start + self.piece]
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await asyncio.sleep(0.002)  # apart: the gateway reads each piece on its own
        writer.write(b"0\r\n\r\n")
        await writer.drain()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    yield server
    server.stop()


@pytest.fixture
def batch_gateway(upstream: Upstream, make_gateway: GatewayFactory, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=f"http://127.0.0.1:{upstream.port}"))
    return make_gateway(config=config)


def _events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event.strip()]


def _stream(gateway: Gateway, usage: bool) -> list[bytes]:
    body: dict[str, Any] = {
        "model": "batch",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    response = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return _events(response.content)


@pytest.mark.parametrize("piece", [0, 7, 100], ids=["one-write", "7-byte-writes", "100-byte"])
@pytest.mark.parametrize("usage", [False, True], ids=["no-usage", "usage"])
def test_the_client_gets_the_upstreams_events_however_they_were_written(
    batch_gateway: Gateway, upstream: Upstream, piece: int, usage: bool
) -> None:
    upstream.piece = piece
    before = len(batch_gateway.seen)
    got = _stream(batch_gateway, usage)
    if not usage:
        assert got == [event for event in EVENTS if event != USAGE_EVENT]
    else:
        at = EVENTS.index(USAGE_EVENT)
        assert got[:at] == EVENTS[:at] and got[at + 1 :] == EVENTS[at + 1 :]
        sent = json.loads(got[at].removeprefix(b"data: "))
        assert {k: v for k, v in sent["usage"].items() if k != "cost"} == USAGE
        cost = Decimal(sent["usage"]["cost"]["total"])
        assert {k: v for k, v in sent.items() if k != "usage"} == {
            k: v for k, v in json.loads(USAGE_EVENT.removeprefix(b"data: ")).items() if k != "usage"
        }
    ctx = batch_gateway.last(before + 1)
    assert len(batch_gateway.seen) == before + 1  # booked once
    assert ctx.status_code == 200 and ctx.error_type is None
    assert ctx.usage is not None and not ctx.usage.estimated
    assert (ctx.usage.prompt_tokens, ctx.usage.completion_tokens) == (9, len(TOKENS))
    if usage:  # the usage chunk's cost is the booked one: 9 in, 16 out, at $1 and $2 / M
        assert ctx.cost is not None and cost == ctx.cost.total == Decimal("0.000041")


def test_many_streams_in_a_row_are_each_booked_once(
    batch_gateway: Gateway, upstream: Upstream
) -> None:
    before = len(batch_gateway.seen)
    for piece in (0, 13, 0, 64, 0):
        upstream.piece = piece
        assert _stream(batch_gateway, usage=False)[-1] == b"data: [DONE]\n\n"
    batch_gateway.last(before + 5)
    assert len(batch_gateway.seen) == before + 5
    assert {ctx.status_code for ctx in batch_gateway.seen[before:]} == {200}


@pytest.mark.parametrize("piece", [0, 7, 100], ids=["one-write", "7-byte-writes", "100-byte"])
def test_a_messages_stream_is_relayed_the_same_however_it_was_written(
    batch_gateway: Gateway, upstream: Upstream, piece: int
) -> None:
    upstream.piece = piece
    before = len(batch_gateway.seen)
    body = {
        "model": "batch-claude",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"x-api-key": "sk-client-batch", "anthropic-version": "2023-06-01"}
    url = f"{batch_gateway.server.url}/v1/messages"
    response = httpx.post(url, json=body, headers=headers, timeout=30)
    assert response.status_code == 200
    got = _events(response.content)
    at = len(MESSAGES_EVENTS) - 2  # message_delta: its usage gets the cost
    assert got[:at] == MESSAGES_EVENTS[:at] and got[at + 1 :] == MESSAGES_EVENTS[at + 1 :]
    sent = json.loads(got[at].split(b"data: ", 1)[1])
    expected = json.loads(MESSAGES_EVENTS[at].split(b"data: ", 1)[1])
    cost = sent["usage"].pop("cost")
    assert sent == expected
    ctx = batch_gateway.last(before + 1)
    assert len(batch_gateway.seen) == before + 1  # booked once
    assert ctx.status_code == 200 and ctx.usage is not None and not ctx.usage.estimated
    assert (ctx.usage.prompt_tokens, ctx.usage.completion_tokens) == (9, 16)
    assert ctx.cost is not None and Decimal(cost["total"]) == ctx.cost.total
