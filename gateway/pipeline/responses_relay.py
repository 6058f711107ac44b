"""Relay a Responses API stream to the client event by event, measuring as it passes.

The events are the upstream's own bytes on a native route, or the chat stream told as
Responses events on a translated one (`translated_events`). The stream is complete at
`response.completed` / `.incomplete` / `.failed`; one that ends before, or sends
something that is not an event object, is ended with one Responses `error` event. The
attempt is booked exactly once (as the Messages relay does), and a completed response
is kept for `previous_response_id` (`on_done`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.errors import FareboxError, UpstreamProtocolError, UpstreamUnreachableError
from gateway.pipeline.attempts import report_outcome
from gateway.pipeline.finish import finish
from gateway.pipeline.messages_relay import event_payload
from gateway.pipeline.responses_meter import ResponsesMeter
from gateway.pipeline.responses_request import ResponsesContext
from gateway.services import Services
from gateway.upstream import failures
from gateway.upstream.base import UpstreamStream
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.usage import usage_from_openai

log = logging.getLogger("farebox.relay")
Done = Callable[[dict[str, Any]], Awaitable[None]]
Relayed = tuple[bytes, dict[str, Any] | None]
"""An event's bytes, and its data when whoever made it has it parsed already."""


def error_event(error: FareboxError) -> bytes:
    """The Responses `error` event that ends a stream which failed after it started."""
    payload = {
        "type": "error",
        "code": error.code or error.error_type,
        "message": error.message,
        "param": error.param,
        "sequence_number": 0,
    }
    return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


async def translated_events(
    first: bytes, events: AsyncIterator[bytes], teller: ChatToResponses, where: str
) -> AsyncGenerator[Relayed, None]:
    """A chat-completions stream (its SSE events), told as Responses events."""
    for event in teller.start():
        yield sse(event), event
    usage = None
    chunk: bytes | None = first
    while chunk is not None:
        payload = event_payload(chunk, where) if b"[DONE]" not in chunk else None
        if payload is not None:
            if isinstance(payload.get("usage"), dict):
                usage = usage_from_openai(payload["usage"])
            for event in teller.feed(payload):
                yield sse(event), event
        if b"[DONE]" in chunk:
            break
        chunk = await anext(events, None)
    else:
        return  # the chat stream ended before [DONE]: the relay reports the cut
    for event in teller.finish(usage):
        yield sse(event), event


class ResponsesRelay:
    """The client's SSE bytes for one Responses stream; books the attempt exactly once."""

    def __init__(
        self,
        ctx: ResponsesContext,
        events: AsyncIterator[Relayed],
        stream: UpstreamStream,
        services: Services,
        on_done: Done,
    ) -> None:
        self._ctx, self._services, self._on_done = ctx, services, on_done
        self._events, self._stream = events, stream
        self._where = ctx.alias or "stream"
        self._secrets = [ctx.route.api_key()] if ctx.route is not None else []
        self.meter = ResponsesMeter()
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
            async for event, parsed in self._events:
                failure = self._observe(event, parsed)
                yield event if event.endswith(b"\n\n") else event + b"\n\n"
                if failure is not None:
                    error = failure
                    return
                if self.meter.ended is not None:
                    return
                await asyncio.sleep(0)  # a fast upstream and client must not hold the loop
            raise UpstreamUnreachableError(
                f"upstream {self._where} ended the stream before response.completed"
            )
        except FareboxError as exc:
            error = exc
            yield error_event(exc)
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        except Exception:
            log.exception("relaying the Responses stream of %s failed", self._where)
            error = UpstreamProtocolError(
                f"upstream {self._where} sent a stream the gateway could not relay"
            )
            yield error_event(error)
        finally:
            with anyio.CancelScope(shield=True):
                await self._settle(error, cancelled)

    def _observe(self, event: bytes, parsed: dict[str, Any] | None) -> FareboxError | None:
        payload = parsed if parsed is not None else event_payload(event, self._where)
        if payload is None:
            return None
        self.meter.observe_event(payload)
        if payload.get("type") in ("error", "response.failed"):  # relayed, booked as failed
            return failures.from_status(500, orjson.dumps(payload), self._where, self._secrets)
        return None

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        if self._settled:
            return
        self._settled = True
        try:
            closing = getattr(self._events, "aclose", None)
            if closing is not None:  # a translating generator: closed here, not by the GC
                await closing()
            await self._stream.aclose()
        except Exception:
            log.exception("closing the Responses stream of %s failed", self._where)
        report_outcome(self._ctx, self._services, error)
        final = self.meter.final
        if error is None and not cancelled and final is not None:
            await self._on_done(final)
        await finish(self._ctx, self.meter.meter, self._services, error=error, cancelled=cancelled)


class ResponsesRelayResponse(StreamingResponse):
    """A streamed Responses reply that books its attempt even if not one byte was sent."""

    def __init__(self, relay: ResponsesRelay, headers: dict[str, str]) -> None:
        super().__init__(relay, media_type="text/event-stream", headers=headers)
        self._relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._relay.close()
