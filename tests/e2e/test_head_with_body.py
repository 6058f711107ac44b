"""The server writes a response head with its body (gateway.server.HeadWithBody), over real sockets.

A whole reply's head waits for its body, so both leave in one write; a stream's head must
not wait for its first event, and nothing may be lost, reordered or cut. A head written
just before a close (the 400 and 408 answers) is covered by tests/e2e/test_server_protocol.py
and tests/e2e/test_slow_clients.py.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

from gateway.settings import Settings
from tests.servers import running

REQUEST = b"GET /x HTTP/1.1\r\nhost: test\r\n\r\n"


def _read_until(sock: socket.socket, end: bytes, have: bytes = b"") -> bytes:
    while end not in have:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before {end!r}; got {have[-200:]!r}"
        have += chunk
    return have


def test_a_stream_head_reaches_the_client_before_its_first_event() -> None:
    head_seen = threading.Event()  # set by the client once it has read the head

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        while not head_seen.is_set():  # the event waits on a head the client has read
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    with (
        running(app, Settings()) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        sock.sendall(REQUEST)
        got = _read_until(sock, b"\r\n\r\n")  # times out if the head waited for the event
        assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"data: 1" not in got
        head_seen.set()
        got = _read_until(sock, b"0\r\n\r\n", got)
        assert b"data: 1\n\n" in got


def test_whole_replies_small_and_large_arrive_intact_and_in_order() -> None:
    sizes = {b"/small": 20, b"/large": 300_000}  # the large one is not joined to its head

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = scope["raw_path"][1:] * sizes[scope["raw_path"]]
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    with (
        running(app, Settings()) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        paths = [b"/small", b"/large", b"/small", b"/large", b"/small"]
        # Pipelined: each answer must follow the one before it, head then body.
        sock.sendall(b"".join(REQUEST.replace(b"/x", path) for path in paths))
        got = b""
        for path in paths:
            got = _read_until(sock, b"\r\n\r\n", got)
            head, _, got = got.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(got) < length:
                chunk = sock.recv(65536)
                assert chunk
                got += chunk
            assert got[:length] == path[1:] * sizes[path]
            got = got[length:]
        assert got == b""
