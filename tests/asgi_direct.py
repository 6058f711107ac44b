"""An ASGI request called straight on the app, without a server: the scope of a POST and a
client that sends its whole body at once and then stays until the reply is over."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

JSON_HEADERS = [(b"content-type", b"application/json"), (b"host", b"127.0.0.1")]


def receive_once(body: bytes) -> Callable[[], Awaitable[dict[str, Any]]]:
    """`receive` of a client that sends `body` in one message, then never disconnects."""
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            await asyncio.Event().wait()  # the client stays until the reply is over
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def body_collector(
    messages: list[bytes],
) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """`send` that checks the reply is a 200 and keeps each non-empty body message."""

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200
        elif message.get("body"):
            messages.append(message["body"])

    return send


def post_scope(
    state: dict[str, Any] | None,
    path: str = "/v1/chat/completions",
    headers: list[tuple[bytes, bytes]] = JSON_HEADERS,
) -> dict[str, Any]:
    """The scope of a POST to `path` as uvicorn builds it, with the lifespan's `state`."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": list(headers),
        "server": ("127.0.0.1", 4000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "root_path": "",
        "state": dict(state or {}),
    }
