"""Relay a Responses API stream to the client event by event, measuring as it passes.

The events are the upstream's own bytes on a native route, or the chat stream told as
Responses events on a translated one (`TranslatedResponses`). The stream is complete at
`response.completed` / `.incomplete` / `.failed`; the final event's `response.usage`
gains `cost` (the gateway's price of the call, as chat's usage chunk carries it). One
that ends before, or sends something that is not an event object, is ended with one
Responses `error` event. The loop and the booking once are `event_relay`'s, and a
completed response is kept for `previous_response_id` (`on_done`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from gateway.errors import FareboxError
from gateway.pipeline.event_relay import (
    EventRelay,
    EventRelayResponse,
    Relayed,
    Source,
    event_payload,
    next_read,
)
from gateway.pipeline.measure import Meter
from gateway.pipeline.responses_meter import ENDS, ResponsesMeter
from gateway.pipeline.responses_request import ResponsesContext
from gateway.services import Services
from gateway.upstream import failures
from gateway.upstream.base import UpstreamStream
from gateway.upstream.responses_stream import ChatToResponses, sse
from gateway.upstream.sse import DONE
from gateway.usage import Usage, usage_from_openai

Done = Callable[[dict[str, Any]], Awaitable[None]]
ResponsesRelayResponse = EventRelayResponse


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


class TranslatedResponses:
    """A chat-completions stream (its SSE events) told as Responses events.

    `relayed_batch` tells every chat event of one upstream read at once (`SseEvents.batch`;
    one event from any other source), each Responses event with its object: one await per
    read, not per event, and nothing parsed back. The stream ends at `[DONE]`; a chat
    stream that ends before it ends this one with nothing more (the relay reports the cut).
    """

    __slots__ = ("_chat", "_ended", "_failed", "_first", "_pending", "_teller", "_usage", "_where")

    def __init__(
        self, first: bytes, chat: AsyncIterator[bytes], teller: ChatToResponses, where: str
    ) -> None:
        self._chat, self._teller, self._where = chat, teller, where
        self._first: bytes | None = first  # awaited by `first_event` within its deadline
        self._pending: list[Relayed] = [(sse(event), event) for event in teller.start()]
        self._usage: Usage | None = None
        self._failed: FareboxError | None = None  # raised once what came before it is out
        self._ended = False

    async def relayed_batch(self) -> list[Relayed]:
        """The Responses events of the next upstream read; [] at the end (or a cut)."""
        out, self._pending = self._pending, []
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if self._first is not None:  # alone: it goes out before the rest of its read
            first, self._first = self._first, None
            self._tell([first], out)
        while not out and not self._ended:
            chat_events = await next_read(self._chat)
            if not chat_events:
                self._ended = True
                break
            self._tell(chat_events, out)
        if not out and self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        return out

    def _tell(self, chat_events: list[bytes], out: list[Relayed]) -> None:
        teller = self._teller
        for chunk in chat_events:
            # `find`, not `in`: CPython 3.11 tries a bytes needle as an int first and
            # raises and clears a TypeError each time.
            if chunk.find(DONE) >= 0:
                out += [(sse(event), event) for event in teller.finish(self._usage)]
                self._ended = True
                return
            try:
                payload = event_payload(chunk, self._where)
            except FareboxError as exc:  # not an object: what came before it goes first
                self._failed, self._ended = exc, True
                return
            if payload is not None:
                if isinstance(payload.get("usage"), dict):
                    self._usage = usage_from_openai(payload["usage"])
                out += [(sse(event), event) for event in teller.feed(payload)]

    async def aclose(self) -> None:
        """Tell nothing more (the upstream stream itself is closed by the relay)."""
        self._ended = True
        self._pending = []


class ResponsesRelay(EventRelay):
    """The client's SSE bytes for one Responses stream; books the attempt exactly once."""

    protocol = "Responses"
    complete_at = "response.completed"

    def __init__(
        self,
        ctx: ResponsesContext,
        events: Source,
        stream: UpstreamStream,
        services: Services,
        on_done: Done,
    ) -> None:
        super().__init__(ctx, events, stream, services)
        self._on_done = on_done
        self.meter = ResponsesMeter()

    @property
    def pipeline_meter(self) -> Meter:
        return self.meter.meter

    def observe(
        self, event: bytes, payload: dict[str, Any] | None
    ) -> tuple[bytes, FareboxError | None]:
        payload = payload if payload is not None else event_payload(event, self._where)
        if payload is None:
            return event, None
        self.meter.observe_event(payload)
        kind = payload.get("type")
        if kind in ("error", "response.failed"):  # relayed, booked as failed
            failure = failures.from_status(500, orjson.dumps(payload), self._where, self._secrets)
            return event, failure
        if kind in ENDS:
            return self._with_cost(event, payload), None
        return event, None

    def _with_cost(self, event: bytes, payload: dict[str, Any]) -> bytes:
        """The final event with `response.usage.cost` (the event re-encoded, as sent)."""
        response = payload.get("response")
        usage = response.get("usage") if isinstance(response, dict) else None
        priced = self.priced(usage) if isinstance(usage, dict) else None
        if priced is None or not isinstance(response, dict):
            return event
        response["usage"] = priced
        return sse(payload)

    def complete(self) -> bool:
        return self.meter.ended is not None

    def error_event(self, error: FareboxError) -> bytes:
        return error_event(error)

    async def before_booking(self, error: FareboxError | None, cancelled: bool) -> None:
        final = self.meter.final
        if error is None and not cancelled and final is not None:
            await self._on_done(final)
