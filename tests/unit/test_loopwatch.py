"""LoopWatch: a timer re-armed every period measures how late the loop ran it."""

from __future__ import annotations

import asyncio
import time

import uvloop

from gateway.loopwatch import LoopWatch

HELD_S = 0.06  # how long a test holds the loop: far beyond the 5 ms period


def _hold(seconds: float) -> None:
    """Compute on the loop's thread for `seconds` of its CPU (wall time is longer on a busy box)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _held_watch() -> tuple[LoopWatch, list[float]]:
    lags: list[float] = []
    async with LoopWatch(lags.append) as watch:
        await asyncio.sleep(0.02)  # a few periods on an idle loop
        _hold(HELD_S)
        await asyncio.sleep(0.02)
    return watch, lags


def test_a_held_loop_shows_as_lag_and_as_cpu_of_its_thread() -> None:
    for run in (asyncio.run, uvloop.run):
        watch, lags = run(_held_watch())
        assert len(lags) >= 3  # observed every period, not only at the end
        assert max(lags) == watch.longest >= HELD_S / 2
        assert watch.longest_cpu >= HELD_S / 2  # the loop's own thread computed it
        assert watch.longest_busy >= HELD_S / 2  # the process's CPU explains the lag
        longest = (watch.longest, watch.longest_cpu)
        assert watch.take_longest() == longest
        assert (watch.longest, watch.longest_cpu, watch.longest_busy) == (0.0, 0.0, 0.0)


def test_take_longest_returns_the_worst_since_the_last_call() -> None:
    async def main() -> tuple[tuple[float, float], tuple[float, float]]:
        async with LoopWatch() as watch:
            await asyncio.sleep(0.01)
            _hold(HELD_S)
            await asyncio.sleep(0.01)
            first = watch.take_longest()
            await asyncio.sleep(0.03)
            return first, watch.take_longest()

    first, second = uvloop.run(main())
    assert first[0] >= HELD_S / 2 and first[1] >= HELD_S / 2
    assert second[0] < first[0] and second[1] < first[1]


def test_nothing_is_observed_after_exit() -> None:
    async def main() -> tuple[int, int]:
        lags: list[float] = []
        async with LoopWatch(lags.append):
            await asyncio.sleep(0.03)
        seen = len(lags)
        await asyncio.sleep(0.03)
        return seen, len(lags)

    seen, later = uvloop.run(main())
    assert seen >= 1 and later == seen
