"""Graceful shutdown: in-flight requests get a grace period, then are cut without losing a row.

On SIGTERM uvicorn stops accepting and waits for open requests. Past its
`timeout_graceful_shutdown` it cancels their tasks natively, and a native cancel breaks
into the clean-up a cut stream runs under an anyio shield (closing the upstream, booking
its ledger row): the row would be lost. So `farebox serve` cuts them itself at
FAREBOX_SHUTDOWN_GRACE_S through anyio cancel scopes, which those shields hold against;
uvicorn's own timeout, `BACKSTOP_S` later, is only a backstop. Then the lifespan closes
the ledger writer, which commits every row.

The model routes' fronts (`gateway.front.Front`) enter no anyio scope per request: entering one
in a fresh task costs ~4-8 µs (anyio's state for the task, in a weak-key map), and a
whole reply enters no other. It tracks the request's task (`TrackedRequest`), and the cut
cancels that task natively, as anyio's scope would: at every turn of the loop until the
request ends, never while the task is inside a `Shield` (the pipelines' shielded
clean-up, which counts itself on the request: a whole reply's booking, and a streamed
reply's, `gateway.pipeline.booked_stream`, whose shields are `Shield`s too). A clean-up
under anyio's own shield would be cut there: a booking lost (every pipeline uses `Shield`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import socket
from collections.abc import Iterator
from types import TracebackType
from typing import Any, cast

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.accept_turns import Loads, TakeTurns
from gateway.anthropic_errors import send_path_error
from gateway.errors import ShuttingDownError

log = logging.getLogger("farebox")
BACKSTOP_S = 5.0


class InFlight:
    """The HTTP requests in progress: cancel scopes, and the fronts' tracked tasks."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self.requests: set[TrackedRequest] = set()

    def __len__(self) -> int:
        return len(self._scopes) + len(self.requests)

    @contextlib.contextmanager
    def track(self) -> Iterator[anyio.CancelScope]:
        """Run the block as one request in progress, cancellable by `cut_all`."""
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    def cut_all(self) -> None:
        """Cancel every request in progress (their shielded clean-up still runs)."""
        if len(self):
            log.warning("shutdown grace period over: cutting %d request(s)", len(self))
        for scope in list(self._scopes):
            scope.cancel()
        for request in list(self.requests):
            request.cut()


TASK_KEY = "farebox.task"
"""The scope key of the task serving a request, where the server puts it (gateway.server)."""

_REQUEST: contextvars.ContextVar[TrackedRequest | None] = contextvars.ContextVar(
    "farebox_tracked_request", default=None
)
"""The model request its task serves (set by `TrackedRequest`, in the task's context)."""


class TrackedRequest:
    """One model request in progress (a front's), cut without an anyio scope of its own.

    Made in the request's task, and `leave` called there when it ends; `cut` cancels that
    task natively at once and again at each turn of the loop until it leaves (as an anyio
    scope delivers its cancellation), except while it is inside a `Shield`. `leave`
    takes back the cancellations the cut made (as the scope's exit would) and tells
    whether the task has one to raise that is not the cut's (the server's own).
    """

    __slots__ = (
        "_in_flight",
        "_token",
        "base",
        "called",
        "cancels",
        "shields",
        "task",
    )

    def __init__(self, in_flight: InFlight, task: asyncio.Task[Any] | None = None) -> None:
        """Track the request the current task serves; `task` is that task, when known
        (`TASK_KEY`: `asyncio.current_task()` costs a getpid syscall, CPython's fork check)."""
        self._in_flight = in_flight
        self.task = task or cast("asyncio.Task[Any]", asyncio.current_task())
        self.called = False  # `cut` was called: the request is being cut
        self.base = 0  # the task's `cancelling()` when the cut began
        self.cancels = 0  # native cancellations made by the cut, to take back
        self.shields = 0  # `Shield`s the task is inside
        self._token: contextvars.Token[TrackedRequest | None] | None = _REQUEST.set(self)
        in_flight.requests.add(self)

    def leave(self) -> bool:
        """Stop tracking the request, in its task; after a cut, take back the cut's
        cancellations and return True when the task has another one pending."""
        self._in_flight.requests.discard(self)
        if self._token is not None:
            _REQUEST.reset(self._token)
            self._token = None
        if not self.called:
            return False
        for _ in range(self.cancels):
            self.task.uncancel()
        self.cancels = 0
        return self.task.cancelling() > self.base

    def cut(self) -> None:
        """Cancel the request (its shielded clean-up still runs)."""
        if not self.called:
            self.called = True
            self.base = self.task.cancelling()
            self._deliver()

    def _deliver(self) -> None:
        if self not in self._in_flight.requests or self.task.done():
            return  # over: nothing more to cut
        if not self.shields:
            self.task.cancel()
            self.cancels += 1
        self.task.get_loop().call_soon(self._deliver)


