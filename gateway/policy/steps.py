"""Which step of an agent loop a request is, from an explicit label or the body's last message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

USER_TURN = "user_turn"
"""The first request after new user input: the last message is the user's."""
TOOL_RESULT = "tool_result"
"""The model is called back with a tool's output: the last message is a tool (or function)."""
CONTINUATION = "continuation"
"""The model continues an assistant message it was given (prefill)."""
UNKNOWN = "unknown"
"""No messages, or only system/developer messages."""
_INSTRUCTIONS = ("system", "developer")
"""Roles skipped from the end: a mid-conversation system turn (Claude Code sends one after
the user's message) does not change what the step is."""

STEP_KINDS = (USER_TURN, TOOL_RESULT, CONTINUATION, UNKNOWN)


def _only_tool_results(content: Any) -> bool:
    """Whether a user message carries nothing but tool results (the Anthropic shape)."""
    if not isinstance(content, list) or not content:
        return False
    return all(isinstance(part, dict) and part.get("type") == "tool_result" for part in content)


def infer_step_kind(body: Mapping[str, Any], explicit: str | None = None) -> str:
    """Return the explicit step kind if given, else infer it from the last message."""
    if explicit and explicit.strip():
        return explicit.strip().lower()
    messages = body.get("messages")
    if not isinstance(messages, list):
        return UNKNOWN
    last = None
    for message in reversed(messages):  # a loop, not next() of a generator: per request
        if not isinstance(message, dict) or message.get("role") not in _INSTRUCTIONS:
            last = message
            break
    if not isinstance(last, dict):
        return UNKNOWN
    role = last.get("role")
    if role == "user":
        return TOOL_RESULT if _only_tool_results(last.get("content")) else USER_TURN
    if role in ("tool", "function"):
        return TOOL_RESULT
    if role == "assistant":
        return CONTINUATION
    return UNKNOWN
