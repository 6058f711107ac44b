"""A streamed reply cut by the shutdown natively (`gateway.drain.TrackedRequest`), no anyio scope.

The chat stream is no longer sent inside an anyio cancel scope of its own: the cut
cancels the request's task natively, again at each turn of the loop, except inside a
`drain.Shield`. So the relay's booking shield and the response's clean-up shield must be
`Shield`s: a booking that waits, cut mid-stream or before the body started, runs to its
end and books once, and the request's task takes the cut back when it leaves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from gateway.drain import InFlight, TrackedRequest
from gateway.errors import FareboxError
from gateway.pipeline.booked_stream import BookedStream, BookedStreamResponse


class Body(BookedStream):
    """Sends one part, then waits on its upstream (forever) as a relay waits; its booking
    waits `turns` turns of the loop and then on `gate`, as a booking on Redis or PostgreSQL."""

    def __init__(self, gate: asyncio.Future[str], turns: int = 5) -> None:
        self.gate, self.turns = gate, turns
        self.bookings: list[tuple[bool, str]] = []  # (cancelled, what the gate gave)

    async def _run(self) -> AsyncGenerator[bytes, None]:
        cancelled = False
        try:
            yield b"data: 1\n\n"
            self._will_wait()
            await asyncio.Event().wait()  # the upstream never sends more
            yield b"data: 2\n\n"  # pragma: no cover - never reached
        except (asyncio.CancelledError, GeneratorExit):
            cancelled = True
            raise
        finally:
            self.settling = True
            await self._settle_shielded(None, cancelled)  # as the relays book

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        if self.bookings:
            return
        self.bookings.append((cancelled, "started"))
        for _ in range(self.turns):
            await asyncio.sleep(0)  # each turn, a delivery of the cut
        self.bookings[0] = (cancelled, await self.gate)


class Client:
    """The server's side: a head that waits for `head` to be sent, then every send at once."""

    def __init__(self, head: asyncio.Event | None = None) -> None:
        self.head = head
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays
        return {"type": "http.disconnect"}  # pragma: no cover

    async def send(self, message: dict[str, Any]) -> None:
        if self.head is not None and message["type"] == "http.response.start":
            await self.head.wait()
        self.sent.append(message)


async def _serve(response: BookedStreamResponse, client: Client, in_flight: InFlight) -> bool:
    """The response in a tracked request, as `gateway.front.ChatFront` serves it; whether the
    task has a cancellation left to raise once it left (False: the cut took its own back)."""
    cut = TrackedRequest(in_flight)
    try:
        await response({"type": "http"}, client.receive, client.send)
    except asyncio.CancelledError:
        return cut.leave()
    return cut.leave()


async def _until(condition: Any) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never met")


async def test_a_stream_cut_while_it_waits_books_once_through_a_waiting_booking() -> None:
    in_flight = InFlight()
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    body, client = Body(gate), Client()
    request = asyncio.create_task(_serve(BookedStreamResponse(body, {}), client, in_flight))
    await _until(lambda: len(client.sent) == 2)  # the head and the first part: it waits
    in_flight.cut_all()
    await _until(lambda: body.bookings)
    for _ in range(10):  # turns of the loop while the booking waits: the cut holds off
        await asyncio.sleep(0)
    assert not request.done() and body.bookings == [(True, "started")]
    gate.set_result("booked")
    assert await asyncio.wait_for(request, 5) is False
    assert body.bookings == [(True, "booked")]
    assert [m.get("more_body") for m in client.sent[1:]] == [True]  # no end sent: cut
    assert len(in_flight) == 0


async def test_a_stream_cut_before_its_body_started_is_still_booked() -> None:
    in_flight = InFlight()
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    head = asyncio.Event()  # the head's send waits (a slow client): the cut lands there
    body, client = Body(gate), Client(head)
    request = asyncio.create_task(_serve(BookedStreamResponse(body, {}), client, in_flight))
    await _until(lambda: len(in_flight) == 1)
    await asyncio.sleep(0)
    in_flight.cut_all()
    await _until(lambda: body.bookings)
    for _ in range(10):
        await asyncio.sleep(0)
    assert not request.done() and body.bookings == [(True, "started")]
    gate.set_result("booked")
    assert await asyncio.wait_for(request, 5) is False
    assert body.bookings == [(True, "booked")] and client.sent == []
