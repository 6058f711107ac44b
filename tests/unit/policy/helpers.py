"""Bodies, capability entries and the planner type shared by the policy tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.policy import Decision

Planner = Callable[..., Decision]

OPENAI_REASONING = {"supports_reasoning": True}
GPT5 = {
    "supports_reasoning": True,
    "supports_minimal_reasoning_effort": True,
    "supports_none_reasoning_effort": False,
    "supports_xhigh_reasoning_effort": False,
}
SONNET_45 = {"supports_reasoning": True, "max_output_tokens": 64000}
OPUS_47 = {
    "supports_reasoning": True,
    "supports_adaptive_thinking": True,
    "supports_xhigh_reasoning_effort": True,
    "supports_max_reasoning_effort": True,
}


def user_body(**fields: Any) -> dict[str, Any]:
    """A chat body whose last message is the user's, plus `fields`."""
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def tool_body(**fields: Any) -> dict[str, Any]:
    """A chat body whose last message is a tool result, plus `fields`."""
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    return {"model": "m", "messages": messages, **fields}
