"""Relay an upstream stream to the client as it is read, measuring each event as it passes.

All the events one read of the upstream brought go out as one message (one write to the
client): nothing waits for more, and a read that completes one event sends that event.
The read that brings `[DONE]` with the end of the upstream's body (as vLLM and a fast
server send them) is billed first (the quota, the task's cost, the observers told), then
goes out with the end of the client's body, that end not a write of its own; the rest of
the booking (the ledger row, the metrics, the prompt's history) follows it, as a whole
reply's does (`finish.Booking`), so the client's stream does not wait for it (on a shared
store, for a round trip). Any other stream is booked whole before its end.

Events go out as the upstream's own bytes. Two exceptions: the usage-only chunk is
dropped when the client did not ask for it (the gateway asked on its behalf), and a
failure mid-stream ends the stream with one error event and `[DONE]`, so no client is
left hanging. Whatever goes wrong while reading the upstream's events (an event that is
not a chat-completion chunk, a reset, an event without end) is an `UpstreamError`, and
the attempt is booked exactly once: when the stream ends, fails, or the client leaves,
and also when the response never started at all (`RelayResponse`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any

import orjson

from gateway.errors import (
    FareboxError,
    UpstreamProtocolError,
    UpstreamUnreachableError,
    stream_error_event,
)
from gateway.pipeline.attempts import report_outcome
from gateway.pipeline.booked_stream import BookedStream, BookedStreamResponse
from gateway.pipeline.context import RequestContext
from gateway.pipeline.finish import bill, price_now
from gateway.pipeline.measure import Meter
from gateway.pipeline.respond import with_cost
from gateway.pipeline.thinking_cap import ThinkingCap, is_role_only
from gateway.rawjson import patch_object
from gateway.services import Services
from gateway.upstream.base import UpstreamStream
from gateway.upstream.http_stream import SseEvents
from gateway.upstream.replies import (
    PLAIN_EVENT,
    PlainEvent,
    error_in_chunk,
    line_data,
    plain_content,
    read_chunk,
)
from gateway.upstream.sse import DONE, DONE_EVENT, event_data
from gateway.usage import usage_from_openai

log = logging.getLogger("farebox.relay")
try:  # one reader per stream: its chunks read by their content alone (_plain_event.c)
    from gateway.upstream._plain_event import PlainEvents as _PlainEvents
except ImportError:  # built without it: `PLAIN_EVENT`, if built at all
    _PlainEvents = None  # type: ignore[assignment,misc]
LOOP_SLICE_S = 0.001
"""The longest a stream relays without a pause. Another task's wake-up waits up to three
slices: the timer or socket event runs one loop pass after the slice in progress, the task
it wakes one pass later, each pass behind a slice of this stream (on a 20 MB stream the
loop ran 15-20 ms per 5 ms watch period with 5 ms slices, 13-14 ms with 2 ms, 9-10 ms with
1 ms; the stream's wall time did not change: 1.64-1.81 s against 1.64-1.72 s at 2 ms)."""
SHORT_READ_EVENTS = 32
SHORT_READ_BYTES = 64 * 1024
"""A read of at most this many events and bytes is relayed whole between two readings of
the clock (before the read and after it): tens of microseconds at most, where reading it
before every event cost more than the check saved (21 readings for the mock's stream)."""


def _plain_reader() -> PlainEvent | None:
    """`PLAIN_EVENT` for one stream's events: `PlainEvents().read`, which reads a chunk that
    differs from the last one in its content alone by that content (the same answers)."""
    if PLAIN_EVENT is None or _PlainEvents is None:
        return PLAIN_EVENT
    return _PlainEvents().read


OPENING_SCAN = 4
"""How many of a read's first events `_through_first_token` looks at (a role chunk or two
before the first token; a stream that opens otherwise sends its first event alone)."""


def _through_first_token(events: list[bytes]) -> int:
    """How many of `events` to send first: through the first that shows the client
    something (a token, reasoning, a tool call, an end), past those that show nothing (the
    role chunk that opens an OpenAI stream, its content empty): the time to first token
    is to that event. 1 when none of the first `OPENING_SCAN` shows anything."""
    for index, event in enumerate(events[:OPENING_SCAN]):
        if not _shows_nothing(event):
            return index + 1
    return 1


def _shows_nothing(event: bytes) -> bool:
    """Whether `event` is a plain chunk whose content is empty (`plain_content` ""): the
    role chunk. Only a stream alone in flight reads its first events twice this way:
    natively where built (0.5 µs for two events, 4.7 through orjson)."""
    if PLAIN_EVENT is not None:
        found = PLAIN_EVENT(event)  # None: not a plain chunk (its Python path reads it)
        return found is not None and not found[0]
    data = line_data(event)
    if data is None or data[:1] != b"{":
        return False
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return type(chunk) is dict and plain_content(chunk) == ""


def _is_usage_only(chunk: dict[str, Any]) -> bool:
    return isinstance(chunk.get("usage"), dict) and not chunk.get("choices")


class Relay(BookedStream):
    """The client's SSE bytes for one upstream stream; books the attempt exactly once."""

    def __init__(
        self,
        ctx: RequestContext,
        first: bytes,
        events: AsyncIterator[bytes],
        stream: UpstreamStream,
        meter: Meter,
        services: Services,
        cap: ThinkingCap | None = None,
    ) -> None:
        self._ctx, self._meter, self._services, self._cap = ctx, meter, services, cap
        self._first: bytes | None = first
        self._events, self._stream = events, stream
        self._where = ctx.alias or "stream"
        self._cut_now = False
        self._ended = False  # the upstream's [DONE] was read
        self._settled = False
        self._let_go = False  # released to the pool, its body read to the end (`_released`)
        self._slice_end = 0.0  # when this stream next lets the loop's other work run
        self._held: list[bytes] = []  # the opening read's events after the first (`_opening`)

    async def _run(self) -> AsyncGenerator[bytes, None]:
        error: FareboxError | None = None
        cancelled = False
        out: list[bytes] = []  # relayed, not sent yet: all that one read brought goes at once
        # Nearly every event is one line of plain content, read natively (`_plain_reader`)
        # and relayed as it came; a thinking cap reads every chunk itself.
        # Their metering waits for the end of the run of them (`run`), one call and two clock
        # readings a run: the first token's time is read as it is found (`run_at`).
        plain = _plain_reader() if self._cap is None else None
        meter, clock = self._meter, self._meter.clock
        run: list[tuple[str, Any]] = []
        run_at: float | None = None
        now = time.perf_counter
        try:
            slice_end = self._slice_end = now() + LOOP_SLICE_S
            batch = self._opening()
            while batch:
                timed = len(batch) > SHORT_READ_EVENTS or sum(map(len, batch)) > SHORT_READ_BYTES
                for event in batch:
                    if timed and now() > slice_end:
                        if run:
                            meter.observe_contents(run, run_at)
                            run, run_at = [], None
                        if out:
                            sent, out = b"".join(out), []
                            yield sent
                        await self._pause()
                        slice_end = self._slice_end
                    if plain is not None and (found := plain(event)) is not None:
                        if run_at is None and found[0]:
                            run_at = clock()
                        run.append(found)
                        out.append(event)
                        continue
                    if run:
                        meter.observe_contents(run, run_at)
                        run, run_at = [], None
                    data = line_data(event)
                    if data is None:
                        data = event_data(event)
                    if data is not None and data[:1] != b"{" and data.strip() == DONE:
                        self._ended = True
                        out.append(_terminated(event))
                        if self._released():  # its body's end came with it: booked, then
                            break  # these last bytes go with the client's end (below)
                        sent, out = b"".join(out), []
                        yield sent  # the booking, then the wait for the body's end
                        return
                    outgoing = self._outgoing(event, data)
                    if outgoing is not None:
                        out.append(outgoing)
                    if self._cut_now:
                        break  # the rest of this read is the cut call's: never relayed
                if self._ended:
                    break
                if run:
                    meter.observe_contents(run, run_at)
                    run, run_at = [], None
                if out:
                    sent, out = (out[0] if len(out) == 1 else b"".join(out)), []
                    yield sent
                if self._cut_now:
                    await self._continue()
                batch, self._held = self._held, []
                if not batch:
                    batch = await self._next()
                slice_end = self._slice_end  # `_next` may have paused
            if not self._ended:
                raise UpstreamUnreachableError(
                    f"upstream {self._where} ended the stream before it was complete"
                )
        except FareboxError as exc:
            error = exc
            yield b"".join(out) + stream_error_event(exc)  # what came before it, then the error
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        except Exception:  # a reply the relay could not handle: still a clean ending
            log.exception("relaying the stream of %s failed", self._where)
            error = UpstreamProtocolError(
                f"upstream {self._where} sent a stream the gateway could not relay"
            )
            yield b"".join(out) + stream_error_event(error)
        finally:
            # A disconnect cancels this generator's scope; the clean-up and the booking of
            # what was already spent must still run to the end.
            self.settling = True
            await self._settle_shielded(error, cancelled)
        if self._ended:
            # Billed: the last read's events, `[DONE]` among them, go out with the body's
            # end in one write; the rest of the booking follows it, as a whole reply's does.
            self.ends = True
            try:
                yield b"".join(out)
            finally:  # sent, or the send raised (then `close` comes here through `aclose`)
                await self._book_rest()

    def _opening(self) -> list[bytes]:
        """The first event, and the events its read brought with it.

        When this stream's call is the only one in flight (`alone`: concurrency 1), the
        events up to the client's first token (`_through_first_token`) go out on their
        own and the rest of the read is held for the next batch: a fast upstream sends a
        short stream whole in one read, and the first token would wait for all of it to
        be metered, its usage chunk priced and the call billed. With other calls in
        flight the loop is busy, and one write per read is cheaper.
        """
        first, self._first = self._first, None
        ready = getattr(self._events, "ready", None)
        rest: list[bytes] = ready() if ready is not None else []
        if first is None:
            return rest
        events = [first, *rest]
        if rest and self._alone():
            opening = _through_first_token(events)
            self._held = events[opening:]
            return events[:opening]
        return events

    def _alone(self) -> bool:
        alone = getattr(self._stream, "alone", None)
        return alone is not None and bool(alone())

    async def _next(self) -> list[bytes]:
        """The events of the next read (one event from a plain iterator); [] at the end."""
        if time.perf_counter() > self._slice_end:
            await self._pause()
        self._will_wait()
        batch = getattr(self._events, "batch", None)
        if batch is not None:
            return await batch()
        try:
            return [await self._events.__anext__()]
        except StopAsyncIteration:
            return []

    async def _pause(self) -> None:
        # Buffered events never suspend this task: a fast upstream and a fast client
        # held the loop ~100 ms at a time (20 MB stream). Let other requests run.
        await asyncio.sleep(0)
        self._slice_end = time.perf_counter() + LOOP_SLICE_S

    def _outgoing(self, event: bytes, data: bytes | None) -> bytes | None:
        """The bytes to send for one upstream event (its `data`), or None to drop it."""
        chunk, content = read_chunk(data, self._where)  # raises on anything but a chunk
        if chunk is None:
            return _terminated(event)
        if content is not None and self._cap is None:
            # Nearly every chunk: one delta's content, nothing else to check or meter.
            self._meter.observe_content(content, chunk.get("service_tier"))
            return _terminated(event)
        if "error" in chunk and (failure := self._error_in(chunk)) is not None:
            raise failure
        cap = self._cap
        if cap is not None and cap.cut and is_role_only(chunk):
            return None  # the continuation's opening chunk: the client had one
        if cap is not None and cap.passes_budget(chunk):
            self._meter.observe_chunk(chunk)
            self._cut_now = True
            return _terminated(event)
        if cap is not None and cap.cut and _is_usage_only(chunk):
            chunk, event = _combined_usage(chunk, event, cap)
            data = event_data(event)
        self._meter.observe_chunk(chunk)
        if _is_usage_only(chunk):
            if not self._ctx.client_wants_usage_chunk:
                return None
            ctx, meter, services = self._ctx, self._meter, self._services
            return _usage_event_with_cost(ctx, chunk, event, data, meter, services)
        return _terminated(event)

    def _error_in(self, chunk: dict[str, Any]) -> FareboxError | None:
        """`error_in_chunk`, the route's key (read from the environment) hidden in it."""
        route = self._ctx.route
        return error_in_chunk(chunk, self._where, [route.api_key()] if route is not None else [])

    async def _continue(self) -> None:
        """Stop the upstream at the thinking budget and go on with its continuation."""
        assert self._cap is not None
        self._will_wait()  # on the continuation's call
        self._cut_now = False
        self._held = []  # the cut call's: never relayed
        await _close(self._events)
        await self._stream.aclose()
        self._stream = await self._cap.continue_stream()
        self._events = self._stream.events()

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        """Close the upstream and book the attempt, once; no clean-up failure skips the row."""
        if self._settled:
            return
        self._settled = True
        if isinstance(self._events, SseEvents):
            self._events.close()  # nothing to wait for
        else:
            await _logged(_close(self._events), "closing the events of", self._where)
        if not self._ended:  # part-read: closing first stops the upstream generating
            await _logged(self._stream.aclose(), "closing the stream of", self._where)
        try:
            report_outcome(self._ctx, self._services, error)
            ctx, meter, services = self._ctx, self._meter, self._services
            # A stream that ended with its body (`_released`) sends its last bytes once
            # billed (quota, task cost; the observers told, as a whole reply's are): the
            # row, metrics and history are left to `rest`, after them. Any other, at once.
            later = self._let_go and error is None and not cancelled
            booking = await bill(
                ctx, meter, services, error=error, cancelled=cancelled, notify=later
            )
            if later:
                self.rest = booking
            else:
                await booking()
        finally:
            if self._ended and not self._released():  # booked first: the close may wait
                await _logged(self._stream.aclose(), "closing the stream of", self._where)

    def _released(self) -> bool:
        """Whether the stream was released at once: its body had ended with `[DONE]`."""
        if self._let_go:
            return True
        release = getattr(self._stream, "release_ended", None)
        try:
            self._let_go = release is not None and bool(release())
        except Exception:  # logged; `aclose` then closes what is left
            log.exception("releasing the stream of %s failed", self._where)
        return self._let_go


RelayResponse = BookedStreamResponse


def _combined_usage(
    chunk: dict[str, Any], event: bytes, cap: ThinkingCap
) -> tuple[dict[str, Any], bytes]:
    """The continuation's usage chunk, rewritten to cover both upstream calls."""
    data = event_data(event) or b"{}"
    usage = cap.combined(usage_from_openai(chunk["usage"])).to_openai()
    patched = patch_object(data, {"usage": usage}, trusted=True)  # parsed: `chunk`
    return {**chunk, "usage": usage}, b"data: " + patched + b"\n\n"


def _usage_event_with_cost(
    ctx: RequestContext,
    chunk: dict[str, Any],
    event: bytes,
    data: bytes | None,
    meter: Meter,
    services: Services,
) -> bytes:
    """The usage chunk (`event`, its `data` as `_outgoing` read it) with `usage.cost` added,
    ended by its blank line; the data line is rebuilt, nothing else."""
    price_now(ctx, meter, services)
    if data is None:  # `_outgoing` parsed it, so never: the event as it came
        return _terminated(event)
    return b"data: " + with_cost(chunk, data, ctx) + b"\n\n"


def _terminated(event: bytes) -> bytes:
    """The event with the blank line that ends it (a stream's last event may lack it)."""
    return event if event.endswith((b"\n\n", b"\r\n\r\n")) else event + b"\n\n"


async def _close(events: AsyncIterator[bytes]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


async def _logged(step: Awaitable[None], what: str, where: str) -> None:
    """Run a clean-up step; its failure is logged, never allowed to skip the booking."""
    try:
        await step
    except Exception:
        log.exception("%s %s failed", what, where)


__all__ = ["DONE_EVENT", "Relay", "RelayResponse"]
