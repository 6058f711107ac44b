"""Keep the loop awake for a moment after its I/O, while its waits are short (busy-polling).

A loop with nothing to run sleeps in the kernel (`epoll_wait`) and is woken when bytes
arrive. On a virtual machine an idle vCPU halts, and waking it costs tens of microseconds
each time: at concurrency 1 a request wakes the gateway twice (the client's request, the
upstream's reply), which was ~0.15 ms of the ~0.52 ms a small request's TTFT added here
(bench/c1_path.py: a loop that never slept added 0.365 ms). Go's scheduler, Seastar and
Linux's `busy_poll` answer the same cost the same way: spin a short while before sleeping.

`BusyPoll` spins only where it pays, as an adaptive mutex does:

- until the loop has been idle for `window` seconds: a spin goes on while the loop is busy
  (a request's booking after its last byte, say) and ends after `window` of quiet turns,
  or `MAX_WINDOWS` windows after the last I/O whatever the loop did meanwhile;
- when most recent reads were caught awake (the loop busy or spinning when they came) or
  came within `window` of the I/O before them (`score`, a moving share): a gateway whose
  upstream takes milliseconds, as hosted models do, or whose clients think between
  requests, soon stops spinning and never starts again while that lasts;
- when at most `MAX_IN_FLIGHT` model requests are in flight (at concurrency 1 the next
  request often comes while the last one is still booked): with more, the loop seldom
  waits, and on a box whose cores it shares (clients, other workers) spinning would take
  their CPU.

A spin is one callback that puts itself back on the loop's ready queue, which makes the
loop poll without sleeping (`epoll_wait` with no timeout), and gives its core to any
other thread that wants it (`sched_yield`). A thread that spins is never woken, and so
loses the kernel's wake-up preemption: with another task busy on its core, bytes that
arrive wait for that task's time slice (milliseconds; seen here with a CPU hog on the
gateway's core: 7.6 ms added at p50). So a spin whose process ran less than half the time
since it began (its threads were descheduled: another task wants the core) stops at once,
and none starts for `BACK_OFF_S`. The process's own threads (the ledger's) are not
contention: the spin gives them the core (`sched_yield`) and their time is the process's.
`FAREBOX_BUSY_POLL_US=0` turns it off.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sized
from types import TracebackType

GAIN = 0.125
"""How much one read moves `score` (an exponential moving average: ~8 reads of memory)."""

SPIN_SHARE = 0.5
"""The share of recent reads caught or quick for the loop to spin."""

MAX_IN_FLIGHT = 2
"""The most model requests in flight for the loop to spin."""

QUIET_TURN_S = 15e-6
"""A turn of the loop between two spins that took less ran nothing else: the loop is idle
(as the ledger's `turn`; a spin with its `sched_yield` takes ~1-3 us). A longer turn ran
other work, or the thread was preempted (a VM's hiccups: one every few ms here): it is
not counted as idle, nor does it reset what was."""

LONG_TURN_S = 1e-3
"""A turn this long is checked for contention (the process's CPU clock: a system call):
another task's time slice is a millisecond or more (the kernel's minimum granularity); a
VM's hiccups (20-100 us, every few ms here) are shorter, and are not contention."""

CONTENDED_SHARE = 0.5
"""A spin whose process ran less than this share of the time since it began was
descheduled: another task wants the core."""

BACK_OFF_S = 1.0
"""No spin starts for this long after one met contention."""

MAX_WINDOWS = 4
"""A spin never outlasts this many windows after the last read or write (a loop busy that
long without I/O, or a loaded box whose every turn is preempted)."""

_local = threading.local()
"""The busy-poller of the loop running in this thread, if any (`current`): a test process
runs several gateways, each on its own thread and loop."""


class BusyPoll:
    """Spins `loop` until it has been idle for `window` seconds after I/O, while reads come
    quickly and few requests are in flight (see the module)."""

    __slots__ = (
        "_calm_until",
        "_last",
        "_loop",
        "_quiet",
        "_requests",
        "_spin_cpu",
        "_spin_wall",
        "_spinning",
        "_turn",
        "backoffs",
        "idle_s",
        "score",
        "spins",
        "window",
    )

    def __init__(self, window: float, requests: Sized) -> None:
        self.window = window
        self._requests = requests  # the model requests in flight (`InFlight.requests`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = 0.0  # the last read or write
        self._quiet = 0.0  # the quiet turns' time since the last I/O
        self._turn = 0.0  # the spin's last turn
        self._spin_wall = self._spin_cpu = 0.0  # the clocks when the spin began
        self._calm_until = 0.0  # no spin starts before (contention met)
        self._spinning = False
        self.score = 0.0
        # Since start, for /metrics: spins started, the idle time they kept the loop awake
        # (the CPU busy-polling burns), spins stopped for contention.
        self.spins = 0
        self.idle_s = 0.0
        self.backoffs = 0

    def read(self) -> None:
        """Bytes came in: a hit if the loop was awake for them (spinning, or busy inside a
        spin), or if they came within the window of the I/O before them."""
        now = time.perf_counter()
        hit = 1.0 if self._spinning or now - self._last <= self.window else 0.0
        self.score += (hit - self.score) * GAIN
        self._io(now)

    def wrote(self) -> None:
        """Bytes went out: a reply (or the client's next request) may follow soon."""
        self._io(time.perf_counter())

    def _io(self, now: float) -> None:
        self._last, self._quiet = now, 0.0
        if self._spinning or self.score < SPIN_SHARE:
            return
        if self._loop is None or len(self._requests) > MAX_IN_FLIGHT or now < self._calm_until:
            return
        self._spinning = True
        self.spins += 1
        self._turn = self._spin_wall = now
        self._spin_cpu = time.process_time()
        self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        now = time.perf_counter()
        turn, self._turn = now - self._turn, now
        if turn <= QUIET_TURN_S:  # nothing else ran: the loop was idle
            self._quiet += turn
            self.idle_s += turn
        elif turn >= LONG_TURN_S and self._contended(now):
            self._spinning = False
            self._calm_until = now + BACK_OFF_S
            self.backoffs += 1
            return
        loop = self._loop
        if (
            loop is None
            or self._quiet >= self.window
            or now - self._last >= self.window * MAX_WINDOWS
            or len(self._requests) > MAX_IN_FLIGHT
        ):
            self._spinning = False
            return
        os.sched_yield()  # a thread of this process (the ledger's) may want the core
        loop.call_soon(self._spin)

    def _contended(self, now: float) -> bool:
        ran = time.process_time() - self._spin_cpu
        return ran < CONTENDED_SHARE * (now - self._spin_wall)

    async def __aenter__(self) -> BusyPoll:
        """Serve this thread's loop: the connections made from now on find it (`current`)."""
        self._loop = asyncio.get_running_loop()
        _local.poll = self
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if getattr(_local, "poll", None) is self:
            _local.poll = None
        self._loop = None  # a spin running stops at its next turn


def current() -> BusyPoll | None:
    """The busy-poller of this thread's loop; None where none serves (off, or not a
    gateway's loop)."""
    poll: BusyPoll | None = getattr(_local, "poll", None)
    return poll
