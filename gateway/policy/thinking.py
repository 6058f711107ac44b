"""How much the model may think: the effort and thinking budget in force for one request.

Both are caps: a client asking for less keeps its value, one asking for more is clamped
(or rejected under `strict`), one asking nothing gets the rule's. `shape_thinking` then
fits the result to what the backend can express (its effort levels, Anthropic's minimum).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.policy.backends import (
    ANTHROPIC_MIN_BUDGET,
    BUDGET_FIELDS,
    COUNTS_THINKING_IN_MAX_TOKENS,
)
from gateway.policy.decision import Draft
from gateway.policy.effort import (
    budget_for_effort,
    client_effort,
    effort_for_budget,
    effort_rank,
    nearest_supported,
    supported_efforts,
)
from gateway.policy.facts import RequestFacts
from gateway.policy.schema import Effort, Family, RuleActions


@dataclass(frozen=True, slots=True)
class Thinking:
    """The thinking in force: effort to write, budget in tokens, and where the budget came from."""

    effort: Effort | None = None
    """The effort to send; None leaves the client's effort fields untouched."""
    budget: int | None = None
    """Thinking tokens allowed; None when nothing caps them."""
    write_budget: bool = False
    """Whether the gateway sends the budget (False: it is the client's own, already sent)."""
    source: str = ""
    """`rule`, `effort` (derived from the effort level) or `client`."""

    @property
    def off(self) -> bool:
        return self.effort == "none"


def client_budget(family: Family, body: Mapping[str, Any]) -> int | None:
    """The thinking budget the client sent, in its backend's dialect."""
    value: Any = None
    if family in ("vllm", "other"):
        value = body.get("thinking_token_budget")
    elif family == "sglang":
        # Strict thinking's hard budget first, else the chat-template hint.
        for holder in ("custom_params", "chat_template_kwargs"):
            fields = body.get(holder)
            value = fields.get("thinking_budget") if isinstance(fields, dict) else None
            if value is not None:
                break
    elif family == "anthropic":
        thinking = body.get("thinking")
        value = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def resolve_effort(
    draft: Draft, actions: RuleActions, facts: RequestFacts, rule: str
) -> Effort | None:
    """The effort in force: the task's pinned one, else the client's up to the rule's cap."""
    if actions.pin_effort_per_task and facts.task_effort is not None:
        draft.notes.append(f"effort pinned to the task's first step: {facts.task_effort}")
        return facts.task_effort
    cap, asked = actions.effort, client_effort(draft.body)
    if cap is None:
        # With pinning on, the client's own first effort is the one the task keeps.
        return asked if actions.pin_effort_per_task else None
    if asked is None or effort_rank(asked) <= effort_rank(cap):
        return asked or cap
    if actions.strict:
        draft.reject(
            "reasoning_effort",
            f"reasoning_effort '{asked}' is over '{cap}', the most rule '{rule}' allows; "
            f"send reasoning_effort '{cap}' or lower",
        )
    draft.clamp("reasoning_effort", asked, cap, f"effort cap of rule '{rule}'")
    return cap


def resolve_budget(
    draft: Draft, actions: RuleActions, family: Family, effort: Effort | None, rule: str
) -> Thinking:
    """The thinking budget in force, clamping a client's larger one."""
    if effort == "none" or (effort is None and client_effort(draft.body) == "none"):
        return Thinking(effort=effort)
    cap, source = actions.thinking_budget, "rule"
    if cap is None and effort is not None:
        cap, source = budget_for_effort(effort), "effort"
    asked = client_budget(family, draft.body)
    if cap is None or (asked is not None and asked <= cap):
        return Thinking(effort, asked, write_budget=False, source="client" if asked else "")
    if asked is not None:
        field = BUDGET_FIELDS[family]
        if actions.strict:
            draft.reject(
                field,
                f"{field} {asked} is over {cap}, the thinking budget rule '{rule}' allows; "
                f"send {cap} or less",
            )
        draft.clamp(field, asked, cap, f"thinking budget of rule '{rule}'")
    return Thinking(effort, cap, write_budget=True, source=source)


def resolve_thinking(
    draft: Draft, actions: RuleActions, facts: RequestFacts, family: Family, rule: str
) -> Thinking:
    """The effort and budget the rule allows for this request, before backend shaping."""
    effort = resolve_effort(draft, actions, facts, rule)
    return resolve_budget(draft, actions, family, effort, rule)


