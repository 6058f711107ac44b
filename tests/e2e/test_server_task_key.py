"""The httptools protocol puts each request's task in its scope (`gateway.drain.TASK_KEY`).

The chat path's in-flight tracking reads it there instead of `asyncio.current_task()`
(a getpid syscall per call: CPython's fork check); it must be the task serving the
request, pipelined requests included.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from gateway.drain import TASK_KEY
from gateway.server import ConnectionLimits, protocol_class
from gateway.settings import Settings
from tests.servers import ServerThread


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b"same" if scope.get(TASK_KEY) is asyncio.current_task() else b"other"
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_each_request_scope_holds_the_task_that_serves_it(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    limits = ConnectionLimits(settings.header_timeout_s, settings.max_connections)
    server = ServerThread(app, settings, http=protocol_class(limits, "httptools")).start()
    try:
        request = b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n"
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request * 3)  # pipelined: the later two start from the queue
            received = b""
            while received.count(b"HTTP/1.1 200") < 3 or not received.endswith((b"same", b"other")):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
    finally:
        server.stop()
    assert received.count(b"\r\n\r\nsame") == 3, received
