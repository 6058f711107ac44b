"""The gateway's YAML configuration: which models it exposes and where each one goes.

A model alias maps to a provider, the upstream's model name, a base URL and the name of
the environment variable that holds the key. Keys themselves never live in the file.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway import yaml_text
from gateway.policy.families import FamilyFinding, derive_family
from gateway.policy.schema import Policy, RouteSettings, Rule, RuleActions
from gateway.pricing.overrides import PriceOverride
from gateway.tenants.config import TenantLimits

SIM_BASE_URL = "sim"
"""`base_url: sim` means the bundled simulator, started by `farebox serve` on demand."""

Family = Literal["openai", "vllm", "sglang", "anthropic", "other"]
PrefixAction = Literal[
    "observe", "normalize", "sticky_cache_key", "anthropic_cache_control", "strict"
]


class ConfigError(ValueError):
    """The configuration file is unusable; the message names the file, line and reason."""


class ModelRoute(BaseModel):
    """Where requests for one model alias go."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(
        default="openai",
        description="`openai` for any OpenAI-compatible server (vLLM, SGLang, OpenAI); "
        "any other value is a litellm provider such as `anthropic`.",
    )
    model: str = Field(description="The model name the upstream knows.")
    base_url: str | None = Field(default=None, description="Upstream base URL, or `sim`.")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the key."
    )
    family: Family | None = Field(
        default=None, description="Wire dialect for reasoning fields and cache rules."
    )
    price_model: str | None = Field(
        default=None, description="Price-map key, when it differs from `provider/model`."
    )
    wire: Literal["chat", "responses"] = Field(
        default="chat",
        description="`responses` when the OpenAI-compatible upstream also serves "
        "/v1/responses (OpenAI, vLLM): Responses requests go to it natively; else they "
        "are translated to chat completions.",
    )
    prefix: list[PrefixAction] = Field(
        default_factory=lambda: list[PrefixAction](["observe"]),
        description="Prefix-stability actions; observing (headers, ledger, metrics) is always on.",
    )

    @field_validator("provider")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()

    @property
    def via_litellm(self) -> bool:
        """Whether this route needs litellm's translation (a non-OpenAI wire format)."""
        return self.provider != "openai"

    @property
    def uses_simulator(self) -> bool:
        return self.base_url == SIM_BASE_URL

    @property
    def family_finding(self) -> FamilyFinding:
        """The dialect and whether it was guessed (`gateway.policy.families`)."""
        return derive_family(self.provider, self.base_url, self.family)

    @property
    def wire_family(self) -> Family:
        """The dialect: `family` when configured, else derived from provider and base_url."""
        return self.family_finding.family

    def api_key(self) -> str | None:
        """The provider key from the environment, or None when not configured."""
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None


class TaskSettings(BaseModel):
    """How tasks are closed when nobody finishes them."""

    model_config = ConfigDict(extra="forbid")

    idle_timeout_s: float = Field(
        default=1800.0, gt=0, description="A task idle this long is closed as `abandoned`."
    )


class GatewayConfig(BaseModel):
    """The whole configuration file."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelRoute] = Field(default_factory=dict)
    prices: dict[str, PriceOverride] = Field(
        default_factory=dict,
        description="Prices per model alias or price-map key, over litellm's price map.",
    )
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    defaults: RuleActions = Field(
        default_factory=RuleActions, description="Policy actions when no rule says otherwise."
    )
    rules: list[Rule] = Field(default_factory=list, description="Policy rules; first match wins.")
    routing: dict[str, RouteSettings] = Field(
        default_factory=dict, description="Per alias: tiers, fallbacks, retries, timeouts."
    )
    tenants: TenantLimits = Field(
        default_factory=TenantLimits,
        description="Budgets and rate limits per team and project (docs/budgets.md).",
    )

    @cached_property
    def policy(self) -> Policy:
        """The policy part of the file, as the policy engine reads it."""
        return Policy(defaults=self.defaults, rules=self.rules, routing=self.routing)

    def price_key(self, alias: str) -> str:
        """The price-book name for an alias: its own override, else its route's model."""
        route = self.models.get(alias)
        if alias in self.prices or route is None:
            return alias
        if route.price_model:
            return route.price_model
        return route.model if route.provider == "openai" else f"{route.provider}/{route.model}"

    @property
    def uses_simulator(self) -> bool:
        return any(route.uses_simulator for route in self.models.values())

    def family_warnings(self) -> list[str]:
        """One line per model whose backend family had to be guessed (`family:` fixes it)."""
        found = [route.family_finding.warning(alias) for alias, route in self.models.items()]
        return [warning for warning in found if warning is not None]


def load_config(path: Path) -> GatewayConfig:
    """Read and validate a configuration file; raise ConfigError naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the file ({exc.strerror})") from exc
    return parse_config(text, source=str(path))


def parse_config(text: str, source: str = "<config>") -> GatewayConfig:
    """Validate configuration text; errors carry the source name and line number."""
    try:
        raw = yaml_text.load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}{where}: invalid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}:1: the top level must be a mapping")
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        where = ".".join(str(part) for part in loc) or "(top level)"
        line = _line_of(text, loc)
        raise ConfigError(f"{source}:{line}: {where}: {first['msg']}") from exc


def _line_of(text: str, loc: tuple[Any, ...]) -> int:
    """The 1-based line of the YAML node at `loc`, or of its nearest existing parent."""
    node = yaml_text.compose(text)
    line = 1
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        node = _child(node, part)
    if node is not None:
        line = node.start_mark.line + 1
    return line


def _child(node: yaml.Node, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                return value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part]
    return None
