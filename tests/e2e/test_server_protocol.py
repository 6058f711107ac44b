"""`server_config`'s HTTP protocols on a real port: httptools (the default) and the h11
fallback keep the same limits: a request head over 64 KiB and malformed HTTP get an
OpenAI-shaped 400, slow headers a 408, and pipelined requests are all answered, even when
one takes longer than the header deadline."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.server import (
    HTTP_PARSER,
    LOOP,
    MAX_HEAD_BYTES,
    ConnectionLimits,
    FareboxHttpToolsProtocol,
    protocol_class,
    server_config,
)
from gateway.settings import Settings
from tests.servers import ServerThread

HEADER_TIMEOUT_S = 0.5


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with its path; /slow after twice the header deadline."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(HEADER_TIMEOUT_S * 2)
    body = scope["path"].encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    settings = Settings(
        data_dir=Path(tmp_path_factory.mktemp("protocol")), header_timeout_s=HEADER_TIMEOUT_S
    )
    limits = ConnectionLimits(settings.header_timeout_s, settings.max_connections)
    started = ServerThread(app, settings, http=protocol_class(limits, request.param)).start()
    yield started.port
    started.stop()


def _exchange(port: int, data: bytes, until: bytes | None = None) -> bytes:
    """Send `data`; read until the server closes, or until the reply ends with `until`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while until is None or not received.endswith(until):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received


def _error(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)["error"]


def test_the_default_is_httptools_on_uvloop() -> None:
    config = server_config(app, Settings())
    assert (HTTP_PARSER, LOOP) == ("httptools", "uvloop")  # both are dependencies
    assert issubclass(config.http, FareboxHttpToolsProtocol)  # type: ignore[arg-type]


def test_a_request_head_over_the_limit_is_refused(server: int) -> None:
    padding = b"x-pad: " + b"a" * 1000 + b"\r\n"
    head = b"GET / HTTP/1.1\r\nhost: x\r\n" + padding * (MAX_HEAD_BYTES // len(padding) + 2)
    status, error = _error(_exchange(server, head))
    assert status == 400 and error["code"] == "malformed_http"


def test_a_head_under_the_limit_is_served(server: int) -> None:
    padding = b"x-pad: " + b"a" * 1000 + b"\r\n"
    head = b"GET /a HTTP/1.1\r\nhost: x\r\n" + padding * 40 + b"\r\n"
    assert _exchange(server, head, until=b"/a").startswith(b"HTTP/1.1 200")


def test_malformed_http_gets_an_openai_error(server: int) -> None:
    status, error = _error(_exchange(server, b"NOT HTTP AT ALL\r\n\r\n"))
    assert status == 400 and error["type"] == "invalid_request_error"


def test_slow_headers_get_408(server: int) -> None:
    status, error = _error(_exchange(server, b"GET / HTTP/1.1\r\nhost: x\r\n"))
    assert status == 408 and error["code"] == "request_timeout"


def test_pipelined_requests_are_all_answered_past_the_header_deadline(server: int) -> None:
    pipelined = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /slow HTTP/1.1\r\nhost: x\r\n\r\n"
    reply = _exchange(server, pipelined + b"GET /b HTTP/1.1\r\nhost: x\r\n\r\n", until=b"/b")
    assert reply.count(b"HTTP/1.1 200") == 3
    assert reply.endswith(b"/b")


def test_a_websocket_upgrade_is_answered_as_the_http_request_it_is(server: int) -> None:
    # No route is a WebSocket (`ws="none"`: uvicorn imports no websockets package).
    head = (
        b"GET /a HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n"
        b"sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    reply = _exchange(server, head, until=b"/a")
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"/a")
    assert _exchange(server, b"GET /b HTTP/1.1\r\nhost: x\r\n\r\n", until=b"/b").endswith(b"/b")


@pytest.mark.parametrize("value", [b"a\x7fb", b"a\xc2\x85b", b"a\x01b", b"a\tb"])
def test_header_values_h11_accepts_reach_the_app(server: int, value: bytes) -> None:
    # Which header may hold what is the app's to say (it names the header).
    head = b"GET /a HTTP/1.1\r\nhost: x\r\nx-task-id: " + value + b"\r\n\r\n"
    assert _exchange(server, head, until=b"/a").startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("value", [b"a\x00b", b"a\x0bb", b"a\x0cb", b"a\rb"])
def test_header_values_h11_refuses_are_malformed(server: int, value: bytes) -> None:
    status, error = _error(_exchange(server, b"GET / HTTP/1.1\r\nx-any: " + value + b"\r\n\r\n"))
    assert status == 400 and error["code"] == "malformed_http"


KEEP_ALIVE_S = 0.3


@pytest.fixture(scope="module", params=["httptools", "h11"])
def keep_alive_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    """A server whose idle connections close after KEEP_ALIVE_S, long before the header
    deadline (the httptools protocol keeps that timeout in the header timer)."""
    settings = Settings(data_dir=Path(tmp_path_factory.mktemp("keep-alive")), header_timeout_s=30)
    limits = ConnectionLimits(settings.header_timeout_s, settings.max_connections)
    http = protocol_class(limits, request.param)
    started = ServerThread(app, settings, http=http, timeout_keep_alive=KEEP_ALIVE_S).start()
    yield started.port
    started.stop()


def _answer(sock: socket.socket, path: bytes) -> bytes:
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    received = b""
    while not received.endswith(path):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed before the answer"
        received += chunk
    return received


def test_an_idle_connection_closes_after_the_keep_alive_timeout(keep_alive_server: int) -> None:
    with socket.create_connection(("127.0.0.1", keep_alive_server), timeout=10) as sock:
        assert _answer(sock, b"/a").startswith(b"HTTP/1.1 200")
        assert sock.recv(65536) == b""  # closed without a word, long before a 408 (30 s)


def test_a_connection_in_use_outlives_the_keep_alive_timeout(keep_alive_server: int) -> None:
    with socket.create_connection(("127.0.0.1", keep_alive_server), timeout=10) as sock:
        for step in range(8):  # 8 gaps of a third of the timeout: longer than it in all
            assert _answer(sock, b"/step%d" % step).startswith(b"HTTP/1.1 200")
            time.sleep(KEEP_ALIVE_S / 3)
        # A request that takes longer than the timeout is answered, then the wait restarts.
        assert _answer(sock, b"/slow").startswith(b"HTTP/1.1 200")
        assert _answer(sock, b"/b").startswith(b"HTTP/1.1 200")
        assert sock.recv(65536) == b""
