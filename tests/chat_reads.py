"""A chat event source read by read, as `SseEvents` gives them (`batch`)."""

from __future__ import annotations


class Reads:
    """One list of SSE events per upstream read."""

    def __init__(self, *reads: list[bytes]) -> None:
        self.reads = list(reads)

    async def batch(self) -> list[bytes]:
        return self.reads.pop(0) if self.reads else []

    def __aiter__(self) -> Reads:  # pragma: no cover - the batches are read
        return self

    async def __anext__(self) -> bytes:  # pragma: no cover - the batches are read
        raise StopAsyncIteration
