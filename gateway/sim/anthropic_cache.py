"""Anthropic's explicit prompt caching: breakpoints write, earlier boundaries read.

Only the prefix that ends at a ``cache_control`` breakpoint is written. A later
request reads the longest previously written prefix that it repeats, checked at
its own content-block boundaries up to 20 blocks before each breakpoint. Tokens
from that read up to the request's last breakpoint are billed as cache writes;
the rest of the prompt is ordinary input.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.sim.prefix_cache import BlockKey, TokenChain

LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


@dataclass(frozen=True)
class Breakpoint:
    """A cache_control marker: the index of the content block it closes, and its TTL."""

    boundary: int
    ttl: str = "5m"


@dataclass(frozen=True)
class CacheUsage:
    """How one request's prompt divides into cache reads, cache writes and plain input."""

    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def written(self) -> int:
        """Return all cache-write tokens, whatever their TTL."""
        return self.write_5m + self.write_1h


class BreakpointCache:
    """Written prefixes with expiry times; a read refreshes the entry's TTL."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: dict[BlockKey, tuple[float, float]] = {}

    def clear(self) -> None:
        """Forget every written prefix."""
        self._entries.clear()

    def _alive(self, key: BlockKey, now: float) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return False
        if entry[0] < now:
            del self._entries[key]
            return False
        return True

    def _touch(self, key: BlockKey, ttl_seconds: float, now: float) -> None:
        old_ttl = self._entries.get(key, (0.0, 0.0))[1]
        ttl = max(ttl_seconds, old_ttl)
        self._entries[key] = (now + ttl, ttl)

    def apply(
        self,
        chain: TokenChain,
        boundaries: Sequence[int],
        breakpoints: Sequence[Breakpoint],
        min_tokens: int,
    ) -> CacheUsage:
        """Read the longest cached prefix, write every breakpoint past it, and split the usage."""
        if not breakpoints:
            return CacheUsage()
        now = self._clock()
        key_at = chain.key_at
        read = self._longest_read(key_at, boundaries, breakpoints, now)
        writes = [bp for bp in breakpoints if boundaries[bp.boundary] >= min_tokens]
        for bp in writes:
            self._touch(key_at(boundaries[bp.boundary]), TTL_SECONDS[bp.ttl], now)
        return _split_usage(read, [(boundaries[bp.boundary], bp.ttl) for bp in writes])

    def _longest_read(
        self,
        key_at: Callable[[int], BlockKey],
        boundaries: Sequence[int],
        breakpoints: Sequence[Breakpoint],
        now: float,
    ) -> int:
        candidates: set[int] = set()
        for bp in breakpoints:
            low = max(bp.boundary - LOOKBACK_BLOCKS + 1, 0)
            candidates.update(range(low, bp.boundary + 1))
        for index in sorted(candidates, reverse=True):
            position = boundaries[index]
            key = key_at(position)
            if position > 0 and self._alive(key, now):
                self._touch(key, self._entries[key][1], now)
                return position
        return 0


def _split_usage(read: int, writes: Sequence[tuple[int, str]]) -> CacheUsage:
    """Bill tokens after the read up to the last breakpoint as writes, 1h ones first."""
    ends = [end for end, _ in writes if end > read]
    if not ends:
        return CacheUsage(read=read)
    last = max(ends)
    ends_1h = [end for end, ttl in writes if ttl == "1h" and end > read]
    # Anthropic requires 1h breakpoints before 5m ones, so the 1h span comes first.
    write_1h = max(ends_1h) - read if ends_1h else 0
    return CacheUsage(read=read, write_5m=last - read - write_1h, write_1h=write_1h)
