"""A hostile OpenAI-compatible upstream on a real port, misbehaving on demand.

It speaks raw HTTP/1.1 over asyncio streams (no framework to tidy its output up), one
request per connection. The last message's content names the misbehaviour, so every
request picks its own and tests need no shared switch:

    client.chat.completions.create(model="hostile", messages=ask("text"))

Whole replies (`stream: false`) and streams each have their names (`WHOLE`, `STREAMS`);
"ok", "gzip", "nonsense-usage" and the resets work both ways. Every request is recorded
(scenario, streamed, headers) in `calls`, so a test can count what reached the upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import json
import socket
import struct
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.loop_server import LoopServer

ANSWER = "The invoice was paid."
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
NONSENSE_USAGE = {"prompt_tokens": 10**30, "completion_tokens": -5, "total_tokens": "many"}
ENDLESS_BYTES = 20 * 1024 * 1024  # one event with no end: past the gateway's 8 MiB cap


def ask(scenario: str) -> list[dict[str, str]]:
    """Messages that make the hostile upstream play `scenario`."""
    return [{"role": "user", "content": scenario}]


@dataclass(frozen=True)
class Call:
    """One request the upstream received."""

    scenario: str
    stream: bool
    headers: dict[str, str]


def completion(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A well-formed `chat.completion`."""
    message = {"role": "assistant", "content": ANSWER}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1,
        "model": "hostile",
        "choices": [choice],
        "usage": usage or USAGE,
    }


def chunk(
    delta: Any = None, choices: Any = None, usage: Any = None, finish: str | None = None
) -> dict[str, Any]:
    """A `chat.completion.chunk`, as malformed as asked."""
    if choices is None:
        choices = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    body = {"id": "chatcmpl-hostile", "object": "chat.completion.chunk", "created": 1}
    body |= {"model": "hostile", "choices": choices}
    return body if usage is None else body | {"usage": usage}


def event(payload: Any) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {text}\n\n".encode()


ROLE = event(chunk({"role": "assistant", "content": ""}))
GOOD_EVENTS = [
    ROLE,
    event(chunk({"content": "The invoice "})),
    event(chunk({"content": "was paid."})),
    event(chunk(finish="stop")),
    event(chunk(choices=[], usage=USAGE)),
    b"data: [DONE]\n\n",
]
MALFORMED_EVENTS = {
    "delta-string": [ROLE, event(chunk("oops")), b"data: [DONE]\n\n"],
    "choices-object": [ROLE, event(chunk(choices={"0": {"delta": {}}})), b"data: [DONE]\n\n"],
    "choice-string": [ROLE, event(chunk(choices=["x"])), b"data: [DONE]\n\n"],
    "usage-string": [ROLE, event(chunk(choices=[], usage="lots")), b"data: [DONE]\n\n"],
    "not-json": [ROLE, b"data: this is not json\n\n", b"data: [DONE]\n\n"],
    "array-event": [ROLE, b"data: [1, 2]\n\n", b"data: [DONE]\n\n"],
    "first-not-json": [b'data: {"choices": [\n\n', b"data: [DONE]\n\n"],
    "no-done": GOOD_EVENTS[:-1],
    # vLLM's way to fail mid-stream: an error event, then [DONE].
    "error-event": [
        ROLE,
        event({"error": {"message": "model overloaded", "type": "server_error", "code": 503}}),
        b"data: [DONE]\n\n",
    ],
}

Writer = asyncio.StreamWriter
Play = Callable[[Writer], Awaitable[None]]


def _head(status: int = 200, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} OK", "connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _whole(writer: Writer, body: bytes, content_type: str = "application/json") -> None:
    headers = {"content-type": content_type, "content-length": str(len(body))}
    writer.write(_head(headers=headers) + body)
    await writer.drain()


@functools.cache
def _bomb() -> bytes:
    """80 MiB of JSON whitespace, gzipped to 360 KB: past the gateway's 64 MiB, decoded."""
    return gzip.compress(b"{" + b" " * (80 * 1024 * 1024), compresslevel=1)


async def _gzip_bomb(writer: Writer) -> None:
    await _whole_encoded(writer, _bomb())


async def _gzip_whole(writer: Writer) -> None:
    body = gzip.compress(json.dumps(completion()).encode())
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    writer.write(_head(headers=headers | {"content-length": str(len(body))}) + body)
    await writer.drain()


async def _events(writer: Writer, events: list[bytes], encoding: str | None = None) -> None:
    headers = {"content-type": "text/event-stream"}
    if encoding:
        headers["content-encoding"] = encoding
    writer.write(_head(headers=headers))
    packer = zlib.compressobj(wbits=31) if encoding == "gzip" else None
    for item in events:
        # A compressing upstream flushes per event, as a streaming server must.
        data = packer.compress(item) + packer.flush(zlib.Z_SYNC_FLUSH) if packer else item
        writer.write(data)
        await writer.drain()
    if packer is not None:
        writer.write(packer.flush())
    await writer.drain()


