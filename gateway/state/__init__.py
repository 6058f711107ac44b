"""State shared by gateway replicas: Redis when configured (per-process while it is away)."""

from __future__ import annotations

from gateway.settings import RedisLimits
from gateway.state.base import SharedState, StateHealth, StateObserver
from gateway.state.memory import MemoryState

__all__ = ["MemoryState", "SharedState", "StateHealth", "StateObserver", "open_state"]


async def open_state(
    redis_url: str | None,
    namespace: str = "farebox",
    limits: RedisLimits | None = None,
    observer: StateObserver | None = None,
) -> SharedState:
    """Redis with a per-process fallback when a URL is given (it need not answer yet)."""
    if not redis_url:
        return MemoryState()
    from gateway.state.fallback import FallbackState

    return await FallbackState.connect(redis_url, namespace, limits or RedisLimits(), observer)
