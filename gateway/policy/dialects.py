"""Write the thinking in force in each backend's own fields, as top-level body edits.

openai     reasoning_effort
anthropic  (litellm's OpenAI-shaped input) reasoning_effort for adaptive models,
           thinking {type: enabled, budget_tokens} (>= 1024, < max_tokens) otherwise
vllm       reasoning_effort, thinking_token_budget, chat_template_kwargs.enable_thinking
sglang     reasoning_effort, chat_template_kwargs {enable_thinking, thinking_budget}
other      reasoning_effort
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.decision import Draft
from gateway.policy.schema import Family
from gateway.policy.thinking import ANTHROPIC_MIN_BUDGET, Thinking


def _template_kwargs(draft: Draft, changes: Mapping[str, Any]) -> None:
    """Merge `changes` into the client's chat_template_kwargs and send the whole object."""
    current = draft.body.get("chat_template_kwargs")
    merged = dict(current) if isinstance(current, dict) else {}
    merged.update(changes)
    draft.set("chat_template_kwargs", merged)


def _write_vllm(draft: Draft, caps: Mapping[str, Any], thinking: Thinking) -> int | None:
    if thinking.off:
        _template_kwargs(draft, {"enable_thinking": False})
        return None
    if thinking.effort is not None:
        draft.set("reasoning_effort", thinking.effort)
    # Without per-request budgets the field would be ignored; the stream enforces it then.
    sendable = caps.get("supports_thinking_budget") or "thinking_token_budget" in draft.body
    if thinking.write_budget and thinking.budget is not None and sendable:
        draft.set("thinking_token_budget", thinking.budget)
    return thinking.budget


def _write_sglang(draft: Draft, thinking: Thinking) -> int | None:
    if thinking.off:
        _template_kwargs(draft, {"enable_thinking": False})
        return None
    if thinking.effort is not None:
        draft.set("reasoning_effort", thinking.effort)
    if thinking.write_budget and thinking.budget is not None:
        _template_kwargs(draft, {"thinking_budget": thinking.budget})
    return thinking.budget


def _sampling_for_thinking(draft: Draft) -> None:
    """Anthropic refuses temperature other than 1 and any top_k while thinking."""
    temperature = draft.current("temperature")
    if temperature is not None and temperature != 1:
        draft.drop("temperature")
        draft.notes.append(f"temperature {temperature} removed: Anthropic thinking needs 1")
    if draft.current("top_k") is not None:
        draft.drop("top_k")
        draft.notes.append("top_k removed: Anthropic refuses it while thinking")


def _anthropic_off(draft: Draft, caps: Mapping[str, Any]) -> None:
    draft.drop("reasoning_effort")
    if caps.get("thinking_on_by_default") or draft.body.get("thinking") is not None:
        draft.set("thinking", {"type": "disabled"})
    else:
        draft.drop("thinking")


def _anthropic_budget(draft: Draft, budget: int, max_tokens: int | None) -> int | None:
    """Fit `budget_tokens` under max_tokens; None when Anthropic's minimum cannot fit."""
    if max_tokens is None or budget < max_tokens:
        return budget
    if max_tokens <= ANTHROPIC_MIN_BUDGET:
        draft.notes.append(
            f"max_tokens {max_tokens} leaves no room for Anthropic's minimum thinking budget "
            f"of {ANTHROPIC_MIN_BUDGET}; thinking left off"
        )
        return None
    draft.notes.append(f"thinking budget {budget} lowered to {max_tokens - 1}: under max_tokens")
    return max_tokens - 1


def _write_anthropic(
    draft: Draft, caps: Mapping[str, Any], thinking: Thinking, max_tokens: int | None
) -> int | None:
    if thinking.off:
        _anthropic_off(draft, caps)
        return None
    if caps.get("supports_adaptive_thinking") and thinking.effort is not None:
        # litellm turns reasoning_effort into thinking {type: adaptive} + output_config.effort.
        draft.set("reasoning_effort", thinking.effort)
        client = draft.body.get("thinking")
        if isinstance(client, dict) and client.get("type") != "adaptive":
            draft.drop("thinking")
        _sampling_for_thinking(draft)
        return thinking.budget
    if not thinking.write_budget or thinking.budget is None:
        return thinking.budget
    budget = _anthropic_budget(draft, thinking.budget, max_tokens)
    draft.drop("reasoning_effort")  # litellm would map it to its own budget, over ours
    if budget is None:
        draft.drop("thinking")
        return None
    draft.set("thinking", {"type": "enabled", "budget_tokens": budget})
    _sampling_for_thinking(draft)
    return budget


def write_thinking(
    draft: Draft,
    family: Family,
    capabilities: Mapping[str, Any],
    thinking: Thinking,
    max_tokens: int | None,
) -> int | None:
    """Write the thinking fields for `family`; return the thinking budget finally in force."""
    if family == "anthropic":
        return _write_anthropic(draft, capabilities, thinking, max_tokens)
    if family == "vllm":
        return _write_vllm(draft, capabilities, thinking)
    if family == "sglang":
        return _write_sglang(draft, thinking)
    if thinking.effort is not None:
        draft.set("reasoning_effort", thinking.effort)
    return None
