"""A stream's first event within its route's first-token limit, on the shared timer.

A stream that sends nothing in time is closed and refused with a 504 naming the limit;
one that sends in time is read; two limits in use each hold to their own length; a
cancel from outside stays a cancel (and closes the stream).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.config import ModelRoute
from gateway.errors import UpstreamTimeoutError, UpstreamUnreachableError
from gateway.pipeline.chat import first_event
from gateway.settings import Timeouts
from gateway.upstream.base import UpstreamCall


class Stream:
    """An upstream stream whose first event comes after `delay` seconds (never: None)."""

    def __init__(self, delay: float | None, events: tuple[bytes, ...] = (b"data: {}\n\n",)):
        self.delay = delay
        self.sent = events
        self.headers: dict[str, str] = {}
        self.closed = False

    async def events(self) -> AsyncIterator[bytes]:
        if self.delay is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay or 0)
        for event in self.sent:
            yield event

    async def aclose(self) -> None:
        self.closed = True


def _call(first_token: float) -> UpstreamCall:
    route = ModelRoute(provider="openai", model="m", base_url="http://127.0.0.1:1/v1")
    return UpstreamCall(
        alias="fast",
        route=route,
        body=b"{}",
        parsed={},
        stream=True,
        timeouts=Timeouts(first_token=first_token),
        base_url="http://127.0.0.1:1/v1",
    )


async def test_an_event_in_time_is_read_and_a_silent_stream_is_refused() -> None:
    quick, silent = Stream(0.01), Stream(None)
    started = time.monotonic()
    got = await asyncio.gather(
        first_event(quick, quick.events(), _call(0.2)),
        first_event(silent, silent.events(), _call(0.2)),
        return_exceptions=True,
    )
    assert got[0] == b"data: {}\n\n" and not quick.closed
    assert isinstance(got[1], UpstreamTimeoutError) and silent.closed
    assert got[1].status_code == 504 and "sent nothing within 0.2 s" in got[1].message
    assert time.monotonic() - started >= 0.2


async def test_each_limit_holds_to_its_own_length() -> None:
    short, long = Stream(None), Stream(0.25)
    started = time.monotonic()
    one = asyncio.create_task(first_event(short, short.events(), _call(0.1)))
    two = asyncio.create_task(first_event(long, long.events(), _call(0.6)))
    with pytest.raises(UpstreamTimeoutError):
        await one
    assert 0.1 <= time.monotonic() - started < 0.25
    assert await two == b"data: {}\n\n" and not long.closed


async def test_an_empty_stream_is_unreachable() -> None:
    empty = Stream(0, events=())
    with pytest.raises(UpstreamUnreachableError):
        await first_event(empty, empty.events(), _call(1.0))
    assert empty.closed


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    silent = Stream(None)
    task = asyncio.create_task(first_event(silent, silent.events(), _call(5.0)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert silent.closed
