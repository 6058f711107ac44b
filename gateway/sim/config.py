"""Configuration of the simulator: served models, timing, prefix cache and auth."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from gateway import yaml_text


class TierTiming(BaseModel):
    """Multipliers applied to the per-token rates for one service tier or speed."""

    model_config = ConfigDict(extra="forbid")

    prefill: float = Field(default=1.0, ge=0)
    decode: float = Field(default=1.0, ge=0)


class SimModel(BaseModel):
    """One model the simulator serves, with the quirks of the engine behind it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    # More names it answers to, like vLLM's extra --served-model-name values.
    aliases: list[str] = Field(default_factory=list)
    api: Literal["openai", "anthropic"] = "openai"
    thinking: bool = False
    reasoning_field: Literal["reasoning", "reasoning_content"] = "reasoning"
    supports_thinking_budget: bool = False
    supports_continue_final_message: bool = False
    start_of_thinking: str = "<think>"
    end_of_thinking: str = "</think>"
    reasoning_tokens: int = Field(default=40, ge=0)
    output_tokens: int = Field(default=24, ge=1)
    max_model_len: int = Field(default=131072, ge=16)
    prefill_ms_per_token: float | None = Field(default=None, ge=0)
    decode_ms_per_token: float | None = Field(default=None, ge=0)
    # Anthropic only: prefixes shorter than this are never written to the cache.
    min_cacheable_tokens: int = Field(default=0, ge=0)
    supports_fast_mode: bool = False
    # Anthropic only: `{"role": "system"}` turns inside `messages` (mid-conversation system
    # messages, which current Claude models take and Claude Code sends); else refused.
    mid_conversation_system: bool = False
    # Anthropic only: the account has Priority Tier capacity, which `service_tier: auto`
    # (the default) uses and `standard_only` declines.
    priority_capacity: bool = False
    # An embedding model (vLLM's pooling runner): serves /v1/embeddings only, vectors of
    # this many dimensions; `dimensions` is accepted only where it may shorten them.
    embedding_dimensions: int | None = Field(default=None, ge=1)
    supports_dimensions: bool = False


def default_models() -> list[SimModel]:
    """Return the models served when the configuration names none."""
    return [
        # Plain chat model; like a backend that refuses continue_final_message.
        SimModel(name="sim-chat"),
        SimModel(
            name="sim-thinker",
            thinking=True,
            reasoning_field="reasoning",
            supports_thinking_budget=True,
            supports_continue_final_message=True,
        ),
        # Stands for an SGLang or older vLLM backend: the other reasoning field
        # and neither per-request budgets nor continue_final_message.
        SimModel(
            name="sim-sglang-thinker",
            thinking=True,
            reasoning_field="reasoning_content",
            supports_thinking_budget=False,
            supports_continue_final_message=False,
        ),
        SimModel(
            name="claude-sim",
            api="anthropic",
            thinking=True,
            min_cacheable_tokens=1024,
            supports_fast_mode=True,
            mid_conversation_system=True,
        ),
        # Stands for text-embedding-3-small: 1536 dimensions, shortened on request.
        SimModel(
            name="sim-embed",
            embedding_dimensions=1536,
            supports_dimensions=True,
            max_model_len=8192,
        ),
    ]


def default_tier_timing() -> dict[str, TierTiming]:
    """Return per-tier multipliers: flex is slow, priority quick, fast mode speeds decode only."""
    return {
        "flex": TierTiming(prefill=2.0, decode=2.0),
        "priority": TierTiming(prefill=0.5, decode=0.5),
        "fast": TierTiming(prefill=1.0, decode=0.4),
    }