def _no_controls(draft: Draft, thinking: Thinking) -> Thinking:
    if thinking.effort is not None or thinking.source == "rule":
        draft.notes.append("the model does not reason (capabilities); effort and budget not sent")
    return Thinking()


def _fit_level(draft: Draft, effort: Effort, levels: tuple[Effort, ...]) -> Effort:
    fitted = nearest_supported(effort, levels)
    if fitted != effort:
        draft.notes.append(f"effort {effort} is not offered by this model; sending {fitted}")
    return fitted


def _shape_openai(draft: Draft, caps: Mapping[str, Any], thinking: Thinking) -> Thinking:
    if not caps.get("supports_reasoning"):
        return _no_controls(draft, thinking)
    effort = thinking.effort
    if thinking.source == "rule" and thinking.budget is not None:
        draft.notes.append("OpenAI takes no thinking budget; it is capped through the effort")
        if effort is None:
            effort = effort_for_budget(thinking.budget)
    if effort is None:
        return Thinking()
    return Thinking(effort=_fit_level(draft, effort, supported_efforts("openai", caps)))


def _shape_anthropic(draft: Draft, caps: Mapping[str, Any], thinking: Thinking) -> Thinking:
    if not (caps.get("supports_reasoning") or caps.get("supports_adaptive_thinking")):
        return _no_controls(draft, thinking)
    effort, levels = thinking.effort, supported_efforts("anthropic", caps)
    if effort == "none" and "none" not in levels:
        draft.notes.append("this model always thinks; effort none becomes the lowest effort")
        effort = next(level for level in levels if level != "none")
        thinking = replace(thinking, budget=None, write_budget=True, source="effort")
    if effort == "none":
        return Thinking(effort="none")
    if caps.get("supports_adaptive_thinking"):
        if effort is None and thinking.write_budget and thinking.budget is not None:
            effort = effort_for_budget(thinking.budget)
        if effort is None:
            return thinking
        effort = _fit_level(draft, effort, levels)
        if thinking.budget is not None and thinking.source != "effort":
            return Thinking(effort, thinking.budget, False, thinking.source)
        return Thinking(effort, budget_for_effort(effort), False, "effort")
    if effort is None and not thinking.write_budget:
        # A client's own reasoning_effort: this model has no such field (litellm would
        # pick a budget of its own), so it becomes the budget the effort stands for.
        asked = client_effort(draft.body)
        if asked is None or asked == "none" or thinking.budget is not None:
            return thinking
        effort = _fit_level(draft, asked, levels)
        thinking = replace(thinking, source="client")
    budget = thinking.budget or budget_for_effort(effort or "medium")
    if budget < ANTHROPIC_MIN_BUDGET:
        draft.notes.append(f"thinking budget {budget} raised to Anthropic's minimum 1024")
        budget = ANTHROPIC_MIN_BUDGET
    return Thinking(effort, budget, True, thinking.source or "effort")


def _shape_local(
    draft: Draft, family: Family, caps: Mapping[str, Any], thinking: Thinking
) -> Thinking:
    if caps.get("supports_reasoning") is False:
        return _no_controls(draft, thinking)
    if thinking.effort is None:
        return thinking
    return replace(
        thinking, effort=_fit_level(draft, thinking.effort, supported_efforts(family, caps))
    )


def shape_thinking(
    draft: Draft, family: Family, capabilities: Mapping[str, Any], thinking: Thinking
) -> Thinking:
    """Fit the effort and budget to what the backend accepts, noting each change."""
    if family == "openai":
        return _shape_openai(draft, capabilities, thinking)
    if family == "anthropic":
        return _shape_anthropic(draft, capabilities, thinking)
    if family == "other":
        if thinking.source == "rule":
            draft.notes.append("no known thinking-budget field for family other; effort only")
        return Thinking(effort=thinking.effort)
    return _shape_local(draft, family, capabilities, thinking)


def counted_tokens(family: Family, thinking: Thinking) -> int:
    """Thinking tokens the backend counts inside its max-tokens field, to add to answer caps."""
    if family not in COUNTS_THINKING_IN_MAX_TOKENS or thinking.off or thinking.budget is None:
        return 0
    return thinking.budget
