"""Workers take turns at their shared listening socket: one connection per turn of the loop.

With `farebox serve --workers N` every worker listens on the one inherited socket. uvloop
(libuv) accepts every connection waiting there each time the socket is readable, so the
worker that wakes first takes a whole burst: the 64 connections of a c=64 load came out
1/63, 5/59, 14/50, 19/45 between two workers (bench/workers_pairs.py), and with keep-alive
a split lasts as long as the connections do; the worker with a handful of them idles while
the other is saturated. Here a worker accepts one connection each time its loop finds the
socket readable, and one that holds more connections than a sibling (`Loads`: counts in
memory the supervisor maps before the fork) lets the socket be for `DEFER_S` first, so
that the sibling takes it; if it is still waiting then, the worker takes it anyway. A
sibling that has not said how many it holds for `STALE_S` (stopped, stuck) is not waited
for.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import socket
import struct
import time
from collections.abc import Callable

log = logging.getLogger("farebox")
RETRY_S = 0.1  # after a failed accept that is not "nothing waiting" (EMFILE, ENOBUFS)
GONE = (BlockingIOError, InterruptedError, ConnectionAbortedError)
DEFER_S = 0.002  # how long a worker over its share leaves a connection to its siblings
STALE_S = 2.0  # a count older than this is a sibling not turning its loop: not waited for
SLOT = struct.Struct("qd")  # connections held, time.monotonic() when said


class Loads:
    """How many connections each worker holds, in memory mapped by all of them."""

    def __init__(self, memory: mmap.mmap, index: int) -> None:
        self.memory = memory
        self.index = index

    @staticmethod
    def shared(workers: int) -> mmap.mmap:
        """Anonymous shared memory for `workers` counts; map it before forking them."""
        return mmap.mmap(-1, SLOT.size * workers)

    def say(self, held: int) -> None:
        SLOT.pack_into(self.memory, self.index * SLOT.size, held, time.monotonic())

    def least_other(self) -> int | None:
        """The fewest connections a live sibling holds; None when none is live."""
        now, least = time.monotonic(), None
        for index in range(len(self.memory) // SLOT.size):
            held, said = SLOT.unpack_from(self.memory, index * SLOT.size)
            if index != self.index and said and now - said < STALE_S:
                least = held if least is None else min(least, held)
        return least


class TakeTurns:
    """Accept from `sock` one connection per readiness, handed to `factory`'s protocol."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        loads: Loads | None = None,
        held: Callable[[], int] = lambda: 0,
    ) -> None:
        self.sock = sock
        self.factory = factory
        self.loads = loads
        self.held = held  # this worker's open connections
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.deferred = 0  # connections left to a sibling for DEFER_S first
        self._closed = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self._loop.add_reader(self.sock.fileno(), self._accept)
        if self.loads is not None:
            self._heartbeat()

    def close(self) -> None:
        """Stop accepting (the socket stays open: the other workers still serve it)."""
        self._closed = True
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())

    def say(self) -> None:
        """Tell the siblings how many connections this worker holds (also on a timer)."""
        if self.loads is not None:
            self.loads.say(self.held() + len(self._pending))

    def _accept(self, forced: bool = False) -> None:
        assert self._loop is not None
        if self.loads is not None and not forced:
            mine = self.held() + len(self._pending)
            self.loads.say(mine)
            least = self.loads.least_other()
            if least is not None and mine > least:  # leave it to a sibling for a moment
                self.deferred += 1
                self._loop.remove_reader(self.sock.fileno())
                self._loop.call_later(DEFER_S, self._take_it)
                return
        try:
            conn, _ = self.sock.accept()
        except GONE:  # a sibling took it, or the client gave up
            return
        except OSError as exc:  # out of descriptors or buffers: wait, do not spin
            log.error("accept failed: %s", errno.errorcode.get(exc.errno or 0, exc))
            self._loop.remove_reader(self.sock.fileno())
            self._loop.call_later(RETRY_S, self._resume)
            return
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as a server's are
        task = self._loop.create_task(self._connect(conn))
        self._pending.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(self.factory, conn)
        except Exception as exc:  # the client is gone already: nothing to serve
            conn.close()
            log.warning("an accepted connection could not be set up: %r", exc)

    def _resume(self) -> None:
        if not self._closed and self._loop is not None:
            self._loop.add_reader(self.sock.fileno(), self._accept)

    def _heartbeat(self) -> None:
        """Say the count now and then, so that siblings see it fall and see this one live."""
        if not self._closed and self._loop is not None:
            self.say()
            self._loop.call_later(STALE_S / 4, self._heartbeat)

    def _take_it(self) -> None:
        """After a deferral: take what still waits (no sibling did), then listen again."""
        if not self._closed:
            self._resume()
            self._accept(forced=True)
