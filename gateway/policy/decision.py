"""What `plan` decides for one request, and the draft it is built from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.backends import Enforcement
from gateway.policy.schema import (
    BreakerSettings,
    Effort,
    FallbackStep,
    Family,
    RetrySettings,
    Tier,
    Timeouts,
)


@dataclass(frozen=True, slots=True)
class Clamp:
    """One client value the policy lowered: which field, from what, to what, and why."""

    field: str
    original: Any
    new: Any
    reason: str


@dataclass(frozen=True, slots=True)
class Rejection:
    """A strict rule refused the request; `field` names the offending field or header."""

    field: str
    message: str


@dataclass(slots=True)
class Draft:
    """The decision under construction: top-level body edits, headers, clamps and notes."""

    body: Mapping[str, Any]
    set_fields: dict[str, Any] = field(default_factory=dict)
    remove: set[str] = field(default_factory=set)
    headers: dict[str, str] = field(default_factory=dict)
    clamps: list[Clamp] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejection: Rejection | None = None

    def current(self, key: str) -> Any:
        """The field's value as it will be sent: this draft's edit, else the client's."""
        if key in self.set_fields:
            return self.set_fields[key]
        return None if key in self.remove else self.body.get(key)

    def set(self, key: str, value: Any) -> None:
        """Send `value` for a top-level field; no edit when the client already sent it."""
        self.remove.discard(key)
        if key in self.body and self.body[key] == value:
            self.set_fields.pop(key, None)
        else:
            self.set_fields[key] = value

    def drop(self, key: str) -> None:
        """Remove a top-level field (a no-op when the client did not send it)."""
        self.set_fields.pop(key, None)
        if key in self.body:
            self.remove.add(key)

    def clamp(self, key: str, original: Any, new: Any, reason: str) -> None:
        """Record a lowered client value and send the new one."""
        self.clamps.append(Clamp(key, original, new, reason))

    def reject(self, key: str, message: str) -> None:
        """Refuse the request (the first rejection is kept)."""
        if self.rejection is None:
            self.rejection = Rejection(key, message)


@dataclass(frozen=True, slots=True)
class Decision:
    """The plan for one request: body edits, headers, tier, caps and recovery settings."""

    rule: str
    step_kind: str
    family: Family
    alias: str
    tier: Tier
    tier_requested: str | None
    set_fields: Mapping[str, Any]
    remove: frozenset[str]
    headers: Mapping[str, str]
    effort: Effort | None
    pin_effort: bool
    thinking_budget: int | None
    max_output_tokens: int | None
    stream_enforcement: bool
    can_continue: bool
    clamps: tuple[Clamp, ...]
    notes: tuple[str, ...]
    fallbacks: tuple[FallbackStep, ...]
    retry: RetrySettings
    breaker: BreakerSettings
    timeouts: Timeouts
    rejection: Rejection | None = None
    thinking_enforcement: Enforcement | None = None
    """Who holds `thinking_budget`: the backend, the gateway on the stream, or nobody (hint)."""

    @property
    def rejected(self) -> bool:
        return self.rejection is not None

    @property
    def closes_at_budget(self) -> bool:
        """Whether a stream cut at the budget ends there (`thinking_overrun: cut`).

        Otherwise a cut stream is continued for the answer (`continue_final_message`).
        """
        continues = self.family in ("vllm", "sglang") and self.can_continue
        return self.thinking_enforcement == "stream" and not continues

    def apply(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Return `body` with this decision's top-level edits (for display and tests)."""
        edited = {key: value for key, value in body.items() if key not in self.remove}
        edited.update(self.set_fields)
        return edited
