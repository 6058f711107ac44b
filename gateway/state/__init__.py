"""State shared by gateway replicas: Redis when configured, in-process otherwise."""

from __future__ import annotations

from gateway.state.base import SharedState
from gateway.state.memory import MemoryState

__all__ = ["MemoryState", "SharedState", "open_state"]


async def open_state(redis_url: str | None, namespace: str = "farebox") -> SharedState:
    """Redis-backed state when a URL is given (checked with a ping), else in-process."""
    if not redis_url:
        return MemoryState()
    from gateway.state.redis import RedisState

    return await RedisState.connect(redis_url, namespace)
