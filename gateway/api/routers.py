"""The app's routers, in order; with `defer`, those no chat request needs come on first use.

A fresh `farebox serve` imported every router's module before its port opened, and
FastAPI built each route's dependency and validation state as it was declared, then
again for the app when the warm-up routed past it (`include_router` wraps a router and
builds its routes' state anew for each app). The app now takes the routes themselves, so
the second build is gone: the deferred routers' inclusion and first routing took 77-104
ms of CPU, 56-70 now (their imports), and in an app built again in the same process (a
reload, the tests' servers) 23-43 ms, 0.4-0.6 now (`bench/first_routed.py`).

The reports, the explorer, the task, prefix and admin routes (`DEFERRED`) took 230-250 M
of the serve imports' ~4,750 M instructions (callgrind) and 90-150 ms of CPU on this box,
and a first chat request needs none of them. With `defer` they are imported and included
just before the first request FastAPI routes (`IncludeDeferred`), which pays that once;
the chat front, /v1/models, the probes and /metrics are included at once. Either way the
app's routes end up in `ORDER`, so /openapi.json and the router's matching are the same.

The other model routes (messages, responses, completions, embeddings) are deferred too:
their modules and the pipelines and upstream wires behind them are 28 modules, 20-27 ms
of CPU before the port opened (88 M of ~4,035 M instructions by
bench/startup_instructions.py), and a chat request reads none of them. Any request FastAPI
routes already included the deferred routers first, a /v1/messages or /v1/responses
request among them, so their first request pays it with the rest (~25 ms more), as
/v1/spend's does, and a readiness probe pays all of it before traffic.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

# Every router's module, in the order the app includes them (FastAPI matches in this
# order, and /openapi.json lists the paths in it).
ORDER = (
    "gateway.api.chat",
    "gateway.api.messages",
    "gateway.api.responses",
    "gateway.api.stored_responses",
    "gateway.api.completions",
    "gateway.api.embeddings",
    "gateway.api.models",
    "gateway.api.health",
    "gateway.api.tasks",
    "gateway.api.spend",
    "gateway.api.gpu",
    "gateway.api.explorer",
    "gateway.ui.routes",
    "gateway.api.prefix",
    "gateway.api.admin",
    "gateway.api.admin_keys",
    "gateway.api.metrics",
)
# Not needed before the first request to one of their own routes.
DEFERRED = frozenset(
    {
        "gateway.api.messages",
        "gateway.api.responses",
        "gateway.api.completions",
        "gateway.api.embeddings",
        "gateway.api.stored_responses",
        "gateway.api.tasks",
        "gateway.api.spend",
        "gateway.api.gpu",
        "gateway.api.explorer",
        "gateway.ui.routes",
        "gateway.api.prefix",
        "gateway.api.admin",
        "gateway.api.admin_keys",
    }
)


class Routers:
    """Include the app's routers in `ORDER`; with `defer`, `DEFERRED` ones when asked."""

    def __init__(self, app: FastAPI, defer: bool = False) -> None:
        self.app = app
        self.pending = tuple(name for name in ORDER if defer and name in DEFERRED)
        self._entries: dict[str, list[BaseRoute]] = {}  # what each router added to app.routes
        self._include(name for name in ORDER if name not in self.pending)

    def include_deferred(self) -> None:
        """Import and include the deferred routers, each at its place in `ORDER`."""
        if not self.pending:
            return
        # Not twice: an import that failed half way (that request's 500) is retried alone.
        self._include(name for name in self.pending if name not in self._entries)
        ours = {id(entry) for entries in self._entries.values() for entry in entries}
        routes = self.app.router.routes
        # FastAPI's own (/openapi.json, /docs) first, as when every router is included at once.
        routes[:] = [route for route in routes if id(route) not in ours] + [
            entry for name in ORDER for entry in self._entries.get(name, ())
        ]
        self.pending = ()

    def _include(self, names: Iterable[str]) -> None:
        routes = self.app.router.routes
        for name in names:
            router: APIRouter = importlib.import_module(name).router
            # Its routes themselves, not `include_router`: FastAPI (0.16x) wraps an included
            # router and builds each route's dependency and validation state again for the
            # app, though the route built it when declared. No router here has a prefix,
            # tags or dependencies of the app's to add.
            added = list(router.routes)
            routes.extend(added)
            self._entries[name] = added


def include_routers(app: FastAPI, defer: bool = False) -> Routers:
    """Include the app's routers; with `defer`, the deferred ones before the first request
    FastAPI routes (innermost middleware) or the first OpenAPI schema asked for."""
    routers = Routers(app, defer)
    if routers.pending:
        app.add_middleware(IncludeDeferred, routers=routers)
        schema = app.openapi

        def openapi() -> dict[str, Any]:  # FastAPI's way to extend it: never cached half
            routers.include_deferred()
            return schema()

        app.openapi = openapi  # type: ignore[method-assign]
    return routers


class IncludeDeferred:
    """ASGI middleware: the deferred routers are included before the first request routed."""

    def __init__(self, app: ASGIApp, routers: Routers) -> None:
        self.app = app
        self.routers = routers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.routers.pending and scope["type"] != "lifespan":
            self.routers.include_deferred()  # no await inside: no request sees half of it
        await self.app(scope, receive, send)
