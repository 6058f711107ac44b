"""Write the thinking in force in each backend's own fields, as top-level body edits.

openai     reasoning_effort
anthropic  (litellm's OpenAI-shaped input) reasoning_effort for adaptive models,
           thinking {type: enabled, budget_tokens} (>= 1024, < max_tokens) otherwise;
           never a top-level reasoning_effort beside budgeted thinking
vllm       reasoning_effort, thinking_token_budget, chat_template_kwargs.enable_thinking
sglang     reasoning_effort, chat_template_kwargs {enable_thinking, thinking_budget},
           custom_params.thinking_budget where the server runs strict thinking
other      reasoning_effort

The rules per family (which field exists, who holds a budget) are in `backends`.

Anthropic's `1024 <= budget_tokens < max_tokens`, whoever set either value: the planner
never raises a client's max_tokens (it is the whole output the client agreed to pay for,
thinking included), so a budget that does not fit is lowered to max_tokens - 1, or, when
max_tokens leaves no room for the 1024 minimum, thinking is switched off. Both are clamps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.backends import ANTHROPIC_MIN_BUDGET
from gateway.policy.decision import Draft
from gateway.policy.schema import Family
from gateway.policy.thinking import Thinking


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


def _write_sglang(draft: Draft, caps: Mapping[str, Any], thinking: Thinking) -> int | None:
    if thinking.off:
        _template_kwargs(draft, {"enable_thinking": False})
        return None
    if thinking.effort is not None:
        draft.set("reasoning_effort", thinking.effort)
    if thinking.write_budget and thinking.budget is not None:
        _template_kwargs(draft, {"thinking_budget": thinking.budget})  # a template hint
        if caps.get("supports_thinking_budget"):
            # Held by SGLang's strict thinking (--enable-strict-thinking), per request.
            current = draft.body.get("custom_params")
            merged = dict(current) if isinstance(current, dict) else {}
            draft.set("custom_params", {**merged, "thinking_budget": thinking.budget})
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


def _anthropic_fit(draft: Draft, max_tokens: int | None) -> int | None:
    """Fit the budgeted thinking about to be sent under max_tokens; the budget in force."""
    thinking = draft.current("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        return None
    fitted = max(budget, ANTHROPIC_MIN_BUDGET)
    if max_tokens is not None and fitted >= max_tokens:
        if max_tokens <= ANTHROPIC_MIN_BUDGET:
            draft.clamp(
                "thinking",
                thinking,
                None,
                f"max_tokens {max_tokens} leaves no room for Anthropic's minimum thinking "
                f"budget of {ANTHROPIC_MIN_BUDGET}; thinking left off",
            )
            draft.drop("thinking")
            if "thinking" in draft.body:
                draft.set("thinking", {"type": "disabled"})
            return None
        fitted = max_tokens - 1
    if fitted != budget:
        reason = f"Anthropic needs {ANTHROPIC_MIN_BUDGET} <= budget_tokens < max_tokens"
        draft.clamp("thinking.budget_tokens", budget, fitted, reason)
        draft.set("thinking", {**thinking, "budget_tokens": fitted})
    _sampling_for_thinking(draft)
    return fitted


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
    if draft.current("reasoning_effort") is not None:
        # litellm would map it to a budget of its own (or pass it on as a field Anthropic
        # refuses); budgeted thinking is written below instead.
        draft.drop("reasoning_effort")
        draft.notes.append("reasoning_effort not sent: this model takes thinking.budget_tokens")
    if thinking.write_budget and thinking.budget is not None:
        draft.set("thinking", {"type": "enabled", "budget_tokens": thinking.budget})
    return _anthropic_fit(draft, max_tokens)


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
        return _write_sglang(draft, capabilities, thinking)
    if thinking.effort is not None:
        draft.set("reasoning_effort", thinking.effort)
    return None
