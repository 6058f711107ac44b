"""The policy keys of the configuration: `defaults:`, `rules:` and `routing:`.

defaults:                       # what every request gets; rules override field by field
  max_tokens: {default: 2048, ceiling: 8192}
  effort: medium
rules:                          # the FIRST rule whose `match` fits wins
  - name: agent-tool-steps
    match: {step: tool_result, tags: [agent]}
    effort: low
    thinking_budget: 1024
    pin_effort_per_task: true
    tier: {choose: flex, forbid: [priority, fast]}
routing:                        # per model alias: the exact name, else the first glob
  gpt-main:
    tiers: {fast: {alias: gpt-main-dedicated}}
    fallbacks:
      - {from_tier: flex, statuses: [429, 503], tier: standard}
      - {statuses: [502, 503, connect], alias: local-qwen, after_retries: true}
    retry: {attempts: 2, base_s: 0.25, max_s: 8}
    breaker: {failures: 5, window_s: 30, cooldown_s: 15}
    timeouts: {connect_s: 5, first_token_s: 120, idle_s: 60}
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = get_args(Effort)
"""Every effort level, lowest first: the order clamps compare by."""

Tier = Literal["flex", "standard", "priority", "fast", "batch", "ultrafast"]
TIERS: tuple[Tier, ...] = get_args(Tier)

# Mirrors gateway.config.Family; not imported because the config embeds this package.
Family = Literal["openai", "vllm", "sglang", "anthropic", "other"]
FAMILIES: tuple[Family, ...] = get_args(Family)

NoResponse = Literal["connect", "timeout", "circuit_open"]
"""Failures without an HTTP status: no connection, a timeout, or an open breaker."""

FailureStatus = Annotated[int, Field(ge=400, le=599)] | NoResponse


def _statuses(*values: int | NoResponse) -> list[int | NoResponse]:
    return list(values)


POLICY_KEYS = ("defaults", "rules", "routing")
"""The top-level configuration keys this package owns."""


def _as_list(value: Any) -> Any:
    """Accept one pattern for a list of them; YAML numbers (`x-version: 2`) match as text."""
    items = value if isinstance(value, list) else [value]
    return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in items]


Patterns = Annotated[list[str], BeforeValidator(_as_list)]
"""One glob or a list of them (`*`, `?`, `[seq]`); a value matches if any pattern does."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _yaml_booleans(cls, data: Any) -> Any:
        # YAML 1.1 reads an unquoted `on:`, `yes:` or `no:` key as a boolean.
        if isinstance(data, dict) and any(isinstance(key, bool) for key in data):
            raise ValueError(
                "a key reads as a boolean (YAML turns on/off/yes/no into true/false); "
                "quote it, or for status lists write `statuses:`"
            )
        return data


class MaxTokens(_Section):
    """The answer-length cap: set when the client sent none, clamped when it asked more."""

    default: int | None = Field(default=None, ge=1, description="Sent when the client sent none.")
    ceiling: int | None = Field(default=None, ge=1, description="The most a client may ask for.")

    @model_validator(mode="after")
    def _default_under_ceiling(self) -> MaxTokens:
        if self.default is not None and self.ceiling is not None and self.default > self.ceiling:
            raise ValueError(f"default ({self.default}) is over the ceiling ({self.ceiling})")
        return self


class TierRule(_Section):
    """Which speed tier a request may use: forced, forbidden, or chosen when none was asked."""

    force: Tier | None = None
    choose: Tier | None = Field(default=None, description="Used when the client asked none.")
    forbid: list[Tier] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TierRule:
        for key in ("force", "choose"):
            if getattr(self, key) in self.forbid:
                raise ValueError(f"{key}: {getattr(self, key)} is also in forbid")
        # batch and ultrafast are served only where a route offers them: not a fallback.
        if set(self.forbid) >= set(TIERS) - {"batch", "ultrafast"}:
            raise ValueError("forbid lists every tier; leave at least one allowed")
        return self


class RuleActions(_Section):
    """What a rule decides; a field the rule leaves out is taken from `defaults`."""

    max_tokens: MaxTokens | None = None
    effort: Effort | None = Field(default=None, description="The highest effort allowed.")
    thinking_budget: int | None = Field(
        default=None, ge=1, description="The most thinking tokens per request."
    )
    pin_effort_per_task: bool | None = Field(
        default=None, description="Keep the first step's effort for the whole task."
    )
    strict: bool | None = Field(
        default=None, description="Reject a request over a cap instead of clamping it."
    )
    tier: TierRule | None = None

    def over(self, base: RuleActions) -> RuleActions:
        """Return these actions with every field left unset taken from `base`."""
        values: dict[str, Any] = {}
        for name in RuleActions.model_fields:
            mine, theirs = getattr(self, name), getattr(base, name)
            if name not in self.model_fields_set:
                values[name] = theirs
            elif isinstance(mine, BaseModel) and isinstance(theirs, BaseModel):
                # One level deeper too: `max_tokens: {default: 512}` keeps the default ceiling.
                values[name] = theirs.model_copy(
                    update={key: getattr(mine, key) for key in mine.model_fields_set}
                )
            else:
                values[name] = mine
        return RuleActions.model_construct(**values)


