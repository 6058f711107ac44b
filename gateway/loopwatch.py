"""How long the event loop was held: a task that sleeps 5 ms and measures how late it wakes.

While one request computes on the loop (parses, fingerprints, scans), every other request
and stream of the process waits. The lateness of a short sleep is that wait, measured
from outside the code that causes it: `farebox_event_loop_lag_seconds` in production, and
`longest` for tests and `bench/loop_stall.py`. A 5 ms period costs ~200 wake-ups a second,
a few microseconds each.

Lateness is wall time: it also counts a busy machine that did not schedule the loop's
thread, and another thread holding the interpreter lock. `longest_cpu` is the CPU time
of the loop's own thread across one sleep (the period and its lateness): an upper bound on
what code on the loop computed in one go, whatever the machine's load. `longest_busy` is
the lateness that the process's own CPU explains (at most the CPU all its threads used in
that period): what a lock-holding worker thread caused, without the time a busy machine
did not run the process at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType

PERIOD_S = 0.005


class LoopWatch:
    """Measures the loop's lag while entered (`async with`); `longest` is the worst seen.

    A timer callback re-armed each period, not a task that sleeps: no task step, future
    and coroutine resume per period, and each period's readings end the one before and
    start the next (three clock reads per period instead of six).
    """

    def __init__(
        self,
        observe: Callable[[float], None] | None = None,
        period: float = PERIOD_S,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.observe = observe
        self.period = period
        # The CPU `longest_busy` counts: the process's; a bench that runs its own client
        # code in the same process counts the gateway's threads only.
        self.cpu_clock = cpu_clock
        self.longest = 0.0
        self.longest_cpu = 0.0
        self.longest_busy = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asleep = self._cpu = self._busy = 0.0

    def take_longest(self) -> tuple[float, float]:
        """Return the longest lag and loop-thread CPU burst since the last call; start over."""
        longest = (self.longest, self.longest_cpu)
        self.longest = self.longest_cpu = self.longest_busy = 0.0
        return longest

    def _sleep(self, asleep: float, cpu: float, busy: float) -> None:
        self._asleep, self._cpu, self._busy = asleep, cpu, busy
        assert self._loop is not None
        self._timer = self._loop.call_later(self.period, self._woke)

    def _woke(self) -> None:
        now, cpu, busy = time.perf_counter(), time.thread_time(), self.cpu_clock()
        lag = max(now - self._asleep - self.period, 0.0)
        self.longest = max(self.longest, lag)
        self.longest_cpu = max(self.longest_cpu, cpu - self._cpu)
        self.longest_busy = max(self.longest_busy, min(lag, busy - self._busy))
        self._sleep(now, cpu, busy)
        if self.observe is not None:
            self.observe(lag)

    async def __aenter__(self) -> LoopWatch:
        self._loop = asyncio.get_running_loop()
        self._sleep(time.perf_counter(), time.thread_time(), self.cpu_clock())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()  # nothing runs after exit
            self._timer = None
