"""Relay a Messages API stream to the client event by event, measuring as it passes.

Every event goes out as the upstream's own bytes but one: `message_delta`, whose usage
gains `cost` (the gateway's price of the call, as chat's usage chunk carries it; the
other bytes of its data are kept). `message_start` and `message_delta` keep their usage
for the client (Claude Code shows cost from it), and the meter reads the same events for
the ledger. The stream is complete at `message_stop`; an upstream that ends before it, or
that sends something that is not an event object, gets the stream ended with one
Anthropic `event: error`. An upstream's own `error` event is relayed as sent and booked
as a failure. The loop and the booking once are `event_relay`'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.anthropic_errors import anthropic_stream_error_event
from gateway.compact_patch import patch_spans
from gateway.errors import FareboxError
from gateway.pipeline.event_relay import (
    EventRelay,
    EventRelayResponse,
    Source,
    event_payload,
    with_data,
)
from gateway.pipeline.measure import Meter
from gateway.pipeline.messages_meter import MessagesMeter
from gateway.pipeline.messages_request import MessagesContext
from gateway.rawjson import RawJsonError, patch_object
from gateway.services import Services
from gateway.upstream import failures
from gateway.upstream.base import UpstreamStream
from gateway.upstream.sse import event_data

MessagesRelayResponse = EventRelayResponse


class MessagesRelay(EventRelay):
    """The client's SSE bytes for one Messages stream; books the attempt exactly once."""

    protocol = "Messages"
    complete_at = "message_stop"

    def __init__(
        self,
        ctx: MessagesContext,
        events: Source,
        stream: UpstreamStream,
        services: Services,
        meter: MessagesMeter | None = None,
    ) -> None:
        """`events`: the upstream's own (`prepend(first, events)`), or translated ones."""
        super().__init__(ctx, events, stream, services)
        self._request_id = ctx.request_id
        self.meter = meter or MessagesMeter()

    @property
    def pipeline_meter(self) -> Meter:
        return self.meter.meter

    def observe(
        self, event: bytes, payload: dict[str, Any] | None
    ) -> tuple[bytes, FareboxError | None]:
        """Meter one event; the upstream's own error event comes back as an error."""
        if payload is None:
            if self.meter.observe_delta_event(event):  # a token: read from its bytes
                return event, None
            payload = event_payload(event, self._where)
        if payload is None:
            return event, None  # a comment or keep-alive
        if payload.get("type") == "error":
            failure = failures.from_status(
                _error_status(payload), orjson.dumps(payload), self._where, self._secrets
            )
            return event, failure
        self.meter.observe_event(payload)
        usage = payload.get("usage")
        if payload.get("type") == "message_delta" and isinstance(usage, dict):
            return self._with_cost(event, usage), None
        return event, None

    def _with_cost(self, event: bytes, usage: dict[str, Any]) -> bytes:
        """`message_delta` with `usage.cost`; every other byte of its data kept."""
        priced, data = self.priced(usage), event_data(event)
        if priced is None or data is None:
            return event
        fields = {"usage": priced}
        try:  # the usual small data spliced natively where it finds `usage`
            patched = patch_spans(data, fields) or patch_object(data, fields, trusted=True)
            return with_data(event, patched)
        except RawJsonError:  # parsed, yet not patchable: it goes out as it came
            return event

    def complete(self) -> bool:
        return self.meter.stopped

    def error_event(self, error: FareboxError) -> bytes:
        return anthropic_stream_error_event(error, self._request_id)

    async def before_booking(self, error: FareboxError | None, cancelled: bool) -> None:
        if self.meter.cut_short:  # else counted by the upstream: no thread hop per stream
            await asyncio.to_thread(self.meter.estimate_cut_output)  # tokenizes what was seen


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


__all__ = ["MessagesRelay", "MessagesRelayResponse"]
