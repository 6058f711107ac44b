"""h1's `while_waiting`: CPU work run once the request is on the wire, before the reply.

The upstream here is a server in a thread of its own (a socket the loop does not serve),
so the hook can wait for it to have the whole request: were the bytes still buffered in
the transport, it never would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.upstream import h1
from gateway.upstream import http_stream as hs

BODY = b'{"model":"m","messages":[]}'
REPLY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class ThreadServer:
    """Answers each request on one connection once `release` is set; `received` is set as
    soon as a whole request (head and body) has arrived."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.received = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/chat/completions"

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            data = b""
            while not data.endswith(BODY):
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            self.received.set()
            self.release.wait(10)
            conn.sendall(REPLY)
            conn.recv(1)  # until the client closes


@contextmanager
def thread_server() -> Iterator[ThreadServer]:
    server = ThreadServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.listener.close()
        server.thread.join(5)


def _request(url: str) -> hs.HttpRequest:
    return hs.HttpRequest(url, BODY, {"content-type": "application/json"}, hs.client_timeout(2, 5))


async def test_the_hook_runs_once_the_upstream_has_the_request_and_before_its_reply() -> None:
    pool = h1.Pool(4, 4.0)
    seen: list[str] = []

    with thread_server() as server:

        def while_waiting() -> None:
            # Blocks the loop: only a request already written can reach the server meanwhile.
            seen.append("received" if server.received.wait(5) else "not received")
            seen.append("reply early" if server.release.is_set() else "no reply yet")
            server.release.set()

        request = _request(server.url)
        reply = await pool.request(
            request.url, request.body, request.headers, request.timeout, while_waiting
        )
        assert await reply.readany() == b"{}"
        reply.release()
    await pool.aclose()
    assert seen == ["received", "no reply yet"]


async def test_without_a_hook_the_request_is_as_before() -> None:
    pool = h1.Pool(4, 4.0)
    with thread_server() as server:
        server.release.set()
        request = _request(server.url)
        reply = await pool.request(request.url, request.body, request.headers, request.timeout)
        assert reply.status == 200 and await reply.readany() == b"{}"
        reply.release()
    await pool.aclose()