class Match(_Section):
    """When a rule applies: every condition given must hold (an empty match always holds)."""

    caller: Patterns | None = Field(default=None, description="Hashed key ids (key-...).")
    team: Patterns | None = None
    project: Patterns | None = None
    model: Patterns | None = Field(default=None, description="Model aliases, globs allowed.")
    step: Patterns | None = Field(default=None, description="user_turn, tool_result, ...")
    headers: dict[str, Patterns] = Field(
        default_factory=dict, description="Header name (any case) to value globs."
    )
    tags: list[str] = Field(
        default_factory=list, description="All of these must be in X-Farebox-Tags."
    )


class Rule(RuleActions):
    """One reviewed line of policy: a match and what to do with matching requests."""

    name: str | None = None
    match: Match = Field(default_factory=Match)

    def label(self, index: int) -> str:
        """Return the rule's name, or `rules[i]` when it has none."""
        return self.name or f"rules[{index}]"


class TierTarget(_Section):
    """How an alias serves one tier: another alias (a pool), body fields and headers."""

    enabled: bool = Field(default=True, description="false withdraws a tier the family offers.")
    alias: str | None = Field(default=None, description="Serve this tier from another alias.")
    set: dict[str, Any] = Field(default_factory=dict, description="Top-level body fields.")
    headers: dict[str, str] = Field(default_factory=dict)


class FallbackStep(_Section):
    """One link of a fallback chain: on these failures, try this alias and/or tier."""

    statuses: list[FailureStatus] = Field(
        default_factory=lambda: _statuses(
            429, 500, 502, 503, 504, "connect", "timeout", "circuit_open"
        )
    )
    from_tier: Tier | None = Field(default=None, description="Only when failing at this tier.")
    alias: str | None = None
    tier: Tier | None = None
    after_retries: bool = Field(
        default=False, description="Wait until retries on the failing target are spent."
    )

    @model_validator(mode="after")
    def _goes_somewhere(self) -> FallbackStep:
        if self.alias is None and self.tier is None:
            raise ValueError("a fallback step needs `alias`, `tier` or both")
        return self


class RetrySettings(_Section):
    """Retries on the same target, before the first byte reached the client."""

    attempts: int = Field(default=2, ge=0, le=10, description="Retries after the first try.")
    base_s: float = Field(default=0.25, gt=0)
    max_s: float = Field(
        default=8.0, gt=0, description="Longest wait; a longer Retry-After gives up."
    )
    statuses: list[FailureStatus] = Field(
        default_factory=lambda: _statuses(429, 500, 502, 503, 504, "connect", "timeout")
    )


class BreakerSettings(_Section):
    """Open after `failures` consecutive failures within `window_s`; probe after `cooldown_s`."""

    failures: int = Field(default=5, ge=1)
    window_s: float = Field(default=30.0, gt=0)
    cooldown_s: float = Field(default=15.0, gt=0)


class Timeouts(_Section):
    """How long to wait to connect, for the first token, and between tokens."""

    connect_s: float = Field(default=10.0, gt=0)
    first_token_s: float = Field(default=120.0, gt=0)
    idle_s: float = Field(default=60.0, gt=0)


class RouteSettings(_Section):
    """Per-alias routing: speed tiers, fallbacks, retries, breaker, timeouts, capabilities."""

    tiers: dict[Tier, TierTarget] = Field(default_factory=dict)
    fallbacks: list[FallbackStep] = Field(default_factory=list)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    capabilities: dict[str, Any] = Field(
        default_factory=dict, description="Over litellm's model-map entry for this alias."
    )
    thinking_overrun: Literal["hint", "cut"] = Field(
        default="hint",
        description="A thinking budget this backend neither holds nor can continue after: "
        "`hint` sends it and says so; `cut` ends a streamed reply at the budget "
        "(finish_reason length, no answer).",
    )


class Policy(_Section):
    """The whole policy: defaults, ordered rules and per-alias routing."""

    defaults: RuleActions = Field(default_factory=RuleActions)
    rules: list[Rule] = Field(default_factory=list)
    routing: dict[str, RouteSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> Policy:
        names = [rule.name for rule in self.rules if rule.name]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(twice)}")
        return self

    def route(self, alias: str) -> RouteSettings:
        """Return the alias's routing: its entry, else the first glob that fits, else defaults."""
        if alias in self.routing:
            return self.routing[alias]
        for pattern, settings in self.routing.items():
            if fnmatchcase(alias, pattern):
                return settings
        return _NO_ROUTING  # frozen: one shared default, not a validated model per request


_NO_ROUTING = RouteSettings()

PolicySection = Policy
"""The name the gateway configuration embeds: its `defaults`, `rules` and `routing` keys."""
