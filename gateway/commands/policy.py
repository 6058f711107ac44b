"""`farebox policy check FILE` and `farebox policy explain REQUEST.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway.settings import Settings

app = typer.Typer(help="Validate a policy file, or explain what it does to a request.")


@app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="A configuration/policy YAML file.")],
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Validate FILE; exit 1 with file, line and reason when it is invalid."""
    from gateway.policy.cli import policy_check

    raise typer.Exit(policy_check(file, json_output))


@app.command("explain")
def explain(
    request: Annotated[Path, typer.Argument(help="A chat-completions request body (JSON).")],
    config: Annotated[
        Path | None, typer.Option(help="The policy file (default: FAREBOX_CONFIG).")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="A request header, 'Name: value'.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show the matching rule, the step kind, and how the request would be changed and routed."""
    from gateway.policy.cli import policy_explain

    path = config or Settings().config_path()
    raise typer.Exit(policy_explain(request, path, header or [], json_output))
