"""Three views of one request, compared field by field and printed side by side.

    planned   what `farebox policy explain --json` says the gateway sends
    upstream  what the simulator received, and the usage and tier it replied with
    billed    the ledger row

`Comparison` collects one row per field with the value each view holds (a view with
nothing to say about a field leaves its cell blank) and whether they agree; `report()`
renders every row in three columns, marking the rows that disagree, so a failing test
shows at a glance which view is wrong.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

BLANK = object()
"""A cell a view has nothing to say about (distinct from a JSON null)."""

COLUMN = 40
NAME = 30
COMPONENTS = ("input", "cached", "cache_write", "output", "reasoning")

# What the simulator says it served -> the tier that is billed. OpenAI echoes `default`
# for standard processing; Anthropic reports `service_tier: standard` and, for fast
# mode, `speed: fast`.
SERVED_NAMES = {"default": "standard", "standard": "standard", "flex": "flex"}
SERVED_NAMES |= {"priority": "priority", "fast": "fast"}


@dataclass
class Comparison:
    """The rows compared so far; `ok` when every row agrees."""

    title: str
    rows: list[tuple[str, Any, Any, Any, bool]] = field(default_factory=list)

    def add(self, name: str, planned: Any, upstream: Any, billed: Any) -> None:
        """Compare a field: every view that holds a value must hold the same one."""
        values = [v for v in (planned, upstream, billed) if v is not BLANK]
        agree = all(_same(values[0], other) for other in values[1:])
        self.rows.append((name, planned, upstream, billed, agree))

    def note(self, name: str, planned: Any, upstream: Any, billed: Any, agree: bool) -> None:
        """Add a row whose agreement the caller judged (a rule other than equality)."""
        self.rows.append((name, planned, upstream, billed, agree))

    @property
    def ok(self) -> bool:
        return all(row[-1] for row in self.rows)

    def report(self) -> str:
        """The rows as a three-column table; `!!` marks a row where the views disagree."""
        head = ("", "field", "planned (explain)", "upstream (simulator)", "billed (ledger)")
        lines = [self.title, _line(head, "-")]
        for name, planned, upstream, billed, agree in self.rows:
            lines.append(_line(("  " if agree else "!!", name, planned, upstream, billed)))
        return "\n".join(lines)


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, Decimal) or isinstance(right, Decimal):
        return Decimal(str(left)) == Decimal(str(right))
    return bool(left == right)


def _cell(value: Any) -> str:
    if value is BLANK:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Decimal):
        return f"{value.normalize():f}"
    return json.dumps(value, sort_keys=True, default=str)


def _line(cells: tuple[Any, ...], fill: str = " ") -> str:
    """One table row; long cells wrap onto continuation lines under their own column."""
    mark, name, *views = cells
    columns = [textwrap.wrap(_cell(v), COLUMN) or [""] for v in views]
    out = []
    for index in range(max(len(c) for c in columns)):
        parts = [c[index] if index < len(c) else "" for c in columns]
        label = f"{_cell(mark):2} {_cell(name) if index == 0 else '':{NAME}}"
        out.append(label + " | " + " | ".join(f"{p:{COLUMN}}" for p in parts))
    if fill != " ":
        out.append("-" * len(out[0]))
    return "\n".join(out).rstrip()


def received_body(record: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body the simulator logged, exactly as it was received."""
    body = json.loads(base64.b64decode(str(record["body_b64"])))
    assert isinstance(body, dict), body
    return body


def messages_view(planned: Mapping[str, Any]) -> dict[str, Any]:
    """The Messages API request litellm must make of the planner's OpenAI-shaped body.

    The planner writes Anthropic's own fields (`max_tokens`, `thinking`, `speed`) under
    their Messages names; litellm keeps them, wraps string contents in text blocks, turns
    OpenAI's `service_tier: default` into Anthropic's `standard_only` and drops
    `stream_options` (the Messages stream always ends with its usage).
    """
    body = {key: value for key, value in planned.items() if key != "stream_options"}
    body["messages"] = [_text_blocks(message) for message in planned["messages"]]
    if body.get("service_tier") == "default":
        body["service_tier"] = "standard_only"
    if body.get("stream") is False:
        body.pop("stream")
    return body


def _text_blocks(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    return dict(message)


def reported_tier(family: str, record: Mapping[str, Any], priority_capacity: bool) -> str:
    """The tier the simulator said it served, named as Farebox names tiers.

    OpenAI-wire replies echo `service_tier` (absent or `auto` is `default`). Anthropic
    replies say `speed: fast` for fast mode, else `usage.service_tier`: `priority` where
    the model has Priority Tier capacity and the request did not decline it with
    `standard_only`, `standard` otherwise (the simulator logs the request, not its reply's
    tier, so this reads the same rule off what it received and how it is configured).
    """
    asked = received_body(record).get("service_tier")
    if family == "anthropic":
        if record.get("speed") == "fast":
            return "fast"
        return "priority" if priority_capacity and asked != "standard_only" else "standard"
    echoed = "default" if asked in (None, "auto") else str(asked)
    return SERVED_NAMES.get(echoed, echoed)


def reported_usage(record: Mapping[str, Any]) -> dict[str, int]:
    """The simulator's token counts, in the ledger's terms (OpenAI semantics)."""
    return {
        "prompt_tokens": int(record["prompt_tokens"]),
        "cached_tokens": int(record["cached_tokens"]),
        "cache_write_tokens": int(record["cache_creation_tokens"]),
        "completion_tokens": int(record["completion_tokens"]),
        "reasoning_tokens": int(record["reasoning_tokens"]),
    }


def billed_usage(row: Mapping[str, Any]) -> dict[str, int]:
    """The ledger row's token counts, cache writes of both TTLs together."""
    writes = int(row["cache_write_tokens"]) + int(row["cache_write_1h_tokens"])
    names = ("prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens")
    return {**{name: int(row[name]) for name in names}, "cache_write_tokens": writes}


def priced(usage: Mapping[str, int], prices: Mapping[str, Any], tier: str) -> dict[str, Decimal]:
    """Each cost component: tokens x the price book's USD per million, x the tier's multiplier.

    `prices` is a `prices:` entry of the test configuration; reasoning costs what output
    costs unless the entry prices it.
    """
    per_token = {k: Decimal(str(v)) / 1_000_000 for k, v in prices.items() if k != "tiers"}
    per_token.setdefault("reasoning", per_token["output"])
    tiers = prices.get("tiers", {})
    multiplier = Decimal(str(tiers[tier]["multiplier"])) if tier in tiers else Decimal(1)
    reads, writes = usage["cached_tokens"], usage["cache_write_tokens"]
    tokens = {
        "input": usage["prompt_tokens"] - reads - writes,
        "cached": reads,
        "cache_write": writes,
        "output": usage["completion_tokens"] - usage["reasoning_tokens"],
        "reasoning": usage["reasoning_tokens"],
    }
    price_of = {"cached": "cached_input"}
    costs = {
        name: count * per_token.get(price_of.get(name, name), Decimal(0)) * multiplier
        for name, count in tokens.items()
    }
    return {**costs, "total": sum(costs.values(), Decimal(0))}
