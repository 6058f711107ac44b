"""The busy-poller spins only while reads come quickly and few requests are in flight, and
stops once the loop has been idle for its window (gateway/busy_poll.py), on a real loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from pytest import MonkeyPatch

from gateway import busy_poll
from gateway.busy_poll import BACK_OFF_S, MAX_IN_FLIGHT, MAX_WINDOWS, SPIN_SHARE, BusyPoll


@pytest.fixture
def uncontended(monkeypatch: MonkeyPatch) -> None:
    """A spin that is never taken for contended: the test checks what a quiet core does,
    and a loaded test box deschedules the loop's thread now and then."""
    monkeypatch.setattr(busy_poll, "CONTENDED_SHARE", 0.0)


async def _quick_reads(poll: BusyPoll, count: int) -> None:
    for _ in range(count):
        poll.wrote()
        poll.read()  # microseconds after the write: within any window


def _busy(seconds: float) -> None:
    """Hold the loop (a request's booking, say) without I/O."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_quick_reads_start_a_spin_and_idleness_ends_it() -> None:
    async with BusyPoll(0.02, set()) as poll:
        await _quick_reads(poll, 12)
        assert poll.score >= SPIN_SHARE
        assert poll.spins == 1  # one spin, kept going by each read and write
        assert poll._spinning
        # Idle past the window (on a loaded box, preempted turns are not idle ones: at the
        # latest its windows after the last I/O): the spin has ended.
        await asyncio.sleep(0.02 * (MAX_WINDOWS + 2))
        assert not poll._spinning
        assert poll.spins == 1


async def test_a_few_quick_reads_are_not_enough() -> None:
    async with BusyPoll(0.02, set()) as poll:
        await _quick_reads(poll, 3)  # score 1 - (7/8)^3 = 0.33: under the share
        assert poll.score < SPIN_SHARE
        assert poll.spins == 0


@pytest.mark.usefixtures("uncontended")
async def test_the_window_counts_idle_turns_not_busy_ones(monkeypatch: MonkeyPatch) -> None:
    """Work on the loop longer than the window (no I/O) does not end the spin: the window
    counts the turns when the loop has nothing to do (the cap of windows raised past the
    busy spell: 100 ms)."""
    monkeypatch.setattr(busy_poll, "MAX_WINDOWS", 20)
    async with BusyPoll(0.005, set()) as poll:
        await _quick_reads(poll, 12)
        for _ in range(4):  # 4 x 3 ms busy, a turn between: 12 ms, over two windows
            _busy(0.003)
            await asyncio.sleep(0)
        assert poll._spinning
        poll.read()
        assert poll.score >= SPIN_SHARE  # caught awake: a hit, however long since the write
        await asyncio.sleep(0.15)  # idle: 5 ms of quiet turns, or the cap on a loaded box
        assert not poll._spinning


async def test_a_loop_busy_without_io_stops_spinning_after_its_windows() -> None:
    async with BusyPoll(0.002, set()) as poll:
        await _quick_reads(poll, 12)
        for _ in range(MAX_WINDOWS * 2):  # busy twice as long as the spin may last
            _busy(0.002)
            await asyncio.sleep(0)
        assert not poll._spinning


async def test_a_spin_taken_off_its_core_stops_and_backs_off() -> None:
    """Descheduled (here: asleep in the kernel, as when another task has the core), a spin
    stops at its next turn and none starts again before the back-off has passed."""
    async with BusyPoll(0.05, set()) as poll:
        await _quick_reads(poll, 12)
        assert poll._spinning
        time.sleep(0.005)  # off the core for 5 ms: another task's time slice
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not poll._spinning
        assert poll.backoffs == 1
        spins = poll.spins
        await _quick_reads(poll, 4)
        assert poll.spins == spins  # backing off
        assert poll._calm_until - time.perf_counter() > BACK_OFF_S / 2
        poll._calm_until = 0.0  # the back-off over
        await _quick_reads(poll, 1)
        assert poll.spins == spins + 1


async def test_reads_after_long_waits_stop_the_spinning() -> None:
    async with BusyPoll(0.001, set()) as poll:
        await _quick_reads(poll, 12)
        assert poll.spins == 1
        for _ in range(8):
            poll.wrote()
            await asyncio.sleep(0.004)  # the spin ends after 1 ms idle; the read comes at 4
            poll.read()
        assert poll.score < SPIN_SHARE
        await asyncio.sleep(0.005)
        spins = poll.spins
        poll.wrote()
        poll.read()
        assert poll.spins == spins  # no new spin while the waits are long
        assert not poll._spinning


async def test_no_spin_with_more_requests_in_flight() -> None:
    requests: set[object] = {object() for _ in range(MAX_IN_FLIGHT + 1)}
    async with BusyPoll(0.02, requests) as poll:
        await _quick_reads(poll, 12)
        assert poll.score >= SPIN_SHARE
        assert poll.spins == 0
        requests.pop()  # back to the most it spins with: the next I/O may spin
        poll.wrote()
        assert poll.spins == 1


async def test_a_spin_in_progress_stops_when_more_requests_arrive() -> None:
    requests: set[object] = set()
    async with BusyPoll(0.5, requests) as poll:
        await _quick_reads(poll, 12)
        assert poll._spinning
        requests |= {object() for _ in range(MAX_IN_FLIGHT + 1)}
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not poll._spinning  # its next turn saw them


@pytest.mark.usefixtures("uncontended")
async def test_the_loop_turns_while_the_poller_spins_and_not_after() -> None:
    """While the poller spins, the loop keeps turning during a wait on a timer (it polls
    instead of sleeping): the spin's turns go on to the wait's end. Once it has stopped,
    none runs."""
    async with BusyPoll(0.2, set()) as poll:
        await _quick_reads(poll, 12)
        await asyncio.sleep(0.03)
        assert poll._spinning
        assert time.perf_counter() - poll._turn < 0.01  # a spin turn ran moments ago
        poll.window = 0.0  # the spin ends at its next turn
        await asyncio.sleep(0)
        assert not poll._spinning
        stopped = poll._turn
        await asyncio.sleep(0.03)
        assert poll._turn == stopped


async def test_idle_time_counts_the_quiet_turns_of_a_spin(monkeypatch: MonkeyPatch) -> None:
    """Every turn taken for quiet (the threshold raised past any turn): the idle time a spin
    adds is its turns' time, never more than it ran."""
    monkeypatch.setattr(busy_poll, "QUIET_TURN_S", 1.0)
    monkeypatch.setattr(busy_poll, "CONTENDED_SHARE", 0.0)
    async with BusyPoll(0.01, set()) as poll:
        started = time.perf_counter()
        await _quick_reads(poll, 12)
        await asyncio.sleep(0.03)  # the spin ends once 10 ms of quiet turns have passed
        assert not poll._spinning
        assert 0.01 <= poll.idle_s < time.perf_counter() - started


async def test_current_is_the_poller_of_this_threads_loop_while_it_serves() -> None:
    assert busy_poll.current() is None
    async with BusyPoll(0.001, set()) as poll:
        assert busy_poll.current() is poll
        found: list[BusyPoll | None] = []
        await asyncio.to_thread(lambda: found.append(busy_poll.current()))
        assert found == [None]  # another thread's loop has its own (none here)
    assert busy_poll.current() is None
    await asyncio.sleep(0.002)
