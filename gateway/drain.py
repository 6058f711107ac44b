"""Graceful shutdown: in-flight requests get a grace period, then are cut without losing a row.

On SIGTERM uvicorn stops accepting and waits for open requests. Past its
`timeout_graceful_shutdown` it cancels their tasks natively, and a native cancel breaks
into the clean-up a cut stream runs under an anyio shield (closing the upstream, booking
its ledger row): the row would be lost. So `farebox serve` cuts them itself at
FAREBOX_SHUTDOWN_GRACE_S through anyio cancel scopes, which those shields hold against;
uvicorn's own timeout, `BACKSTOP_S` later, is only a backstop. Then the lifespan closes
the ledger writer, which commits every row.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Iterator

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.accept_turns import Loads, TakeTurns
from gateway.errors import ShuttingDownError, send_error

log = logging.getLogger("farebox")
BACKSTOP_S = 5.0


class InFlight:
    """The cancel scopes of the HTTP requests in progress."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()

    def __len__(self) -> int:
        return len(self._scopes)

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
        if self._scopes:
            log.warning("shutdown grace period over: cutting %d request(s)", len(self._scopes))
        for scope in list(self._scopes):
            scope.cancel()


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
            # Cut before it could answer (its row is booked): say why, in OpenAI's shape.
            error = ShuttingDownError("the gateway is shutting down; retry the request")
            await send_error(send, error, ((b"retry-after", b"1"),))


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