class ScriptedCall(BaseModel):
    """One tool call of a scripted plan: the function's name and the arguments it gets."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class SimConfig(BaseModel):
    """Everything the simulator needs; build it in code or load it from YAML."""

    model_config = ConfigDict(extra="forbid")

    models: list[SimModel] = Field(default_factory=default_models, min_length=1)
    prefill_ms_per_token: float = Field(default=0.0, ge=0)
    decode_ms_per_token: float = Field(default=0.0, ge=0)
    tier_timing: dict[str, TierTiming] = Field(default_factory=default_tier_timing)
    block_size: int = Field(default=16, ge=1)
    cache_capacity_blocks: int = Field(default=65536, ge=1)
    # The capacity model (gateway/sim/capacity.py); unset, nothing ever waits.
    max_num_seqs: int | None = Field(default=None, ge=1)  # sequences running at once
    kv_cache_tokens: int | None = Field(default=None, ge=1)  # KV cache size; bounds the cache
    seed: int = 0
    # Tool calls the chat route makes after the last user message before it answers
    # (gateway/sim/tool_calls.py); a request's metadata.sim_tool_rounds overrides it.
    tool_rounds: int = Field(default=0, ge=0)
    # A scripted plan instead (gateway/sim/tool_calls.py): the n-th call after the last
    # user message is tool_script[n] when that function is offered; then a text answer.
    tool_script: list[ScriptedCall] = Field(default_factory=list)
    api_key: SecretStr | None = None
    request_log_size: int = Field(default=1000, ge=1)

    @model_validator(mode="after")
    def _unique_names(self) -> SimConfig:
        names = [name for m in self.models for name in (m.name, *m.aliases)]
        if len(names) != len(set(names)):
            raise ValueError(f"model names must be unique, got {names}")
        return self

    @property
    def kv_cache_blocks(self) -> int | None:
        """The KV cache in blocks, when its size is set."""
        if self.kv_cache_tokens is None:
            return None
        return max(self.kv_cache_tokens // self.block_size, 1)

    @property
    def prefix_cache_blocks(self) -> int:
        """The prefix cache's LRU capacity: the KV cache when sized, else its own setting."""
        return self.kv_cache_blocks or self.cache_capacity_blocks

    def find_model(self, name: str | None, api: str) -> SimModel | None:
        """Return the served model of that name or alias and API; no name means the first one."""
        for model in self.models:
            if model.api == api and (name is None or name == model.name or name in model.aliases):
                return model
        return None

    def rates(self, model: SimModel, tier: str) -> tuple[float, float]:
        """Return (prefill, decode) milliseconds per token for a model at a tier."""
        prefill = self.prefill_ms_per_token
        decode = self.decode_ms_per_token
        if model.prefill_ms_per_token is not None:
            prefill = model.prefill_ms_per_token
        if model.decode_ms_per_token is not None:
            decode = model.decode_ms_per_token
        timing = self.tier_timing.get(tier, TierTiming())
        return prefill * timing.prefill, decode * timing.decode


def default_config() -> SimConfig:
    """Return the stock configuration: five models, zero latency, seed 0."""
    return SimConfig()


def realistic_config() -> SimConfig:
    """The stock models timed like one busy GPU server (what `make run` serves).

    Prefill 20,000 tokens/s (0.05 ms per uncached token, the default prices' GPU
    throughput), decode 25 tokens/s per sequence (40 ms), flex twice as slow and priority
    twice as fast (`tier_timing`), 32 sequences at once and a 256k-token KV cache: a hit
    skips its cached tokens' prefill, a busy server queues and evicts.
    """
    return SimConfig(
        prefill_ms_per_token=0.05,
        decode_ms_per_token=40.0,
        max_num_seqs=32,
        kv_cache_tokens=262_144,
    )


PROFILES = {"instant": default_config, "realistic": realistic_config}
PROFILE_ENV = "FAREBOX_SIM_PROFILE"


def profile_config(name: str | None) -> SimConfig:
    """The configuration of a named profile (`instant`, the default, or `realistic`)."""
    make = PROFILES.get(name or "instant")
    if make is None:
        raise ValueError(f"unknown simulator profile {name!r}: use one of {', '.join(PROFILES)}")
    return make()


def load_config(path: Path) -> SimConfig:
    """Read a SimConfig from a YAML file."""
    try:
        data = yaml_text.load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ValueError(f"cannot read simulator config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(
            f"simulator config {path} must be a YAML mapping, got {type(data).__name__}"
        )
    return SimConfig.model_validate(data)


# Sizes that shape the caches and the log when they are built; changing them needs a restart.
FIXED_AT_START = frozenset(
    {"block_size", "cache_capacity_blocks", "request_log_size", "max_num_seqs", "kv_cache_tokens"}
)


def updated_config(config: SimConfig, changes: dict[str, Any]) -> SimConfig:
    """Return config with top-level fields replaced by changes, validated as a whole."""
    fixed = sorted(FIXED_AT_START & changes.keys())
    if fixed:
        raise ValueError(f"{', '.join(fixed)} cannot change while running; restart the simulator")
    return SimConfig.model_validate({**config.model_dump(), **changes})
