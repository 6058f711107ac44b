"""Relay a Messages API stream to the client event by event, measuring as it passes.

Every event goes out as the upstream's own bytes: `message_start` and `message_delta`
keep their usage for the client (Claude Code shows cost from it), and the meter reads the
same events for the ledger. The stream is complete at `message_stop`; an upstream that
ends before it, or that sends something that is not an event object, gets the stream
ended with one Anthropic `event: error`. An upstream's own `error` event is relayed as
sent and booked as a failure. The attempt is booked exactly once: when the stream ends,
fails, the client leaves, or the response never starts (`MessagesRelayResponse`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio
import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.anthropic_errors import anthropic_stream_error_event
from gateway.errors import FareboxError, UpstreamProtocolError, UpstreamUnreachableError
from gateway.pipeline.attempts import report_outcome
from gateway.pipeline.finish import finish
from gateway.pipeline.messages_meter import MessagesMeter
from gateway.pipeline.messages_request import MessagesContext
from gateway.services import Services
from gateway.upstream import failures
from gateway.upstream.base import UpstreamStream
from gateway.upstream.sse import event_data

log = logging.getLogger("farebox.relay")


class MessagesRelay:
    """The client's SSE bytes for one Messages stream; books the attempt exactly once."""

    def __init__(
        self,
        ctx: MessagesContext,
        first: bytes,
        events: AsyncIterator[bytes],
        stream: UpstreamStream,
        services: Services,
    ) -> None:
        self._ctx, self._services = ctx, services
        self._first: bytes | None = first
        self._events, self._stream = events, stream
        self._where = ctx.alias or "stream"
        self._secrets = [ctx.route.api_key()] if ctx.route is not None else []
        self.meter = MessagesMeter()
        self._settled = False
        self._body: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._body = self._run()
        return self._body

    async def close(self) -> None:
        """Book the attempt if the body did not run to its end (or never started)."""
        if self._body is not None:
            await self._body.aclose()
        await self._settle(None, cancelled=True)  # a no-op once booked

    async def _run(self) -> AsyncGenerator[bytes, None]:
        error: FareboxError | None = None
        cancelled = False
        try:
            while (event := await self._next()) is not None:
                failure = self._observe(event)
                yield _terminated(event)
                if failure is not None:
                    error = failure  # relayed as the upstream sent it; booked as failed
                    return
                if self.meter.stopped:
                    return
            raise UpstreamUnreachableError(
                f"upstream {self._where} ended the stream before message_stop"
            )
        except FareboxError as exc:
            error = exc
            yield anthropic_stream_error_event(exc, self._ctx.request_id)
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        except Exception:
            log.exception("relaying the Messages stream of %s failed", self._where)
            error = UpstreamProtocolError(
                f"upstream {self._where} sent a stream the gateway could not relay"
            )
            yield anthropic_stream_error_event(error, self._ctx.request_id)
        finally:
            with anyio.CancelScope(shield=True):
                await self._settle(error, cancelled)

    async def _next(self) -> bytes | None:
        if self._first is not None:
            event, self._first = self._first, None
            return event
        await asyncio.sleep(0)  # a fast upstream and client must not hold the loop
        try:
            return await self._events.__anext__()
        except StopAsyncIteration:
            return None

    def _observe(self, event: bytes) -> FareboxError | None:
        """Meter one event; the upstream's own error event comes back as an error."""
        payload = event_payload(event, self._where)
        if payload is None:
            return None  # a comment or keep-alive
        if payload.get("type") == "error":
            return failures.from_status(
                _error_status(payload), orjson.dumps(payload), self._where, self._secrets
            )
        self.meter.observe_event(payload)
        return None

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        if self._settled:
            return
        self._settled = True
        try:
            await self._stream.aclose()
        except Exception:
            log.exception("closing the Messages stream of %s failed", self._where)
        report_outcome(self._ctx, self._services, error)
        await asyncio.to_thread(self.meter.estimate_cut_output)  # tokenizes what was seen
        meter = self.meter.meter
        await finish(self._ctx, meter, self._services, error=error, cancelled=cancelled)


class MessagesRelayResponse(StreamingResponse):
    """A streamed Messages reply that books its attempt even if not one byte was sent."""

    def __init__(self, relay: MessagesRelay, headers: dict[str, str]) -> None:
        super().__init__(relay, media_type="text/event-stream", headers=headers)
        self._relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._relay.close()


def event_payload(event: bytes, where: str) -> dict[str, Any] | None:
    """An event's data as an object; None without data; a protocol error for anything else."""
    data = event_data(event)
    if data is None or not data.strip():
        return None
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError(f"upstream {where} sent a stream event that is not an object")
    return payload


_OVERLOADED = 529


def _error_status(payload: dict[str, Any]) -> int:
    """The HTTP status an Anthropic error event stands for (overloaded is 529)."""
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    statuses = {
        "invalid_request_error": 400,
        "rate_limit_error": 429,
        "overloaded_error": _OVERLOADED,
        "timeout_error": 504,
    }
    return statuses.get(kind, 500) if isinstance(kind, str) else 500


def _terminated(event: bytes) -> bytes:
    return event if event.endswith((b"\n\n", b"\r\n\r\n")) else event + b"\n\n"
