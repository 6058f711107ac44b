"""Thinking budgets the backend cannot enforce, enforced on the stream by the gateway.

When a vLLM or SGLang route takes no per-request budget, the gateway watches the streamed
reasoning, stops the request when the budget is spent, and asks the model to answer with
vLLM's `continue_final_message`: the conversation plus an assistant message that holds
the reasoning so far, closed with the end-of-thinking marker. The chat template renders
that message as the open last turn (with `add_generation_prompt: false`), so the model
sees its thinking closed and continues with the answer. Templates such as Qwen3's split
`<think>...</think>` out of assistant content and re-render it the same way, which is
why the reasoning is wrapped exactly as they print it: `<think>\\n...\\n</think>\\n\\n`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.schema import Family

START_OF_THINKING = "<think>"
END_OF_THINKING = "</think>"


def needs_stream_enforcement(family: Family, route_supports_budget: bool) -> bool:
    """Whether the gateway must cut thinking on the stream (no hard cap in the backend).

    OpenAI hides reasoning and Anthropic enforces `budget_tokens` itself; vLLM and SGLang
    stream visible reasoning the gateway can count and stop.
    """
    return family in ("vllm", "sglang") and not route_supports_budget


def _thought(reasoning: str, start_marker: str, end_marker: str) -> str:
    text = reasoning.removeprefix(start_marker).strip("\n")
    return f"{start_marker}\n{text}\n{end_marker}\n\n"


def _remaining(body: Mapping[str, Any], reasoning_tokens: int) -> dict[str, int]:
    """The output caps less what the reasoning already used (at least one token)."""
    left: dict[str, int] = {}
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            left[key] = max(value - reasoning_tokens, 1)
    return left


def continuation_request(
    body: Mapping[str, Any],
    reasoning_so_far: str,
    end_marker: str = END_OF_THINKING,
    *,
    reasoning_tokens: int = 0,
    start_marker: str = START_OF_THINKING,
) -> dict[str, Any]:
    """Build the follow-up body that closes the thinking and asks for the answer.

    `reasoning_tokens` is how many tokens the cut reasoning used (counted by the caller from
    the stream); the output caps shrink by that much. A body that already continued an
    assistant message (prefill) has the closed reasoning appended to that message.
    """
    messages = [dict(m) if isinstance(m, dict) else m for m in body.get("messages") or []]
    last = messages[-1] if messages else None
    continuing = bool(body.get("continue_final_message"))
    if continuing and isinstance(last, dict) and last.get("role") == "assistant":
        content = last.get("content")
        prefix = content if isinstance(content, str) else ""
        opened = start_marker in prefix
        thought = _thought(reasoning_so_far, start_marker, end_marker)
        last["content"] = prefix + (thought.removeprefix(start_marker) if opened else thought)
    else:
        content = _thought(reasoning_so_far, start_marker, end_marker)
        messages.append({"role": "assistant", "content": content})
    follow_up = {k: v for k, v in body.items() if k != "thinking_token_budget"}
    follow_up.update(messages=messages, continue_final_message=True, add_generation_prompt=False)
    follow_up.update(_remaining(body, reasoning_tokens))
    return follow_up
