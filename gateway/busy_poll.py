"""Keep the loop awake for a moment after its I/O, while its waits are short (busy-polling).

A loop with nothing to run sleeps in the kernel (`epoll_wait`) and is woken when bytes
arrive. On a virtual machine an idle vCPU halts, and waking it costs tens of microseconds
each time: at concurrency 1 a request wakes the gateway twice (the client's request, the
upstream's reply), which was ~0.15 ms of the ~0.52 ms a small request's TTFT added here
(bench/c1_path.py: a loop that never slept added 0.365 ms). Go's scheduler, Seastar and
Linux's `busy_poll` answer the same cost the same way: spin a short while before sleeping.

`BusyPoll` spins only where it pays, as an adaptive mutex does:

- for `window` seconds after the loop's last read or write of a client or upstream socket
  (the server's protocol and h1 call `read` and `wrote`), not longer;
- when most of the recent waits ended within the window (`score`, a moving share of the
  reads that came within `window` of the I/O before them): a gateway whose upstream takes
  milliseconds, or whose clients think between requests, never spins;
- when at most one model request is in flight: with more, the loop seldom waits, and on
  a box whose cores it shares (clients, other workers) spinning would take their CPU.

A spin is one callback that puts itself back on the loop's ready queue, which makes the
loop poll without sleeping (`epoll_wait` with no timeout), and gives its core to any
other thread that wants it (`sched_yield`). `FAREBOX_BUSY_POLL_US=0` turns it off.
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
"""The share of recent reads that came within the window for the loop to spin."""

_local = threading.local()
"""The busy-poller of the loop running in this thread, if any (`current`): a test process
runs several gateways, each on its own thread and loop."""


class BusyPoll:
    """Spins `loop` for up to `window` seconds after I/O while waits are short (see module)."""

    __slots__ = ("_last", "_loop", "_requests", "_spinning", "_until", "score", "spins", "window")

    def __init__(self, window: float, requests: Sized) -> None:
        self.window = window
        self._requests = requests  # the model requests in flight (`InFlight.requests`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = 0.0  # the last read or write
        self._until = 0.0  # the spin stops then, or at once if nothing extends it
        self._spinning = False
        self.score = 0.0
        self.spins = 0  # spins started, for tests and benches

    def read(self) -> None:
        """Bytes came in: a hit if they came within the window of the I/O before them."""
        now = time.perf_counter()
        hit = 1.0 if now - self._last <= self.window else 0.0
        self.score += (hit - self.score) * GAIN
        self._last = now
        if self.score >= SPIN_SHARE:
            self._awake(now)

    def wrote(self) -> None:
        """Bytes went out: a reply (or the client's next request) may follow soon."""
        now = time.perf_counter()
        self._last = now
        if self.score >= SPIN_SHARE:
            self._awake(now)

    def _awake(self, now: float) -> None:
        if len(self._requests) > 1 or self._loop is None:
            return
        self._until = now + self.window
        if not self._spinning:
            self._spinning = True
            self.spins += 1
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        loop = self._loop
        if loop is not None and time.perf_counter() < self._until and len(self._requests) <= 1:
            os.sched_yield()  # a thread of this process (the ledger's) may want the core
            loop.call_soon(self._spin)
        else:
            self._spinning = False

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
        self._until = 0.0


def current() -> BusyPoll | None:
    """The busy-poller of this thread's loop; None where none serves (off, or not a
    gateway's loop)."""
    poll: BusyPoll | None = getattr(_local, "poll", None)
    return poll
