"""Where to put Anthropic `cache_control` breakpoints, and putting them there.

Anthropic caches only at explicit breakpoints, at most four per request. The useful ones are
the last stable boundaries: after the tools, after the system prompt, after the last message
before the newest turn, and at the very end, which the next agent step will read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.prefix.segments import (
    RequestSegments,
    Segment,
    SegmentKind,
    leading_system_count,
    message_index,
)

EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
MAX_ANTHROPIC_BREAKPOINTS = 4


def anthropic_cache_breakpoints(
    segments: Sequence[Segment],
    stable_count: int,
    *,
    cumulative_tokens: Sequence[int] = (),
    min_tokens: int = 0,
) -> list[int]:
    """Return segment indices to close with a `cache_control` breakpoint (at most four).

    Candidates, latest first: the end of the prompt, the last stable message, the system
    prompt, the tools. Breakpoints the client already set count against the four, and a
    boundary below the model's minimum is skipped: it would never be written.
    """
    existing = [i for i, s in enumerate(segments) if s.breakpoint]
    budget = MAX_ANTHROPIC_BREAKPOINTS - len(existing)
    candidates = [len(segments) - 1, stable_count - 1, *_header_positions(segments)]
    chosen: list[int] = []
    for position in candidates:
        if len(chosen) >= budget or position < 0 or position in chosen or position in existing:
            continue
        if not _can_carry(segments[position]):
            continue
        if cumulative_tokens and cumulative_tokens[position] < min_tokens:
            continue
        chosen.append(position)
    return sorted(chosen)


def _header_positions(segments: Sequence[Segment]) -> list[int]:
    wanted = (SegmentKind.SYSTEM, SegmentKind.TOOLS)
    return [i for kind in wanted for i, s in enumerate(segments) if s.kind is kind]


def _can_carry(segment: Segment) -> bool:
    """Return whether a breakpoint can be placed on this segment's content."""
    if segment.kind is SegmentKind.MESSAGE:
        return segment.role != "assistant" or b'"content":"' in segment.data
    if segment.kind in (SegmentKind.SYSTEM, SegmentKind.TOOLS):
        return segment.data not in (b"null", b"[]")
    return False


def apply_breakpoints(
    body: Mapping[str, Any], request: RequestSegments, positions: Sequence[int]
) -> tuple[dict[str, Any], list[str]]:
    """Return `body` with `cache_control` on the chosen segments, and the fields changed."""
    out = dict(body)
    changed: list[str] = []
    messages = list(body.get("messages") or [])
    system_count = leading_system_count(messages)
    for position in positions:
        segment = request.segments[position]
        if segment.kind is SegmentKind.TOOLS and isinstance(body.get("tools"), list):
            tools = list(body["tools"])
            tools[-1] = {**tools[-1], "cache_control": dict(EPHEMERAL)}
            out["tools"] = tools
            _note(changed, "tools")
            continue
        is_system = segment.kind is SegmentKind.SYSTEM
        index = system_count - 1 if is_system else message_index(segment.name)
        if index is None or not 0 <= index < len(messages):
            continue
        marked = _marked(messages[index])
        if marked is not None:
            messages[index] = marked
            out["messages"] = messages
            _note(changed, "messages")
    return out, changed


def _note(changed: list[str], field: str) -> None:
    if field not in changed:
        changed.append(field)


def _marked(message: Any) -> dict[str, Any] | None:
    """Return the message with a breakpoint on its last content part, or None if it has none."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str) and content:
        part: dict[str, Any] = {"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}
        return {**message, "content": [part]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        parts = [*content[:-1], {**content[-1], "cache_control": dict(EPHEMERAL)}]
        return {**message, "content": parts}
    return None
