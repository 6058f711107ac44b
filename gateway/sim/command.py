"""The `farebox sim` command; register it with ``app.command("sim")(sim)``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.sim.config import SimConfig, load_config, profile_config
from gateway.sim.server import run_sim


def build_config(
    config: Path | None,
    prefill_ms_per_token: float | None,
    decode_ms_per_token: float | None,
    seed: int | None,
    profile: str | None = None,
) -> SimConfig:
    """Load the YAML file (or the profile's defaults) and apply command-line overrides."""
    base = load_config(config) if config is not None else profile_config(profile)
    overrides: dict[str, Any] = {
        "prefill_ms_per_token": prefill_ms_per_token,
        "decode_ms_per_token": decode_ms_per_token,
        "seed": seed,
    }
    update = {key: value for key, value in overrides.items() if value is not None}
    # Re-validate so a negative rate from the command line is refused like one from YAML.
    return SimConfig.model_validate({**base.model_dump(), **update})


def sim(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8001,
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML simulator config (models, timing, cache, api_key).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    prefill_ms_per_token: Annotated[
        float | None, typer.Option(help="Override: milliseconds per uncached prompt token.")
    ] = None,
    decode_ms_per_token: Annotated[
        float | None, typer.Option(help="Override: milliseconds per output token.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Override: default seed for generated text.")
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(help="Without --config: `instant` (default) or `realistic` timing."),
    ] = None,
) -> None:
    """Run the bundled vLLM/Anthropic simulator."""
    try:
        settings = build_config(config, prefill_ms_per_token, decode_ms_per_token, seed, profile)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from exc
    names = ", ".join(model.name for model in settings.models)
    typer.echo(f"farebox sim: http://{host}:{port}/v1 serving {names}")
    run_sim(settings, host, port)
