"""Relay a typed event stream (Anthropic Messages, OpenAI Responses), booking it once.

The two protocols' relays differ only in how an event is read, when the stream is
complete and how a failure is told to the client; everything else is here: the loop
that passes events on as they come, the one error event that ends a stream which failed
after it started, and the booking of the attempt exactly once (when the stream ends,
fails, the client leaves, or the response never starts: `EventRelayResponse`).

    EventRelay                  the loop, the clean-up and the booking
      MessagesRelay             messages_relay.py: Anthropic events, `message_stop`
      ResponsesRelay            responses_relay.py: Responses events, `response.completed`
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol, cast

import orjson

from gateway.errors import FareboxError, UpstreamProtocolError, UpstreamUnreachableError
from gateway.pipeline.attempts import report_outcome
from gateway.pipeline.booked_stream import BookedStream, BookedStreamResponse
from gateway.pipeline.context import RequestContext
from gateway.pipeline.finish import finish, price_now
from gateway.pipeline.measure import Meter
from gateway.pipeline.relay import LOOP_SLICE_S
from gateway.pipeline.respond import cost_object
from gateway.services import Services
from gateway.upstream.base import UpstreamStream
from gateway.upstream.sse import event_data

log = logging.getLogger("farebox.relay")
Relayed = tuple[bytes, dict[str, Any] | None]


class RelayedBatches(Protocol):
    """A translating source: the events of each upstream read, told with their objects."""

    async def relayed_batch(self) -> list[Relayed]: ...

    async def aclose(self) -> None: ...


Source = AsyncIterator[Relayed] | RelayedBatches
"""What a relay reads: (event, object or None) pairs, one at a time or a read at a time."""
"""An event's bytes, and its data when whoever made it has it parsed already."""


class EventRelay(BookedStream):
    """The client's SSE bytes for one typed stream; subclasses read the protocol."""

    protocol = "event"  # for messages: "Messages", "Responses"
    complete_at = "its end"  # the event that completes a stream, for the error message

    def __init__(
        self,
        ctx: RequestContext,
        events: Source,
        stream: UpstreamStream,
        services: Services,
    ) -> None:
        self._ctx, self._services = ctx, services
        self._events, self._stream = events, stream
        self._where = ctx.alias or "stream"
        self._secrets = [ctx.route.api_key()] if ctx.route is not None else []
        self._settled = False

    # What a protocol says.

    @property
    def pipeline_meter(self) -> Meter:
        raise NotImplementedError

    def observe(
        self, event: bytes, payload: dict[str, Any] | None
    ) -> tuple[bytes, FareboxError | None]:
        """Meter one event: the bytes to send, and the upstream's own failure if it was one."""
        raise NotImplementedError

    def complete(self) -> bool:
        """Whether the stream has ended as its protocol ends one."""
        raise NotImplementedError

    def error_event(self, error: FareboxError) -> bytes:
        """The event that ends a stream which failed after it started."""
        raise NotImplementedError

    async def before_booking(self, error: FareboxError | None, cancelled: bool) -> None:
        """Whatever the protocol does once the stream is over, before the row is written."""

    # Shared.

    def priced(self, usage: dict[str, Any]) -> dict[str, Any] | None:
        """`usage` with `cost` added, priced from what the meter has seen; None if nothing."""
        if self.pipeline_meter.usage is None:
            return None
        price_now(self._ctx, self.pipeline_meter, self._services)
        return {**usage, "cost": cost_object(self._ctx)}

    async def _run(self) -> AsyncGenerator[bytes, None]:
        error: FareboxError | None = None
        cancelled = False
        out: list[bytes] = []  # relayed, not sent yet: all that one read brought goes at once
        # Alone (concurrency 1), the first token goes out before the rest of its read is
        # metered (as the chat relay's `_opening`): a fast upstream sends a short stream in
        # one read. With other calls in flight, one write per read is cheaper.
        opening = self._alone()
        meter = self.pipeline_meter
        try:
            slice_end = time.perf_counter() + LOOP_SLICE_S
            while relayed := await self._take():
                for event, parsed in relayed:
                    if time.perf_counter() > slice_end:  # a fast upstream and client must
                        if out:  # not hold the loop (as the chat relay's slices)
                            sent, out = b"".join(out), []
                            yield sent
                        await asyncio.sleep(0)
                        slice_end = time.perf_counter() + LOOP_SLICE_S
                    outgoing, failure = self.observe(event, parsed)
                    out.append(terminated(outgoing))
                    if failure is not None or self.complete():
                        error = failure  # relayed as the upstream sent it; booked as failed
                        sent, out = b"".join(out), []
                        yield sent
                        return
                    if opening and meter.first_token is not None:
                        opening = False
                        sent, out = b"".join(out), []
                        yield sent
                if out:
                    sent, out = (out[0] if len(out) == 1 else b"".join(out)), []
                    yield sent
                if time.perf_counter() > slice_end:
                    await asyncio.sleep(0)
                    slice_end = time.perf_counter() + LOOP_SLICE_S
            raise UpstreamUnreachableError(
                f"upstream {self._where} ended the stream before {self.complete_at}"
            )
        except FareboxError as exc:
            error = exc
            yield b"".join(out) + self.error_event(exc)  # what came before it, then the error
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        except Exception:  # a reply the relay could not handle: still a clean ending
            log.exception("relaying the %s stream of %s failed", self.protocol, self._where)
            error = UpstreamProtocolError(
                f"upstream {self._where} sent a stream the gateway could not relay"
            )
            yield b"".join(out) + self.error_event(error)
        finally:
            # A disconnect cancels this generator's scope; the clean-up and the booking of
            # what was already spent must still run to the end.
            self.settling = True
            await self._settle_shielded(error, cancelled)

    def _alone(self) -> bool:
        """Whether this stream's call is the only upstream call in flight."""
        alone = getattr(self._stream, "alone", None)
        return alone is not None and bool(alone())

    async def _take(self) -> list[Relayed]:
        """The events of the next read (one event from a plain iterator); [] at the end."""
        self._will_wait()  # the first batch, already read, too: translated streams wait on it
        relayed_batch = getattr(self._events, "relayed_batch", None)
        if relayed_batch is not None:  # told with their objects (a translating source)
            relayed: list[Relayed] = await relayed_batch()
            return relayed
        batch = getattr(self._events, "batch", None)
        if batch is not None:
            return [(event, None) for event in await batch()]
        try:
            return [await anext(cast(AsyncIterator[Relayed], self._events))]
        except StopAsyncIteration:
            return []

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
            log.exception("closing the %s stream of %s failed", self.protocol, self._where)
        report_outcome(self._ctx, self._services, error)
        await self.before_booking(error, cancelled)
        meter = self.pipeline_meter
        await finish(self._ctx, meter, self._services, error=error, cancelled=cancelled)