_SCOPE: list[type[anyio.CancelScope]] = []


def cancel_scope(shield: bool = False) -> anyio.CancelScope:
    """`anyio.CancelScope(shield=shield)`, from the running backend's class, found once.

    `anyio.CancelScope()` asks sniffio which library runs the loop on every call (about as
    much again as the scope itself); the loop never changes while the app is served.
    """
    if _SCOPE:
        return _SCOPE[0](shield=shield)
    made = anyio.CancelScope(shield=shield)
    _SCOPE.append(type(made))
    return made


class Shield:
    """`anyio.CancelScope(shield=True)` that the fronts' native cut respects as well.

    Clean-up that must finish when a request is cut (booking a paid call) runs inside one.
    In a front's request task (a `TrackedRequest` in its context) it is that request's count
    alone: the front enters no anyio scope (its cut is native, which holds off while
    the count is up), so there is none to shield from, and making one cost 5-10 µs (a
    scope, its task's state in anyio's weak-key map, `current_task`'s getpid) at every
    booking that waits (a streamed reply's, with Redis or PostgreSQL behind it), and the
    import of anyio's asyncio backend at the first (gateway.warmup skips it when serving).
    Anywhere else (a route under `InFlightMiddleware`'s scope) it is anyio's shield.
    """

    __slots__ = ("_request", "_scope")

    def __enter__(self) -> anyio.CancelScope | None:
        request = self._request = _REQUEST.get()
        if request is not None:
            request.shields += 1
            self._scope = None
            return None
        scope = self._scope = cancel_scope(shield=True)
        return scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        request, scope = self._request, self._scope
        if request is not None:
            request.shields -= 1
        return scope.__exit__(exc_type, exc, traceback) if scope is not None else False


class InFlightMiddleware:
    """Run each HTTP request in a cancel scope that `InFlight.cut_all` can cancel."""

    def __init__(self, app: ASGIApp, in_flight: InFlight) -> None:
        self.app = app
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        cut = anyio.CancelScope()  # `InFlight.track` inline: no generator per request
        scopes = self.in_flight._scopes
        with cut:
            scopes.add(cut)
            try:
                await self.app(scope, receive, watched)
            finally:
                scopes.discard(cut)
        if cut.cancel_called and not started:
            # Cut before it could answer (its row is booked): say why, in the path's shape.
            error = ShuttingDownError("the gateway is shutting down; retry the request")
            await send_path_error(send, error, scope["path"], ((b"retry-after", b"1"),))


class DrainingServer(uvicorn.Server):
    """uvicorn that cuts the requests still open `grace_s` after shutdown began.

    With `loads` (a worker of `farebox serve --workers N`) the sockets given to `run` are
    accepted from one connection at a time, by the worker holding the fewest first
    (gateway.accept_turns), instead of by uvloop's server, which takes a whole burst.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        in_flight: InFlight,
        grace_s: float,
        loads: Loads | None = None,
    ) -> None:
        super().__init__(config)
        self.in_flight = in_flight
        self.grace_s = grace_s
        self.loads = loads
        self.acceptors: list[TakeTurns] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.loads is None or not sockets:
            await super().startup(sockets)
            return
        await super().startup([])  # the lifespan, the banner: no server of uvloop's
        if self.should_exit:
            return
        factory = functools.partial(
            self.config.http_protocol_class,  # as uvicorn.Server.startup builds each
            config=self.config,
            server_state=self.server_state,  # type: ignore[call-arg]
            app_state=self.lifespan.state,
        )
        connections = self.server_state.connections
        self.acceptors = [
            TakeTurns(sock, factory, self.loads, lambda: len(connections)) for sock in sockets
        ]
        for acceptor in self.acceptors:
            acceptor.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in self.acceptors:  # stop accepting, as uvicorn closes its servers
            acceptor.close()
        timer = asyncio.get_running_loop().call_later(self.grace_s, self.in_flight.cut_all)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()
