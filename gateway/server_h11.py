"""Farebox's guard on uvicorn's h11 protocol: the fallback where httptools is missing.

Its own module so that `farebox serve` on httptools never imports h11 and uvicorn's h11
protocol (12 modules, 9-11 ms of CPU before the port opens; docs/performance.md).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

from gateway.errors import BadHttpError
from gateway.server import _Guard


class FareboxH11Protocol(_Guard, H11Protocol):
    """The same on uvicorn's h11 protocol: the fallback where httptools is missing."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._guard_connection()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's headers arrived: the deadline is met
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        # Armed before the parent runs, which may start a pipelined request at once.
        self._arm_header_timer()  # the next request's headers
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """Answer malformed HTTP in OpenAI's error shape, then close."""
        self._answer_and_close(BadHttpError(f"malformed HTTP request: {msg}"))
