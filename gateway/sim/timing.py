"""Two-phase latency: prefill pays for uncached prompt tokens, decode for each output token."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive

from gateway.sim.config import SimConfig, SimModel


@dataclass(frozen=True)
class Timing:
    """Planned durations for one request, known before the first byte is sent."""

    prefill_ms: float
    decode_ms_per_token: float
    output_tokens: int

    @property
    def decode_ms(self) -> float:
        """Return the total decode time."""
        return self.decode_ms_per_token * self.output_tokens

    def headers(self, cached_tokens: int) -> dict[str, str]:
        """Return the x-sim-* headers that let tests assert on timing without a clock."""
        return {
            "x-sim-prefill-ms": f"{self.prefill_ms:.3f}",
            "x-sim-decode-ms": f"{self.decode_ms:.3f}",
            "x-sim-cached-tokens": str(cached_tokens),
        }


def plan_timing(
    config: SimConfig, model: SimModel, tier: str, uncached_tokens: int, output_tokens: int
) -> Timing:
    """Return the planned durations for a request at a service tier."""
    prefill_rate, decode_rate = config.rates(model, tier)
    return Timing(uncached_tokens * prefill_rate, decode_rate, output_tokens)


class Pacer:
    """Sleeps to deadlines measured from the start, so per-chunk overhead does not add up."""

    def __init__(self, timing: Timing, clock: Callable[[], float] = time.monotonic) -> None:
        self.timing = timing
        self._clock = clock
        self._start = clock()

    async def _until(self, offset_ms: float) -> None:
        delay = self._start + offset_ms / 1000.0 - self._clock()
        # sleep(0) still yields, so a zero-latency stream lets other requests run.
        await asyncio.sleep(max(delay, 0.0))

    async def prefill(self) -> None:
        """Wait until the prompt has been processed."""
        await self._until(self.timing.prefill_ms)

    async def token(self, index: int) -> None:
        """Wait until output token number index (from 0) has been decoded."""
        await self._until(self.timing.prefill_ms + (index + 1) * self.timing.decode_ms_per_token)

    async def finish(self) -> None:
        """Wait until the whole answer has been generated."""
        await self._until(self.timing.prefill_ms + self.timing.decode_ms)


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has gone away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(work: Awaitable[Any], receive: Receive) -> bool:
    """Run work; return False (cancelling it) if the client disconnects first."""
    work_task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({work_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work_task, watcher):
            if not task.done():
                task.cancel()
        await asyncio.gather(work_task, watcher, return_exceptions=True)
    if work_task.cancelled():
        return False
    work_task.result()
    return True
