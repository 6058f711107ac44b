"""The interface every shared-state backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Protocol

# Money is kept as integer units of 1e-10 USD: exact, and atomic to add in Redis.
MONEY_UNITS = Decimal("1e10")


def to_units(amount: Decimal) -> int:
    """Dollars to integer units of 1e-10 USD (the ledger's precision)."""
    return int((amount * MONEY_UNITS).to_integral_value())


def from_units(units: int) -> Decimal:
    """Integer units back to dollars, exactly."""
    return (Decimal(units) / MONEY_UNITS).quantize(Decimal("1e-10"))


@dataclass(frozen=True, slots=True)
class StateHealth:
    """Where shared state lives now, for /readyz: `degraded` means per-process only."""

    backend: Literal["memory", "redis"]
    degraded: bool = False
    reason: str | None = None
    since: float | None = None  # wall-clock time the degradation began


class StateObserver(Protocol):
    """Told when shared state degrades or recovers, and of each call served locally."""

    def state_degraded(self, degraded: bool) -> None: ...

    def state_fallback(self, operation: str) -> None: ...


class SharedState(Protocol):
    """Counters and short-lived history that all replicas of a gateway must agree on."""

    async def add_task_cost(self, task_id: str, amount: Decimal, ttl_s: float) -> Decimal:
        """Add to a task's running cost and return the new total."""
        ...

    async def task_cost(self, task_id: str) -> Decimal:
        """The task's running cost (zero when unknown or expired)."""
        ...

    async def prefix_history(self, keys: list[str]) -> list[dict[str, Any]]:
        """Recent prefix records under each key, newest first, keys in the order given.

        A record kept under several keys is returned once, where it first appears.
        """
        ...

    async def remember_prefix(
        self, keys: list[str], record: dict[str, Any], ttl_s: float, keep: int
    ) -> None:
        """Push a record under each key, keeping the newest `keep`, expiring after `ttl_s`."""
        ...

    async def task_value(self, task_id: str, name: str) -> str | None:
        """A setting a task fixed on its first step (its pinned effort), if any."""
        ...

    async def pin_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> None:
        """Fix a task setting unless one is already fixed (the first step wins)."""
        ...

    async def forget_task_value(self, task_id: str, name: str) -> bool:
        """Drop a fixed setting (a deleted stored response); return whether one was held."""
        ...

    async def claim_task_value(self, task_id: str, name: str, value: str, ttl_s: float) -> str:
        """Fix a task setting unless one is fixed, atomically; return the one now in force.

        The value returned is `value` when this call fixed it (or it was already fixed to
        it), else the earlier one: how a task id stays with the team that first used it.
        """
        ...

    def health(self) -> StateHealth:
        """Which backend answers now, and why not Redis when it should."""
        ...

    async def aclose(self) -> None: ...
