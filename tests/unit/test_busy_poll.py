"""The busy-poller spins only while its waits are short and one request at most is in flight,
and never past its window (gateway/busy_poll.py), on a real asyncio loop."""

from __future__ import annotations

import asyncio
import time

from gateway import busy_poll
from gateway.busy_poll import SPIN_SHARE, BusyPoll


async def _quick_reads(poll: BusyPoll, count: int) -> None:
    for _ in range(count):
        poll.wrote()
        poll.read()  # microseconds after the write: within any window


async def test_short_waits_start_a_spin_and_it_stops_after_the_window() -> None:
    async with BusyPoll(0.02, set()) as poll:
        await _quick_reads(poll, 12)
        assert poll.score >= SPIN_SHARE
        assert poll.spins == 1  # one spin, extended by each read and write
        assert poll._spinning
        await asyncio.sleep(0.05)  # past the window with no I/O: the spin has ended
        assert not poll._spinning
        assert poll.spins == 1


async def test_a_few_short_waits_are_not_enough() -> None:
    async with BusyPoll(0.02, set()) as poll:
        await _quick_reads(poll, 3)  # score 1 - (7/8)^3 = 0.33: under the share
        assert poll.score < SPIN_SHARE
        assert poll.spins == 0


async def test_long_waits_stop_the_spinning() -> None:
    async with BusyPoll(0.001, set()) as poll:
        await _quick_reads(poll, 12)
        assert poll.spins == 1
        for _ in range(8):
            poll.wrote()
            await asyncio.sleep(0.003)  # a wait three windows long: a miss
            poll.read()
        assert poll.score < SPIN_SHARE
        spins = poll.spins
        await asyncio.sleep(0.005)
        poll.wrote()
        poll.read()
        assert poll.spins == spins  # no new spin while the waits are long


async def test_no_spin_with_two_requests_in_flight() -> None:
    requests: set[object] = {object(), object()}
    async with BusyPoll(0.02, requests) as poll:
        await _quick_reads(poll, 12)
        assert poll.score >= SPIN_SHARE
        assert poll.spins == 0
        requests.pop()  # one left: the next I/O may spin
        poll.wrote()
        assert poll.spins == 1


async def test_a_spin_in_progress_stops_when_a_second_request_arrives() -> None:
    requests: set[object] = set()
    async with BusyPoll(0.5, requests) as poll:
        await _quick_reads(poll, 12)
        assert poll._spinning
        requests |= {object(), object()}
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not poll._spinning  # its next turn saw two in flight


async def _cpu_while_waiting(seconds: float) -> float:
    """This thread's CPU seconds while the loop waits `seconds` on a timer."""
    started = time.thread_time()
    await asyncio.sleep(seconds)
    return time.thread_time() - started


async def test_the_loop_stays_awake_inside_the_window_and_sleeps_after_it() -> None:
    """While the poller spins, a wait on a timer keeps the loop's thread running (it polls
    instead of sleeping); once the window has passed, the same wait costs next to nothing."""
    async with BusyPoll(0.2, set()) as poll:
        await _quick_reads(poll, 12)
        spinning = await _cpu_while_waiting(0.03)
        assert poll._spinning
        poll._until = 0.0  # the window over: the spin ends at its next turn
        await asyncio.sleep(0)
        assert not poll._spinning
        asleep = await _cpu_while_waiting(0.03)
    assert spinning > 0.005  # ~0.03 s on an idle core; a loaded one gives it less
    assert asleep < spinning / 3


async def test_current_is_the_poller_of_this_threads_loop_while_it_serves() -> None:
    assert busy_poll.current() is None
    async with BusyPoll(0.001, set()) as poll:
        assert busy_poll.current() is poll
        found: list[BusyPoll | None] = []
        await asyncio.to_thread(lambda: found.append(busy_poll.current()))
        assert found == [None]  # another thread's loop has its own (none here)
    assert busy_poll.current() is None
    await asyncio.sleep(0.002)
