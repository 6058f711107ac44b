"""The shutdown's cut of a chat request tracked by its task (gateway/drain.py), no anyio scope.

What an anyio cancel scope gave `InFlight.cut_all`, the tracked request must give too: the
task is cancelled, again at each await until it ends, never inside a `Shield` (a cut
request's booking, a streamed reply's included), and the cut's cancellations are taken
back when the request ends while any other one still reaches the server.
"""

from __future__ import annotations

import asyncio
import contextlib

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.drain import InFlight, Shield, TrackedRequest


async def _until(condition: object) -> None:
    for _ in range(200):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never met")


def test_a_cut_cancels_the_request_and_is_taken_back() -> None:
    async def main() -> None:
        in_flight = InFlight()
        seen: list[str] = []

        async def request() -> None:
            cut = TrackedRequest(in_flight)
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                assert not cut.leave()  # the cut's own: nothing left to raise
                seen.append(f"cancelling={asyncio.current_task().cancelling()}")  # type: ignore[union-attr]
                await asyncio.sleep(0)  # not cancelled again once it left
                seen.append("left")

        task = asyncio.get_running_loop().create_task(request())
        await _until(lambda: len(in_flight) == 1)
        in_flight.cut_all()
        await task
        assert seen == ["cancelled", "cancelling=0", "left"]
        assert len(in_flight) == 0

    asyncio.run(main())


def test_a_shield_holds_and_the_cut_lands_after_it() -> None:
    async def main() -> None:
        in_flight = InFlight()
        seen: list[str] = []

        async def request() -> None:
            cut = TrackedRequest(in_flight)
            try:
                with Shield():
                    seen.append("shielded")
                    for _ in range(5):  # several turns of the loop, each one a delivery
                        await asyncio.sleep(0)
                    seen.append("booked")
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
            finally:
                assert not cut.leave()

        task = asyncio.get_running_loop().create_task(request())
        await _until(lambda: seen == ["shielded"])
        in_flight.cut_all()
        await task
        assert seen == ["shielded", "booked", "cancelled"]

    asyncio.run(main())


def test_a_swallowed_cancellation_is_delivered_again() -> None:
    async def main() -> None:
        in_flight = InFlight()
        seen: list[str] = []

        async def request() -> None:
            cut = TrackedRequest(in_flight)
            try:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    seen.append("swallowed")  # e.g. a retry that goes on
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled again")
            finally:
                assert not cut.leave()

        task = asyncio.get_running_loop().create_task(request())
        await _until(lambda: len(in_flight) == 1)
        in_flight.cut_all()
        await asyncio.wait_for(task, 5)
        assert seen == ["swallowed", "cancelled again"]

    asyncio.run(main())


def test_a_cancellation_that_is_not_the_cuts_still_goes_on() -> None:
    async def main() -> None:
        in_flight = InFlight()
        left: list[bool] = []

        async def request() -> None:
            cut = TrackedRequest(in_flight)
            try:
                with Shield():
                    await asyncio.sleep(0.05)  # cut here (waits), and the server's cancel
            finally:
                left.append(cut.leave())

        task = asyncio.get_running_loop().create_task(request())
        await _until(lambda: len(in_flight) == 1)
        in_flight.cut_all()
        await asyncio.sleep(0)
        task.cancel()  # uvicorn's own (its backstop): breaks the shield, as it always did
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert left == [True]
        assert task.cancelled()

    asyncio.run(main())


class _Stream(Response):
    """A reply that books under a `Shield`, as the relay does, after a long send."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__(b"")
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.seen.append("sending")
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.seen.append("cut")
            raise
        finally:
            with Shield():
                await asyncio.sleep(0.01)
                self.seen.append("booked")


def test_a_streamed_reply_is_cut_natively_and_books_under_its_shield() -> None:
    async def main() -> None:
        in_flight = InFlight()
        seen: list[str] = []

        async def request() -> None:
            cut = TrackedRequest(in_flight)
            with contextlib.suppress(asyncio.CancelledError):
                await _Stream(seen)({}, _receive, _send)
            assert not cut.leave()  # the cut's cancellation taken back: none of its own
            seen.append("after")

        task = asyncio.get_running_loop().create_task(request())
        await _until(lambda: seen == ["sending"])
        assert len(in_flight) == 1
        in_flight.cut_all()
        await asyncio.wait_for(task, 5)
        assert seen == ["sending", "cut", "booked", "after"]

    asyncio.run(main())


def test_inside_a_tracked_request_a_shield_is_its_count_alone() -> None:
    async def main() -> None:
        cut = TrackedRequest(InFlight())
        with Shield() as scope:
            assert scope is None  # no anyio scope: the chat front enters none to shield from
            assert cut.shields == 1
            with Shield():
                assert cut.shields == 2
        assert cut.shields == 0
        with contextlib.suppress(RuntimeError), Shield():
            raise RuntimeError("an error inside goes on, the count taken back")
        assert cut.shields == 0
        assert not cut.leave()

    asyncio.run(main())


def test_outside_a_tracked_request_a_shield_is_anyio_s() -> None:
    async def main() -> None:
        seen: list[str] = []
        with Shield() as scope:
            assert scope.shield
        with anyio.move_on_after(0.05):  # a route in the middleware's anyio scope
            await _Stream(seen)({}, _receive, _send)
        assert seen == ["sending", "cut", "booked"]

    asyncio.run(main())


async def _receive() -> dict[str, object]:
    return {"type": "http.disconnect"}


async def _send(message: object) -> None:
    pass
