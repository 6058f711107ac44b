"""The `farebox` command: serve the gateway, run the simulator, and the reports."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gateway import __version__
from gateway.config import ConfigError, load_config
from gateway.services import Services
from gateway.settings import Settings

app = typer.Typer(
    name="farebox",
    help="Farebox: an OpenAI-compatible, cost-aware LLM gateway.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True)


def _banner(settings: Settings) -> Callable[[Services], None]:
    def show(services: Services) -> None:
        out = Console()
        base = f"http://{settings.host}:{settings.port}/v1"
        out.print(f"[bold]Farebox {__version__}[/] serving on {base}")
        out.print(f'  OpenAI SDK: OpenAI(base_url="{base}", api_key="anything")')
        out.print(f"  config: {settings.config_path()}")
        out.print(f"  models: {', '.join(services.config.models) or 'none'}")
        if services.sim_base_url:
            out.print(
                f"  backend: the bundled simulator at {services.sim_base_url} "
                "(no upstream configured; set FAREBOX_CONFIG to serve real ones)"
            )

    return show


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML config (default: FAREBOX_CONFIG or the embedded one).")
    ] = None,
) -> None:
    """Start the gateway."""
    from gateway.app import create_app
    from gateway.drain import DrainingServer
    from gateway.server import server_config

    overrides = {k: v for k, v in {"host": host, "port": port, "config": config}.items() if v}
    settings = Settings(**overrides)  # type: ignore[arg-type]
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        gateway_config = load_config(settings.config_path())
    except ConfigError as exc:
        err.print(f"[red]farebox: {exc}[/]")
        raise typer.Exit(2) from exc
    application = create_app(settings, gateway_config, on_ready=_banner(settings))
    server = server_config(application, settings)
    DrainingServer(server, application.state.in_flight, settings.shutdown_grace_s).run()


def _register_commands() -> None:
    from gateway.commands.cost import cost
    from gateway.commands.lint import lint
    from gateway.commands.policy import app as policy_app
    from gateway.commands.report import report
    from gateway.sim.command import sim

    app.command("sim", help="Run the bundled simulator (a stand-in for vLLM and Anthropic).")(sim)
    app.command("cost")(cost)
    app.command("report")(report)
    app.command("lint")(lint)
    app.add_typer(policy_app, name="policy")


_register_commands()


def main() -> None:
    """Console-script entry point."""
    app()
