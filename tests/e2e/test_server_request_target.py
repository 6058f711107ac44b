"""The request target as the app reads it, on a real port, both parsers.

The httptools protocol reads a plain origin-form path (no `?`, no `#`) without
`httptools.parse_url`; a target with a query or a fragment still goes through it. Either
way the app gets the path (unquoted), the raw path and the query string it always got.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.server import ConnectionLimits, protocol_class
from gateway.settings import Settings
from tests.servers import ServerThread


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with the target as its scope holds it."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    target = {
        "path": scope["path"],
        "raw_path": scope["raw_path"].decode("latin-1"),
        "query": scope["query_string"].decode("latin-1"),
    }
    body = json.dumps(target).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    settings = Settings(data_dir=Path(tmp_path_factory.mktemp("target")))
    limits = ConnectionLimits(settings.header_timeout_s, settings.max_connections)
    started = ServerThread(app, settings, http=protocol_class(limits, request.param)).start()
    yield started.port
    started.stop()


def _target(port: int, target: bytes) -> dict[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    found: dict[str, str] = json.loads(body)
    return found


@pytest.mark.parametrize(
    ("target", "path", "raw_path", "query"),
    [
        (b"/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions", ""),
        (b"/a?b=1&c=2", "/a", "/a", "b=1&c=2"),
        (b"/a%20b?x=%3F", "/a b", "/a%20b", "x=%3F"),
        (b"/a?", "/a", "/a", ""),
        (b"/q%3Fnot-a-query", "/q?not-a-query", "/q%3Fnot-a-query", ""),
    ],
)
def test_the_app_reads_the_target_it_always_read(
    server: int, target: bytes, path: str, raw_path: str, query: str
) -> None:
    assert _target(server, target) == {"path": path, "raw_path": raw_path, "query": query}
