"""What the policy knows about a request besides its body: who, which model, which headers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.policy.schema import Effort

TAGS_HEADER = "x-farebox-tags"
TIER_HEADER = "x-speed-tier"
STEP_KIND_HEADER = "x-task-step-kind"
TEAM_HEADER = "x-farebox-team"
PROJECT_HEADER = "x-farebox-project"
SERVED_TIER_HEADER = "x-farebox-tier"
"""The response header that echoes the tier a request was served at (set by the caller)."""


def parse_tags(value: str | None) -> frozenset[str]:
    """Split `X-Farebox-Tags: a, b` into lower-case tags."""
    if not value:
        return frozenset()
    return frozenset(tag.strip().lower() for tag in value.split(",") if tag.strip())


class LoweredHeaders(dict[str, str]):
    """A fresh copy of headers whose names are lower-case: `RequestFacts` keeps it as it is.

    `facts_of` and `from_headers` lower the names and then built the facts, whose
    `__post_init__` copied and checked them all again.
    """

    __slots__ = ()


def lowered_headers(headers: Mapping[str, str]) -> LoweredHeaders:
    """A copy of `headers` with lower-case names (of two spellings, the last one's value).

    Names from an ASGI server are lower-case already: then a plain copy (a C loop, not a
    Python one calling `lower()` per name).
    """
    if all(map(str.islower, headers)):
        return LoweredHeaders(headers)
    return LoweredHeaders({name.lower(): value for name, value in headers.items()})


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """The caller, the model alias asked for, the headers, and the task's pinned effort."""

    alias: str
    caller: str | None = None
    team: str | None = None
    project: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    step_kind: str | None = None
    task_effort: Effort | None = None
    """The effort this task already used, looked up by the caller; None on a task's first step."""

    def __post_init__(self) -> None:
        # Header names are case-insensitive; matching compares lower-case names only.
        if not isinstance(self.headers, LoweredHeaders):  # else lowered and copied already
            object.__setattr__(self, "headers", lowered_headers(self.headers))

    @property
    def tags(self) -> frozenset[str]:
        return parse_tags(self.headers.get(TAGS_HEADER))

    @property
    def tier_header(self) -> str | None:
        """The speed tier the client asked for in `X-Speed-Tier`, lower-cased."""
        value = self.headers.get(TIER_HEADER, "").strip().lower()
        return value or None

    @classmethod
    def from_headers(
        cls,
        alias: str,
        headers: Mapping[str, str],
        *,
        caller: str | None = None,
        task_effort: Effort | None = None,
    ) -> RequestFacts:
        """Build facts from request headers: team, project and explicit step kind included."""
        lowered = lowered_headers(headers)
        return cls(
            alias=alias,
            caller=caller,
            team=lowered.get(TEAM_HEADER) or None,
            project=lowered.get(PROJECT_HEADER) or None,
            headers=lowered,
            step_kind=lowered.get(STEP_KIND_HEADER) or None,
            task_effort=task_effort,
        )
