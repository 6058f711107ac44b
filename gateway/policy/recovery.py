"""What to do after a failed attempt: retry the same target, fall back, or give up.

Only the pure part lives here. The caller enforces the one hard rule: nothing is retried
or sent elsewhere once the first byte has reached the client. Order of preference:

    1. a fallback step that lists the failure (flex refused with 429: go to standard now)
    2. a retry of the same target, with jittered exponential backoff
    3. a fallback step marked `after_retries` (hosted still down after retries: go local)
    4. give up and return the upstream's error
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.policy.schema import FallbackStep, RetrySettings, Tier

Status = int | str
"""An HTTP status, or `connect`, `timeout`, `circuit_open` when there was no response."""


class RandomSource(Protocol):
    """Anything with `random() -> float` in [0, 1): `random.Random`, or a fake in tests."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Target:
    """Where an attempt goes: a model alias at a speed tier."""

    alias: str
    tier: Tier


@dataclass(frozen=True, slots=True)
class Attempt:
    """The next attempt on the same target: its 1-based number and how long to wait first."""

    number: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class Recovery:
    """After a failure: retry or fall back (to `target`, after `delay_s`), or give up."""

    action: Literal["retry", "fallback", "give_up"]
    target: Target | None = None
    delay_s: float = 0.0
    attempt: int = 1


def next_fallback(
    steps: Sequence[FallbackStep],
    current: Target,
    status: Status,
    tried: Collection[Target] = (),
    *,
    after_retries: bool | None = None,
) -> Target | None:
    """The first step's target that applies to this failure and has not been tried yet."""
    for step in steps:
        if after_retries is not None and step.after_retries != after_retries:
            continue
        if step.from_tier is not None and step.from_tier != current.tier:
            continue
        if status not in step.statuses:
            continue
        target = Target(step.alias or current.alias, step.tier or current.tier)
        if target != current and target not in tried:
            return target
    return None


class Retrier:
    """Retry decisions with jittered exponential backoff; the random source is injected."""

    def __init__(self, settings: RetrySettings, rng: RandomSource | None = None) -> None:
        self.settings = settings
        self._rng: RandomSource = rng if rng is not None else random.Random()

    def ceiling_s(self, attempt_no: int) -> float:
        """The longest wait after failed attempt `attempt_no`: base doubled each time, capped."""
        return min(self.settings.max_s, self.settings.base_s * 2 ** (attempt_no - 1))

    def delay_s(self, attempt_no: int) -> float:
        """A wait in [ceiling/2, ceiling]: "equal jitter", spread out but never near zero."""
        ceiling = self.ceiling_s(attempt_no)
        return ceiling / 2 + self._rng.random() * ceiling / 2

    def next_attempt(
        self, attempt_no: int, error_status: Status, retry_after_s: float | None = None
    ) -> Attempt | None:
        """The retry after failed attempt `attempt_no` (1 = first try), or None to stop."""
        if error_status not in self.settings.statuses or attempt_no > self.settings.attempts:
            return None
        delay = self.delay_s(attempt_no)
        if retry_after_s is not None:
            if retry_after_s > self.settings.max_s:
                return None  # the upstream asks for longer than we wait; fall back instead
            delay = max(delay, retry_after_s)
        return Attempt(attempt_no + 1, delay)


def recover(
    steps: Sequence[FallbackStep],
    retrier: Retrier,
    current: Target,
    attempt_no: int,
    status: Status,
    tried: Collection[Target] = (),
    retry_after_s: float | None = None,
) -> Recovery:
    """Decide what follows failed attempt `attempt_no` on `current` (see the module docstring)."""
    moved = next_fallback(steps, current, status, tried, after_retries=False)
    if moved is not None:
        return Recovery("fallback", moved)
    attempt = retrier.next_attempt(attempt_no, status, retry_after_s)
    if attempt is not None:
        return Recovery("retry", current, attempt.delay_s, attempt.number)
    moved = next_fallback(steps, current, status, tried, after_retries=True)
    if moved is not None:
        return Recovery("fallback", moved)
    return Recovery("give_up")
