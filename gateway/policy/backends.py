"""What each backend family accepts, and who holds a thinking budget: the rules in one place.

    family     effort field          hard budget field               budget held by
    openai     reasoning_effort      none (the effort stands in)     hint
    anthropic  thinking, effort (*)  thinking.budget_tokens          backend; adaptive: hint
    vllm       reasoning_effort      thinking_token_budget (**)      backend / stream / hint
    sglang     reasoning_effort      custom_params.thinking_budget   backend / stream / hint
                                     (***)
    other      reasoning_effort      none                            hint

(*) Anthropic routes go through litellm, which takes OpenAI-shaped input. A Messages API body
has no top-level `reasoning_effort` (Anthropic refuses unknown fields): budgeted models get
`thinking {type: enabled, budget_tokens}` written by the planner, adaptive ones (litellm's
own map entry says `supports_adaptive_thinking`) get `reasoning_effort`, which litellm turns
into `thinking {type: adaptive}` + `output_config.effort`. Anthropic refuses
`budget_tokens < 1024` and `budget_tokens >= max_tokens`.

(**) vLLM holds `thinking_token_budget` only with a reasoning parser configured; the route
says so with `supports_thinking_budget: true`.

(***) SGLang holds a per-request budget only when launched with `--enable-strict-thinking`
(`custom_params.thinking_budget`); `chat_template_kwargs.thinking_budget` is a chat-template
hint that a template may ignore. A route says it runs strict thinking with
`supports_thinking_budget: true`.

Where the backend holds no budget, the gateway can still hold it on a stream when the
backend continues a final assistant message (`supports_continue_final_message`, vLLM and
SGLang both can): it cuts the reasoning at the budget and asks for the answer
(`gateway/pipeline/thinking_cap.py`). A route with `thinking_overrun: cut` has a stream it
cannot continue ended at the budget instead (no answer, `finish_reason: length`).
Anywhere else the budget is only a hint, and Farebox says so (`thinking_enforcement:
hint`) instead of claiming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from gateway.policy.schema import Family

Enforcement = Literal["backend", "stream", "hint"]
"""Who holds a thinking budget: the backend, the gateway on the stream, or nobody."""

ANTHROPIC_MIN_BUDGET = 1024
"""Anthropic refuses `budget_tokens` below this."""

ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
"""Anthropic requires max_tokens; sent when neither the client nor the policy gives one."""

BUDGET_FIELDS: Mapping[Family, str] = {
    "openai": "reasoning_effort",  # OpenAI has no budget field; its effort stands in
    "vllm": "thinking_token_budget",
    "sglang": "chat_template_kwargs.thinking_budget",
    "anthropic": "thinking.budget_tokens",
    "other": "thinking_token_budget",
}
"""Where a client's own thinking budget is read from, per family."""

COUNTS_THINKING_IN_MAX_TOKENS: frozenset[Family] = frozenset({"vllm", "sglang", "anthropic"})
"""Families whose max-tokens field covers thinking too (a budget is added to answer caps)."""


def backend_holds_budget(family: Family, caps: Mapping[str, Any]) -> bool:
    """Whether the backend itself stops thinking at a per-request budget."""
    if family == "anthropic":
        return not caps.get("supports_adaptive_thinking")
    if family in ("vllm", "sglang"):
        return bool(caps.get("supports_thinking_budget"))
    return False


def stream_can_hold_budget(family: Family, caps: Mapping[str, Any]) -> bool:
    """Whether the gateway can cut reasoning on the stream and have the answer continued."""
    return family in ("vllm", "sglang") and bool(caps.get("supports_continue_final_message"))


def stream_can_cut_budget(family: Family) -> bool:
    """Whether the backend streams its reasoning visibly, so the gateway can count and cut it."""
    return family in ("vllm", "sglang", "anthropic")


def thinking_enforcement(
    family: Family,
    caps: Mapping[str, Any],
    budget: int | None,
    *,
    streamed: bool,
    cut: bool = False,
) -> Enforcement | None:
    """How the budget in force is held for this request; None when there is no budget.

    A whole (non-streamed) request on a backend without a hard cap is a hint: the gateway
    only cuts what it relays as a stream. With `cut` (a route's `thinking_overrun: cut`) a
    stream the backend cannot continue is ended at the budget instead.
    """
    if budget is None:
        return None
    if backend_holds_budget(family, caps):
        return "backend"
    if streamed and stream_can_hold_budget(family, caps):
        return "stream"
    if streamed and cut and stream_can_cut_budget(family):
        return "stream"
    return "hint"


def upstream_map_name(provider: str, model: str) -> str:
    """The name litellm looks a route's model up by: `provider/model`, or the bare model."""
    return model if provider == "openai" else f"{provider}/{model}"


def merged_capabilities(
    family: Family,
    entry: Mapping[str, Any],
    overrides: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """The model's map entry with `routing.<alias>.capabilities` over it.

    One override cannot hold: litellm decides from its own map entry whether an Anthropic
    model gets adaptive thinking, so a route claiming it for a model litellm does not know
    as adaptive would have its effort turned into a budget litellm picks. Budgeted thinking,
    written by the planner, is used instead.
    """
    caps = {**entry, **overrides}
    adaptive = caps.get("supports_adaptive_thinking")
    if family == "anthropic" and adaptive and not entry.get("supports_adaptive_thinking"):
        caps["supports_adaptive_thinking"] = False
        caps.setdefault("supports_reasoning", True)
        notes.append(
            "supports_adaptive_thinking ignored: litellm's map does not list this model as "
            "adaptive, so budgeted thinking is sent"
        )
    return caps
