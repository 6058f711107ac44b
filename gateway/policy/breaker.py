"""A circuit breaker per upstream, on an injected clock.

    closed --(N consecutive failures within the window)--> open
    open --(cool-down elapsed)--> half_open: one probe request is let through
    half_open --(probe succeeds)--> closed;  --(probe fails)--> open again

A probe that never reports back (its caller vanished) expires after another cool-down,
so a breaker cannot stay half-open forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from gateway.policy.schema import BreakerSettings

BreakerState = Literal["closed", "open", "half_open"]
Clock = Callable[[], float]


class CircuitBreaker:
    """Stops sending to an upstream that keeps failing, then probes it after a cool-down."""

    def __init__(self, settings: BreakerSettings, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._failures: list[float] = []
        self._opened_at: float | None = None
        self._probe_at: float | None = None

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.settings.cooldown_s:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether a request may go to this upstream now (in half-open: the one probe)."""
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        now = self._clock()
        if self._probe_at is not None and now - self._probe_at < self.settings.cooldown_s:
            return False
        self._probe_at = now
        return True

    def record_success(self) -> None:
        """A request succeeded: close the breaker and forget earlier failures."""
        self._failures.clear()
        self._opened_at = None
        self._probe_at = None

    def release(self) -> None:
        """A request ended with no word on the upstream (refused before sending): free the
        probe slot it may hold, so a bad request cannot keep the circuit from closing."""
        self._probe_at = None

    def record_failure(self) -> None:
        """A request failed: count it; open on the Nth in the window, or when a probe fails."""
        now = self._clock()
        if self._opened_at is not None:
            if self._probe_at is not None:
                self._open(now)  # the probe failed: another full cool-down
            return
        window_start = now - self.settings.window_s
        self._failures = [t for t in self._failures if t > window_start]
        self._failures.append(now)
        if len(self._failures) >= self.settings.failures:
            self._open(now)

    def _open(self, now: float) -> None:
        self._opened_at = now
        self._probe_at = None
        self._failures.clear()


class BreakerBoard:
    """One breaker per upstream key (a base URL, a provider), created on first use."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def get(self, key: str, settings: BreakerSettings) -> CircuitBreaker:
        """The breaker for `key`, created with `settings` the first time."""
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = CircuitBreaker(settings, self._clock)
        return breaker

    def find(self, key: str) -> CircuitBreaker | None:
        """The breaker for `key`, if a request has created it."""
        return self._breakers.get(key)

    def states(self) -> dict[str, BreakerState]:
        """Each known upstream's state, for metrics and health pages."""
        return {key: breaker.state for key, breaker in self._breakers.items()}