EventRelayResponse = BookedStreamResponse


class Prepended:
    """The first event (already awaited) and the rest, none of them parsed yet.

    `batch` gives the events of one read at a time when the rest can (`SseEvents`): the
    first batch is the first event and whatever its read brought with it.
    """

    def __init__(self, first: bytes, rest: AsyncIterator[bytes]) -> None:
        self._first: bytes | None = first
        self._rest = rest

    def __aiter__(self) -> Prepended:
        return self

    async def __anext__(self) -> Relayed:
        if self._first is not None:
            first, self._first = self._first, None
            return first, None
        return await anext(self._rest), None

    async def batch(self) -> list[bytes]:
        """The events of the next read; [] at the end."""
        if self._first is not None:
            first, self._first = self._first, None
            ready = getattr(self._rest, "ready", None)
            return [first, *ready()] if ready is not None else [first]
        batch = getattr(self._rest, "batch", None)
        if batch is not None:
            return await batch()
        try:
            return [await anext(self._rest)]
        except StopAsyncIteration:
            return []

    async def aclose(self) -> None:
        closing = getattr(self._rest, "aclose", None)
        if closing is not None:
            await closing()


def prepend(first: bytes, rest: AsyncIterator[bytes]) -> Prepended:
    """The first event (already awaited) and the rest, none of them parsed yet."""
    return Prepended(first, rest)


async def next_read(events: AsyncIterator[bytes]) -> list[bytes]:
    """The events of `events`' next read (`SseEvents.batch`; one from any other source);
    [] at the end. For the translating sources, which tell a read's events at once."""
    batch = getattr(events, "batch", None)
    if batch is not None:
        read: list[bytes] = await batch()
        return read
    try:
        return [await anext(events)]
    except StopAsyncIteration:
        return []


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


def named_event(kind: str, payload: dict[str, Any]) -> bytes:
    """An SSE event with its `event:` name (both protocols name theirs by type)."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def with_data(event: bytes, data: bytes) -> bytes:
    """The event with its `data:` replaced by `data`; its other lines (`event:`) kept."""
    lines = [line for line in event.splitlines() if line and not line.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + data]) + b"\n\n"


def terminated(event: bytes) -> bytes:
    """The event with the blank line that ends it (a stream's last event may lack it)."""
    return event if event.endswith((b"\n\n", b"\r\n\r\n")) else event + b"\n\n"
