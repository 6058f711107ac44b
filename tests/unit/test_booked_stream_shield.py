"""`BookedStream._settle_shielded`: the booking's shield, entered only if the booking waits.

A booking that never suspends cannot be cancelled and enters no scope; one that suspends
is shielded from its first wait on, so an anyio scope cancelled while it waits (the
shutdown's cut of a route in `InFlightMiddleware`'s scope) does not stop it, and it sees each wait's result, error
or native cancellation as a plain `await` would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import anyio
import pytest

from gateway.drain import Shield
from gateway.errors import FareboxError
from gateway.pipeline.booked_stream import BookedStream


class Booking(BookedStream):
    """A body whose booking waits on `gates` in turn (none: it never suspends)."""

    def __init__(self, gates: list[asyncio.Future[str]]) -> None:
        self.gates = gates
        self.shields = 0
        self.seen: list[str] = []  # what each wait gave
        self.booked = False

    def _shield(self) -> Shield:
        self.shields += 1
        return super()._shield()

    async def _run(self) -> AsyncGenerator[bytes, None]:
        yield b""  # pragma: no cover - not run here

    async def _settle(self, error: FareboxError | None, cancelled: bool) -> None:
        if self.gates:
            await asyncio.sleep(0)  # a wait that yields None to the task, as sleep(0) does
        for gate in self.gates:
            self.seen.append(await gate)
        self.booked = True


async def test_a_booking_that_never_waits_enters_no_shield() -> None:
    body = Booking([])
    await body._settle_shielded(None, False)
    assert body.booked and body.shields == 0


async def test_a_waiting_booking_runs_to_its_end_when_its_scope_is_cancelled() -> None:
    loop = asyncio.get_running_loop()
    gates = [loop.create_future(), loop.create_future()]
    body = Booking(gates)
    scopes: list[anyio.CancelScope] = []
    after: list[str] = []

    async def request() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await body._settle_shielded(None, False)
            after.append("booked")
            await asyncio.sleep(10)  # the cut lands here, after the shield
            after.append("not cut")

    task = asyncio.create_task(request())
    for _ in range(5):
        await asyncio.sleep(0)
    scopes[0].cancel()  # while the booking waits on its first gate
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and not body.booked
    gates[0].set_result("first")
    for _ in range(3):
        await asyncio.sleep(0)
    gates[1].set_result("second")
    await asyncio.wait_for(task, 5)
    assert body.booked and body.seen == ["first", "second"] and body.shields == 1
    assert after == ["booked"] and scopes[0].cancelled_caught


async def test_a_waits_error_reaches_the_booking_as_from_a_plain_await() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    body = Booking([gate])
    waiting = asyncio.create_task(body._settle_shielded(None, False))
    for _ in range(3):
        await asyncio.sleep(0)
    gate.set_exception(ValueError("the store failed"))
    with pytest.raises(ValueError, match="the store failed"):
        await waiting
    assert not body.booked


async def test_a_native_cancel_reaches_the_booking_as_before() -> None:
    """anyio's shields never held a native cancel (the server's backstop): nor does this."""
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    body = Booking([gate])
    waiting = asyncio.create_task(body._settle_shielded(None, False))
    for _ in range(3):
        await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.cancelled() and not body.booked
