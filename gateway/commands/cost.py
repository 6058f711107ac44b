"""`farebox cost`: price hypothetical token counts for a model and tier, without a model call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.pricing import CostBreakdown, PriceBook, PricingError, estimate
from gateway.pricing.money import money_str
from gateway.settings import Settings

err = Console(stderr=True)


def _config(path: Path | None) -> GatewayConfig:
    return load_config(path or Settings().config_path())


def breakdown_json(breakdown: CostBreakdown, counts: dict[str, int]) -> dict[str, Any]:
    """The `--json` document: each component's tokens, cost and share, and the total."""
    return {
        "model": breakdown.model,
        "tier": breakdown.tier,
        "priced_as": breakdown.priced_as,
        "tier_fallback": breakdown.tier_fallback,
        "long_context_above": breakdown.long_context_above,
        "components": {
            name: {
                "tokens": counts[name],
                "cost_usd": money_str(cost),
                "share": money_str(breakdown.share(name)),
            }
            for name, cost in breakdown.components().items()
        },
        "total_usd": money_str(breakdown.total),
    }


def _render(breakdown: CostBreakdown, counts: dict[str, int]) -> None:
    table = Table(title=f"{breakdown.model} on the {breakdown.tier} tier")
    for column in ("component", "tokens", "cost (USD)", "share"):
        table.add_column(column, justify="left" if column == "component" else "right")
    for name, cost in breakdown.components().items():
        share = breakdown.share(name) * 100
        table.add_row(name, f"{counts[name]:,}", money_str(cost), f"{share:.1f}%")
    table.add_row("total", "", money_str(breakdown.total), "100%", style="bold")
    Console().print(table)
    if breakdown.tier_fallback:
        err.print(f"note: no {breakdown.tier} price is known; standard prices were used")


def cost(
    model: Annotated[
        str, typer.Option(help="A price-map name (claude-opus-5, zai/glm-5.3) or an alias.")
    ],
    input: Annotated[int, typer.Option("--input", help="Total prompt tokens.")] = 0,
    cached: Annotated[int, typer.Option(help="Prompt tokens read from the cache.")] = 0,
    cache_write: Annotated[int, typer.Option(help="Prompt tokens written to the cache.")] = 0,
    output: Annotated[int, typer.Option(help="Total completion tokens.")] = 0,
    reasoning: Annotated[int, typer.Option(help="The part of the output that is reasoning.")] = 0,
    tier: Annotated[
        str, typer.Option(help="batch, flex, standard, priority or fast.")
    ] = "standard",
    config: Annotated[
        Path | None, typer.Option(help="Config whose prices override the map.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Price a hypothetical request: what do these token counts cost on this model and tier?"""
    try:
        gateway_config = _config(config)
        book = PriceBook.from_sources(gateway_config.prices)
        key = gateway_config.price_key(model) if model in gateway_config.models else model
        breakdown = estimate(book, key, input, cached, cache_write, output, reasoning, tier)
    except (ConfigError, PricingError, ValidationError) as exc:
        err.print(f"farebox cost: {_message(exc)}")
        raise typer.Exit(2) from exc
    counts = {
        "input": input - cached - cache_write,
        "cached": cached,
        "cache_write": cache_write,
        "output": output - reasoning,
        "reasoning": reasoning,
    }
    if json_output:
        typer.echo(json.dumps(breakdown_json(breakdown, counts), indent=2))
    else:
        _render(breakdown, counts)


def _message(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"--{where.replace('_tokens', '').replace('_', '-')}: {first['msg']}"
    return str(exc)
