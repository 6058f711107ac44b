"""`farebox lint FILE`: find what breaks prompt caching in a request or recorded conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway.prefix.lint_cli import lint_command


def lint(
    file: Annotated[
        Path, typer.Argument(help="A request JSON, or a JSONL of a recorded conversation.")
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="One finding per volatile span, as JSON.")
    ] = False,
    family: Annotated[
        str | None,
        typer.Option(
            help="Prompt-cache family: openai, anthropic or vllm (default: from the model)."
        ),
    ] = None,
) -> None:
    """Report volatile content in the cacheable part of prompts; exit 1 when anything is found."""
    raise typer.Exit(lint_command(file, json_output, family=family))
