"""Upstream connections are reused: 100 sequential calls open one or two, streamed or not.

The upstream here is a raw keep-alive HTTP/1.1 server that counts the connections it
accepts. Streams are sent with chunked framing, so the gateway must read the body's end
(the last, empty chunk) after `[DONE]` to put the connection back in its pool; when that
chunk is late, the client's stream must still end at once (the connection is dropped).
A stream that stalls past the route's idle limit ends with `upstream_timeout`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.settings import Settings
from tests.loop_server import LoopServer
from tests.servers import ServerThread

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
LATE_END_S = 3.0


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _events() -> list[bytes]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [{"role": "assistant", "content": ""}, {"content": "hi"}]
    events = [{**base, "choices": [{"index": 0, "delta": d}]} for d in deltas]
    events.append({**base, "choices": [], "usage": USAGE})
    return [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]


def _whole() -> bytes:
    message = {"role": "assistant", "content": "hi"}
    reply = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "usage": USAGE}
    reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    body = json.dumps(reply).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    return head + f"content-length: {len(body)}\r\n\r\n".encode() + body


class CountingUpstream(LoopServer):
    """Keep-alive upstream; the last message names how a stream's body ends."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                )
                body = json.loads(await reader.readexactly(length))
                await self._reply(writer, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _reply(self, writer: asyncio.StreamWriter, body: dict[str, object]) -> None:
        if not body.get("stream"):
            writer.write(_whole())
            return
        how = body["messages"][-1]["content"]  # type: ignore[index]
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
        *events, done = _events()
        for event in events:
            writer.write(_chunk(event))
            await writer.drain()
            if how == "stall":
                await asyncio.sleep(LATE_END_S)  # past the route's idle limit
        if how == "same-write":
            writer.write(_chunk(done) + b"0\r\n\r\n")
            return
        writer.write(_chunk(done))  # then the end, in a write (a packet) of its own
        await writer.drain()
        if how == "late-end":
            await asyncio.sleep(LATE_END_S)
        elif how == "end-after-50ms":  # later than one pass of the loop, within the wait
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def upstream() -> Iterator[CountingUpstream]:
    server = CountingUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway_url(
    upstream: CountingUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    route = {"provider": "openai", "base_url": f"http://127.0.0.1:{upstream.port}/v1"}
    model = {**route, "model": "m", "family": "vllm"}
    config = GatewayConfig.model_validate(
        {
            "models": {"counted": model, "stalling": model},
            "routing": {"stalling": {"retry": {"attempts": 0}, "timeouts": {"idle_s": 0.5}}},
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("FAREBOX_")]:
            patch.delenv(name)
        data_dir: Path = tmp_path_factory.mktemp("reuse-gateway")
        server = ServerThread(create_app(Settings(data_dir=data_dir), config)).start()
    yield f"{server.url}/v1/chat/completions"
    server.stop()


def _body(how: str, stream: bool, model: str = "counted") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": how}], "stream": stream}


def _opened(upstream: CountingUpstream, url: str, how: str, stream: bool, n: int = 100) -> int:
    before = upstream.accepted
    with httpx.Client(timeout=30) as client:
        for _ in range(n):
            response = client.post(url, json=_body(how, stream))
            assert response.status_code == 200, response.text
            if stream:
                assert response.text.rstrip().endswith("data: [DONE]")
    return upstream.accepted - before


@pytest.mark.parametrize("how", ["same-write", "separate-write"])
def test_100_streams_open_one_or_two_upstream_connections(
    upstream: CountingUpstream, gateway_url: str, how: str
) -> None:
    assert _opened(upstream, gateway_url, how, stream=True) <= 2


def test_a_body_end_50_ms_after_done_still_keeps_the_connection(
    upstream: CountingUpstream, gateway_url: str
) -> None:
    """The gateway reads the stream's end after `[DONE]` (a bounded wait), not one loop pass."""
    assert _opened(upstream, gateway_url, "end-after-50ms", stream=True, n=20) <= 2


def test_100_whole_replies_open_one_or_two_upstream_connections(
    upstream: CountingUpstream, gateway_url: str
) -> None:
    assert _opened(upstream, gateway_url, "whole", stream=False) <= 2


def test_a_late_body_end_is_not_waited_for(upstream: CountingUpstream, gateway_url: str) -> None:
    """The client's stream ends at `[DONE]`; the upstream connection is dropped instead."""
    started = time.monotonic()
    before = upstream.accepted
    with httpx.Client(timeout=30) as client:
        for _ in range(2):
            response = client.post(gateway_url, json=_body("late-end", True))
            assert response.text.rstrip().endswith("data: [DONE]")
    assert time.monotonic() - started < LATE_END_S  # neither waited for the late end
    assert upstream.accepted - before >= 1  # the second could not reuse the first's


def test_a_stream_idle_past_its_limit_ends_with_upstream_timeout(gateway_url: str) -> None:
    started = time.monotonic()
    response = httpx.post(gateway_url, json=_body("stall", True, "stalling"), timeout=30)
    events = [e for e in response.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]", events[-2:]
    assert json.loads(events[-2].removeprefix("data: "))["error"]["code"] == "upstream_timeout"
    assert time.monotonic() - started < LATE_END_S  # cut at the idle limit, not the upstream
