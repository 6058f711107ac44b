"""Whether a provider can cache this request at all, and what would make it cacheable.

Anthropic caches only at `cache_control` breakpoints (or the request's top-level
`cache_control`, its automatic caching); a request with neither writes and reads nothing,
however stable its prefix. Calling that `stable` hides money the client could save.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.segments import RequestSegments

NO_BREAKPOINTS = "no breakpoints"
FIX_NO_BREAKPOINTS = (
    "add cache_control to the last stable block, or enable the route's prefix action "
    "anthropic_cache_control"
)


@dataclass(frozen=True, slots=True)
class Uncacheable:
    """Why nothing of a request can be cached, and the action that would fix it."""

    reason: str
    fix: str

    @property
    def code(self) -> str:
        """The reason as one word, for ledger statuses and metric labels."""
        return self.reason.replace(" ", "_")


def uncacheable(request: RequestSegments, rule: CacheRule) -> Uncacheable | None:
    """Return why `request` cannot be cached under `rule`, or None when it can be."""
    if rule.family != "anthropic":
        return None  # OpenAI and vLLM cache a repeated prefix without markers
    if request.implicit_breakpoint or any(segment.breakpoint for segment in request.segments):
        return None
    return Uncacheable(NO_BREAKPOINTS, FIX_NO_BREAKPOINTS)
