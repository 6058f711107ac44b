"""Do at start-up the one-time work a route's first call would otherwise do on the loop.

Profiled on a fresh gateway (cProfile on the loop's thread, `bench/loop_stall.py`'s
first chat and lint requests), a first call held the loop 32-37 ms (chat) and ~20 ms
(lint) whatever its body, for three lazy steps:

- anyio imports its asyncio backend when the first cancel scope is entered (the in-flight
  middleware's, on every request): 13 modules, compiled from source where no bytecode
  cache is written.
- FastAPI (0.16x) builds an included router's route state (dependencies, validation) on
  the first match that walks past it. The app now adds each router's routes themselves
  (gateway.api.routers), built when declared, so the walk below finds nothing to build;
  it stays, so that a route included another way could not make a first request pay.
- The ledger writer's statements are compiled by SQLAlchemy on their first execution.

`warm_up` does each once in the lifespan, before the server accepts connections. It
sends nothing upstream and leaves no row: the ledger's statements run on a sample row in
a transaction that is rolled back.

An app whose routers are deferred (`farebox serve`: gateway.api.routers) skips anyio's
backend: no chat request, whole or streamed, enters an anyio scope (the chat front cuts
natively, gateway.drain), and the first request FastAPI routes, which does, pays the
deferred routers' import already. That import cost 16-19 ms of CPU before the port opened.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
from starlette.types import ASGIApp, Message

log = logging.getLogger("farebox")

# A path no route serves: routing it walks, and so builds, every route's state.
UNROUTED_PATH = "/__farebox_warm_up__"


async def warm_up(app: Any, anyio_backend: bool = True) -> None:
    """Load the asyncio backend of anyio (unless not `anyio_backend`) and build every
    included route's state; log the CPU it took."""
    started = time.thread_time()
    if anyio_backend:
        with anyio.CancelScope():  # imports anyio's asyncio backend, as a request would
            pass
    imported = time.thread_time()
    await route_unrouted(app.router)
    routed = time.thread_time()
    log.info(
        "warmed up before the port opens: %.0f ms of CPU (anyio backend %.0f, routes %.0f)",
        (routed - started) * 1000,
        (imported - started) * 1000,
        (routed - imported) * 1000,
    )


async def route_unrouted(router: ASGIApp) -> int:
    """Route a GET for an unserved path through `router` (no middleware); return its status."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": UNROUTED_PATH,
        "raw_path": UNROUTED_PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": None,
        "server": None,
        "state": {},
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await router(scope, receive, send)
    return next((m["status"] for m in sent if m["type"] == "http.response.start"), 0)
