"""Effort levels: their order, what each backend accepts, budgets, and per-task pinning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.policy.schema import EFFORTS, Effort, Family

EFFORT_BUDGETS: Mapping[Effort, int] = {
    "none": 0,
    "minimal": 512,
    "low": 1024,
    "medium": 4096,
    "high": 8192,
    "xhigh": 16384,
    "max": 32768,
}
"""Thinking tokens an effort level stands for where a backend caps tokens, not effort."""

_BASE_LEVELS: tuple[Effort, ...] = ("low", "medium", "high")
_FLAGGED_LEVELS: tuple[Effort, ...] = ("none", "minimal", "xhigh", "max")


def effort_rank(effort: Effort) -> int:
    """The effort's position, lowest first."""
    return EFFORTS.index(effort)


def as_effort(value: Any) -> Effort | None:
    """Return `value` as an effort level, or None when it is not one."""
    if isinstance(value, dict):
        value = value.get("effort")
    if isinstance(value, str) and value.lower() in EFFORTS:
        return EFFORTS[EFFORTS.index(value.lower())]
    return None


def supported_efforts(family: Family, capabilities: Mapping[str, Any]) -> tuple[Effort, ...]:
    """The effort levels the backend accepts, from litellm's map entry where it says."""
    listed = capabilities.get("reasoning_effort_levels")
    if isinstance(listed, list) and listed:
        return tuple(level for level in EFFORTS if level in listed)
    if family in ("vllm", "sglang"):
        # vLLM and SGLang take low/medium/high; "none" is enable_thinking=false.
        return ("none", *_BASE_LEVELS)
    if family == "other":
        return EFFORTS
    flagged = tuple(
        level for level in _FLAGGED_LEVELS if capabilities.get(f"supports_{level}_reasoning_effort")
    )
    if family == "anthropic" and not capabilities.get("thinking_always_on"):
        # "none" is thinking left off, which every Anthropic model but the always-on ones allow.
        flagged = ("none", *flagged)
    return tuple(level for level in EFFORTS if level in _BASE_LEVELS or level in flagged)


def nearest_supported(effort: Effort, supported: Sequence[Effort]) -> Effort:
    """The highest supported level at or below `effort`, else the lowest one above it.

    A thinking effort is never rounded down to "none": that would switch thinking off.
    """
    if not supported or effort in supported:
        return effort
    candidates = [level for level in supported if level != "none" or effort == "none"]
    below = [level for level in candidates if effort_rank(level) <= effort_rank(effort)]
    if below:
        return below[-1]
    above = [level for level in supported if effort_rank(level) > effort_rank(effort)]
    return (above or list(supported))[0]


def budget_for_effort(effort: Effort) -> int:
    """The thinking budget an effort level stands for (0 for none)."""
    return EFFORT_BUDGETS[effort]


def effort_for_budget(budget: int) -> Effort:
    """The highest effort whose budget fits in `budget` (at least minimal)."""
    fitting = [level for level in EFFORTS[1:] if EFFORT_BUDGETS[level] <= budget]
    return fitting[-1] if fitting else "minimal"


def pinned_effort(step_effort: Effort | None, task_effort: Effort | None) -> Effort | None:
    """The effort to use when effort is pinned per task: the task's first, else this step's.

    Providers render effort into the prompt, so changing it mid-task breaks the prompt cache.
    """
    return task_effort if task_effort is not None else step_effort


def client_effort(body: Mapping[str, Any]) -> Effort | None:
    """The effort the client asked for: `reasoning_effort`, or thinking switched off."""
    effort = as_effort(body.get("reasoning_effort"))
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
        return "none"
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "disabled":
        return "none"
    return effort
