"""Every response carries `x-request-id`, errors and `/v1/models` included.

The openai SDK reads the header into `error.request_id` and `completion._request_id`;
the ledger books the same id. `RequestIdMiddleware` (a plain ASGI middleware, outermost)
gives each HTTP request its id before anything else runs and adds the header to any
response start that lacks it; routes read the id with `request_id_of(scope)`. Answers
made outside the app (uvicorn's protocol, the connection cap) take a fresh one.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
SCOPE_KEY = "farebox.request_id"


def new_request_id() -> str:
    """A new request id, in the gateway's `req-<32 hex>` form (128 random bits).

    The bytes uuid4 would take, without building a UUID object on every request.
    """
    return "req-" + os.urandom(16).hex()


def request_id_of(scope: MutableMapping[str, Any]) -> str:
    """The id of the request `scope` belongs to, given one here if it had none."""
    value = scope.get(SCOPE_KEY)
    if not isinstance(value, str):
        value = new_request_id()
        scope[SCOPE_KEY] = value
    return value


def request_id_header(scope: MutableMapping[str, Any]) -> tuple[bytes, bytes]:
    """The `x-request-id` header of the request `scope` belongs to."""
    return HEADER, request_id_of(scope).encode("ascii")


class RequestIdMiddleware:
    """Give each HTTP request an id and make sure its response says it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = request_id_header(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == HEADER for name, _ in headers):
                    message = {**message, "headers": [*headers, header]}
            await send(message)

        await self.app(scope, receive, send_with_id)
