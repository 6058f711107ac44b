"""The server's capacity: a fixed number of running sequences and a KV cache in tokens.

A request takes a seat before its prefill and gives it back when its answer is over (or
its client leaves). Seats run out two ways, as on a vLLM server: `max_num_seqs` sequences
already run, or their KV blocks (prompt plus output, `block_size` tokens each) would pass
`kv_cache_tokens`. Then the request waits in line, first come first served, so its time
to first token grows with the load. The prefix cache lives in the same KV blocks: its LRU
holds `kv_cache_tokens / block_size` blocks, so a busy server evicts cached prefixes.

Nothing waits when neither limit is set (the default): the zero-latency simulator of the
tests takes no lock and builds no future.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing, asynccontextmanager

from gateway.sim.records import RequestRecord


class Seats:
    """Running sequences and the KV blocks they hold; a FIFO line of the ones waiting."""

    def __init__(self, max_seqs: int | None, kv_blocks: int | None, block_size: int) -> None:
        self.max_seqs = max_seqs
        self.kv_blocks = kv_blocks
        self.block_size = block_size
        self.running = 0
        self.used_blocks = 0
        self._line: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def limited(self) -> bool:
        return self.max_seqs is not None or self.kv_blocks is not None

    @property
    def waiting(self) -> int:
        return len(self._line)

    def blocks_for(self, tokens: int) -> int:
        """KV blocks a sequence of this many tokens holds."""
        return -(-max(tokens, 1) // self.block_size)

    def _fits(self, blocks: int) -> bool:
        if self.max_seqs is not None and self.running >= self.max_seqs:
            return False
        # A sequence larger than the whole cache still runs once it is alone (vLLM would
        # preempt it; the simulator lets it through rather than hang).
        over = self.kv_blocks is not None and self.used_blocks + blocks > self.kv_blocks
        return not (over and self.running > 0)

    def _take(self, blocks: int) -> None:
        self.running += 1
        self.used_blocks += blocks

    async def acquire(self, blocks: int) -> None:
        """Wait for a seat for a sequence of `blocks` KV blocks."""
        if not self._line and self._fits(blocks):
            self._take(blocks)
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (blocks, waiter)
        self._line.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(blocks)  # seated just as the client left: give it back
            elif entry in self._line:
                self._line.remove(entry)
                self._wake()
            raise

    def release(self, blocks: int) -> None:
        """Give a seat back and seat whoever waits next, in order."""
        self.running -= 1
        self.used_blocks -= blocks
        self._wake()

    def _wake(self) -> None:
        while self._line and self._fits(self._line[0][0]):
            blocks, waiter = self._line.popleft()
            if waiter.done():
                continue
            self._take(blocks)
            waiter.set_result(None)

    @asynccontextmanager
    async def seat(self, tokens: int) -> AsyncGenerator[float, None]:
        """Hold a seat for a sequence of `tokens`; yields the milliseconds spent waiting."""
        if not self.limited:
            yield 0.0
            return
        blocks = self.blocks_for(tokens)
        started = time.perf_counter()
        await self.acquire(blocks)
        try:
            yield (time.perf_counter() - started) * 1000.0
        finally:
            self.release(blocks)


async def seated_events(
    seats: Seats, tokens: int, events: AsyncGenerator[bytes, None], record: RequestRecord
) -> AsyncGenerator[bytes, None]:
    """The events of a stream, generated only once it holds a seat (its pacing starts then)."""
    async with seats.seat(tokens) as waited, aclosing(events) as inner:
        record.queued_ms = waited
        async for event in inner:
            yield event
