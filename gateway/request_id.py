"""Every response carries `x-request-id`, errors and `/v1/models` included.

The openai SDK reads the header into `error.request_id` and `completion._request_id`;
the ledger books the same id. `RequestIdMiddleware` (a plain ASGI middleware, outermost)
gives each HTTP request its id before anything else runs and adds the header to any
response start that lacks it; routes read the id with `request_id_of(scope)`. Answers
made outside the app (uvicorn's protocol, the connection cap) take a fresh one.

An id begins with the time it was made, so ids sort (to the millisecond) in the order
they were made, as UUIDv7s do: the ledger keys three B-trees on it (the requests'
`request_id` index, and through an untasked request's `task-<id>` the tasks' key and the
requests' `task_id` index). Random ids landed each row on a random page of each, which
SQLite read and then wrote whole at commit; ids in time order append.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import MutableMapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
SCOPE_KEY = "farebox.request_id"


_POOL_BYTES = 4096  # 256 ids per read of the OS's random source
_pool: deque[str] = deque()


def _refill() -> None:
    hexed = os.urandom(_POOL_BYTES).hex()
    _pool.extend([hexed[at : at + 32] for at in range(0, len(hexed), 32)])


# A forked worker must not hand out its parent's ids: it draws its own.
os.register_at_fork(after_in_child=_pool.clear)


def random_hex() -> str:
    """128 random bits from the OS's source, as 32 hex digits; each value given out once.

    Drawn 4 KiB at a time (one `getrandom` per 256 values, not one each: a syscall was
    1.2% of the gateway's CPU at c=64); `deque.popleft` hands each out once, threads
    included, and a forked child starts with an empty pool.
    """
    try:
        return _pool.popleft()
    except IndexError:
        _refill()
        return _pool.popleft()


def new_request_id() -> str:
    """A new request id, in the gateway's `req-<32 hex>` form: the Unix time in
    milliseconds (12 hex digits), then 80 random bits from the OS's source (20).

    Ids of later milliseconds sort after earlier ones (see the module's docstring); within
    one millisecond, and across processes, the random bits keep them apart.
    """
    try:
        bits = _pool.popleft()
    except IndexError:
        bits = random_hex()
    return f"req-{time.time_ns() // 1_000_000:012x}{bits[:20]}"


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