async def _bad_gzip_stream(writer: Writer) -> None:
    """Says gzip, sends plain bytes."""
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    writer.write(_head(headers=headers) + b"".join(GOOD_EVENTS))
    await writer.drain()


async def _slow_events(writer: Writer) -> None:
    """A stream that starts late and trickles: 0.5 s to its head, then an event per 0.2 s."""
    await asyncio.sleep(0.5)
    writer.write(_head(headers={"content-type": "text/event-stream"}))
    for item in [ROLE, *[event(chunk({"content": "word "}))] * 20, GOOD_EVENTS[-1]]:
        writer.write(item)
        await writer.drain()
        await asyncio.sleep(0.2)


async def _endless(writer: Writer) -> None:
    writer.write(_head(headers={"content-type": "text/event-stream"}) + b"data: ")
    piece = b"x" * 65536
    for _ in range(ENDLESS_BYTES // len(piece)):
        writer.write(piece)
        await writer.drain()  # the gateway hangs up at its cap: this raises then


async def _reset(writer: Writer, first: bytes) -> None:
    """Send `first`, let the peer read it, then reset the connection (RST, not FIN)."""
    writer.write(first)
    await writer.drain()
    await asyncio.sleep(0.2)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _whole_plays() -> dict[str, Play]:
    body = json.dumps(completion()).encode()
    return {
        "ok": lambda w: _whole(w, body),
        "text": lambda w: _whole(w, b"hello there", "text/plain"),
        "array": lambda w: _whole(w, b"[1, 2, 3]"),
        "truncated": lambda w: _whole(w, body[: len(body) // 2]),
        "empty": lambda w: _whole(w, b""),
        "no-choices": lambda w: _whole(w, b'{"id": "chatcmpl-hostile"}'),
        "message-string": lambda w: _whole(
            w, body.replace(b'"message": {', b'"message": 1, "m": {')
        ),
        "usage-string": lambda w: _whole(w, json.dumps(completion() | {"usage": "lots"}).encode()),
        "nonsense-usage": lambda w: _whole(w, json.dumps(completion(NONSENSE_USAGE)).encode()),
        "gzip": _gzip_whole,
        "bad-gzip": lambda w: _whole_encoded(w, b"this is not gzip at all"),
        "gzip-bomb": _gzip_bomb,
        "reset-before-body": lambda w: _reset(w, _head(headers={"content-length": "500"})),
        "reset-mid-body": lambda w: _reset(
            w, _head(headers={"content-length": str(len(body))}) + body[:20]
        ),
    }


async def _whole_encoded(writer: Writer, body: bytes) -> None:
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    writer.write(_head(headers=headers | {"content-length": str(len(body))}) + body)
    await writer.drain()


def _stream_plays() -> dict[str, Play]:
    plays: dict[str, Play] = {
        "ok": lambda w: _events(w, GOOD_EVENTS),
        "gzip": lambda w: _events(w, GOOD_EVENTS, "gzip"),
        "bad-gzip": _bad_gzip_stream,
        "nonsense-usage": lambda w: _events(
            w, [*GOOD_EVENTS[:4], event(chunk(choices=[], usage=NONSENSE_USAGE)), GOOD_EVENTS[-1]]
        ),
        "endless": _endless,
        "reset-before-body": lambda w: _reset(
            w, _head(headers={"content-type": "text/event-stream"})
        ),
        "reset-mid-body": lambda w: _reset(
            w, _head(headers={"content-type": "text/event-stream"}) + b"".join(GOOD_EVENTS[:2])
        ),
        "slow": _slow_events,
    }
    for name, events in MALFORMED_EVENTS.items():
        plays[name] = _played(events)
    return plays


def _played(events: list[bytes]) -> Play:
    return lambda writer: _events(writer, events)


WHOLE = _whole_plays()
STREAMS = _stream_plays()


class HostileUpstream(LoopServer):
    """The server, in a thread with its own event loop, on 127.0.0.1 and a free port."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.hangups = 0
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def count(self, scenario: str) -> int:
        """How many requests asked for `scenario`."""
        with self._lock:
            return sum(1 for call in self.calls if call.scenario == scenario)

    async def _serve(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        try:
            call = await _read_call(reader)
            with self._lock:
                self.calls.append(call)
            plays = STREAMS if call.stream else WHOLE
            await plays[call.scenario](writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            # The gateway hung up before the play ended: counted, since for a client that
            # left, or a reply refused half-way, that is what the gateway must do.
            with self._lock:
                self.hangups += 1
        if not writer.transport.is_closing():
            writer.close()


async def _read_call(reader: asyncio.StreamReader) -> Call:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    headers = {}
    for line in head.split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
    content = body["messages"][-1]["content"]
    if isinstance(content, list):  # Anthropic's blocks, as litellm sends them
        content = "".join(block.get("text", "") for block in content)
    scenario = str(content)
    return Call(scenario, bool(body.get("stream")), headers)


@contextlib.contextmanager
def hostile_upstream() -> Iterator[HostileUpstream]:
    """A started hostile upstream for the duration of the block."""
    server = HostileUpstream().start()
    try:
        yield server
    finally:
        server.stop()
