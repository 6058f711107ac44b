"""gateway.http_cycle.Cycle writes what uvicorn's RequestResponseCycle writes, and fails alike."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http_cycle import Cycle
from tests.unit.recording_transport import RecordingTransport


def _make(kind: type, method: str, keep_alive: bool) -> tuple[Any, RecordingTransport, list[int]]:
    transport = RecordingTransport()
    completed: list[int] = []
    scope = {
        "method": method,
        "http_version": "1.1",
        "client": None,
        "path": "/",
        "query_string": b"",
    }
    logger = logging.getLogger("test")
    args: dict[str, Any] = {
        "scope": scope,
        "transport": transport,
        "flow": FlowControl(transport),
        "logger": logger,
        "access_logger": logger,
        "access_log": False,
        "default_headers": [(b"server", b"uvicorn")],
        "expect_100_continue": False,
        "keep_alive": keep_alive,
        "on_response": lambda: completed.append(1),
    }
    if kind is Cycle:
        return Cycle(*args.values()), transport, completed
    return kind(message_event=asyncio.Event(), **args), transport, completed


async def _run(kind: type, messages: list[dict[str, Any]], method: str, keep_alive: bool) -> Any:
    cycle, transport, completed = _make(kind, method, keep_alive)
    try:
        for message in messages:
            await cycle.send(message)
    except RuntimeError as exc:
        return ("error", str(exc), transport.data)
    except ValueError as exc:
        return ("value-error", type(exc).__name__, transport.data)
    return (
        transport.data,
        transport.closed,
        cycle.keep_alive,
        len(completed),
        cycle.response_complete,
    )


def _start(headers: list[tuple[bytes, bytes]], status: int = 200) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": headers}


def _body(body: bytes = b"", more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": body, "more_body": more}


CASES = {
    "whole": [
        _start([(b"content-length", b"2"), (b"content-type", b"application/json")]),
        _body(b"{}"),
    ],
    "upper-case names": [
        _start([(b"Content-Length", b"2"), (b"X-Request-ID", b"a")]),
        _body(b"{}"),
    ],
    "stream": [
        _start([(b"content-type", b"text/event-stream")]),
        _body(b"data: 1\n\n", True),
        _body(b"", True),
        _body(b"data: 2\n\n", True),
        _body(b"data: [DONE]\n\n"),
    ],
    "stream ends empty": [_start([]), _body(b"a", True), _body()],
    "chunked declared": [_start([(b"transfer-encoding", b"Chunked")]), _body(b"abc")],
    "other transfer-encoding": [
        _start([(b"transfer-encoding", b"gzip"), (b"content-length", b"1")]),
        _body(b"x"),
    ],
    "connection close": [
        _start([(b"connection", b"keep-alive, Close"), (b"content-length", b"0")]),
        _body(),
    ],
    "204": [_start([], 204), _body()],
    "two content-lengths": [
        _start([(b"content-length", b"1"), (b"content-length", b"5")]),
        _body(b"x"),
    ],
    "too long": [_start([(b"content-length", b"1")]), _body(b"xy")],
    "too short": [_start([(b"content-length", b"3")]), _body(b"xy")],
    "bad name": [_start([(b"x bad", b"1")]), _body()],
    "bad value": [_start([(b"x-ok", b"1"), (b"x-bad", b"a\nb")]), _body()],
    "tab in value": [_start([(b"x-tab", b"a\tb"), (b"content-length", b"0")]), _body()],
    "body first": [_body(b"x")],
    "start twice": [_start([]), _start([])],
    "after complete": [_start([(b"content-length", b"0")]), _body(), _body()],
    "bad content-length": [_start([(b"content-length", b"x")]), _body()],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("method", ["POST", "HEAD"])
@pytest.mark.parametrize("keep_alive", [True, False])
def test_the_cycle_writes_what_uvicorns_writes(name: str, method: str, keep_alive: bool) -> None:
    ours = asyncio.run(_run(Cycle, CASES[name], method, keep_alive))
    theirs = asyncio.run(_run(RequestResponseCycle, CASES[name], method, keep_alive))
    assert ours == theirs


def test_receive_hands_a_one_piece_body_on_and_joins_pieces() -> None:
    async def run() -> list[Any]:
        cycle, _, _ = _make(Cycle, "POST", True)
        cycle.add_body(b"ab")
        cycle.more_body = False
        cycle.message_event.set()
        first = await cycle.receive()
        cycle, _, _ = _make(Cycle, "POST", True)
        for piece in (b"a", b"b", b"c"):
            cycle.add_body(piece)
        cycle.message_event.set()
        second = await cycle.receive()
        return [first, second, type(second["body"])]

    first, second, kind = asyncio.run(run())
    assert first == {"type": "http.request", "body": b"ab", "more_body": False}
    assert second == {"type": "http.request", "body": b"abc", "more_body": True}
    assert kind is bytes


@pytest.mark.parametrize(
    "url", [b"/v1/chat/completions", b"/", b"//x", b"/a%20b", b"/a;b", b"/a:b@c", b"/~u/./x/../y"]
)
def test_a_plain_origin_form_path_is_what_parse_url_reads(url: bytes) -> None:
    parsed = httptools.parse_url(url)
    assert (parsed.path, parsed.query or b"") == (url, b"")


def test_names_checked_once_are_written_and_refused_as_uvicorn_does_every_time() -> None:
    """The names' checks are kept by their join: repeats (and other lists of the same join)
    still write what uvicorn writes, and a refused list is refused each time."""
    lists = [
        [(b"x-request-id", b"a"), (b"content-length", b"0")],
        [(b"X-Request-ID", b"b"), (b"content-length", b"0")],
        [(b"x bad", b"1"), (b"content-length", b"0")],
        [(b"x-re", b"c"), (b"quest-idcontent-length", b"d"), (b"content-length", b"0")],
    ]
    for _ in range(3):
        for headers in lists:
            messages = [_start(headers), _body()]
            ours = asyncio.run(_run(Cycle, messages, "POST", True))
            assert ours == asyncio.run(_run(RequestResponseCycle, messages, "POST", True))
