"""Injected failures: error statuses, slow answers and streams cut mid-way."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FaultMatch(BaseModel):
    """Which requests a fault applies to; an absent field matches anything."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    service_tier: str | None = None
    path: str | None = None

    def matches(self, path: str, models: set[str | None], tiers: set[str | None]) -> bool:
        """Return whether a request with these properties is selected."""
        if self.path is not None and self.path != path:
            return False
        if self.model is not None and self.model not in models:
            return False
        return self.service_tier is None or self.service_tier in tiers


class FaultSpec(BaseModel):
    """One injected fault, consumed once per matching request until its count runs out."""

    model_config = ConfigDict(extra="forbid")

    match: FaultMatch = Field(default_factory=FaultMatch)
    # None (or a 2xx) answers normally, after delay_s and subject to drop_after_chunks.
    status: int | None = Field(default=None, ge=100, le=599)
    count: int = Field(default=1, ge=1)
    body: Any = None
    headers: dict[str, str] = Field(default_factory=dict)
    delay_s: float = Field(default=0.0, ge=0)
    drop_after_chunks: int | None = Field(default=None, ge=0)
    # OpenAI route: the reply's `usage` object is replaced by this one, sent as given.
    usage: dict[str, Any] | None = None

    @property
    def is_error(self) -> bool:
        """Return whether the fault replaces the answer with an error status."""
        return self.status is not None and self.status >= 300


class FaultBook:
    """Registered faults in the order they were added."""

    def __init__(self) -> None:
        self._faults: list[FaultSpec] = []

    def add(self, fault: FaultSpec) -> None:
        """Register a fault."""
        self._faults.append(fault)

    def list(self) -> list[FaultSpec]:
        """Return the faults still armed."""
        return list(self._faults)

    def clear(self) -> None:
        """Disarm every fault."""
        self._faults.clear()

    def take(self, path: str, models: set[str | None], tiers: set[str | None]) -> FaultSpec | None:
        """Consume one count of the first fault matching the request and return it.

        models holds the name the request used and the served model's own name;
        tiers holds the service_tier sent and the name it resolves to.
        """
        for fault in self._faults:
            if fault.match.matches(path, models, tiers):
                fault.count -= 1
                if fault.count == 0:
                    self._faults.remove(fault)
                return fault
        return None
