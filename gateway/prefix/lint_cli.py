"""`farebox lint FILE [--json]`: read recorded requests, print findings, return the exit status.

The file is one request body (JSON), a JSON array of bodies, or JSONL with one body per line.
A line may also wrap its body as {"request": {...}} or {"body": {...}}, as request logs do.
Exit status: 0 when clean, 1 when anything was found, 2 when the file cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from gateway.prefix.lint import lint_conversation
from gateway.prefix.render import render_report


class LintInputError(ValueError):
    """The lint input is not a request body, an array of them, or JSONL of them."""


def _unwrap(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, dict) and "messages" not in item:
        for key in ("request", "body"):
            if isinstance(item.get(key), dict):
                return _unwrap(item[key], where)
    if not isinstance(item, dict) or not isinstance(item.get("messages"), list):
        raise LintInputError(f"{where}: expected a chat-completions body with a 'messages' list")
    return item


def read_requests(text: str) -> list[dict[str, Any]]:
    """Parse a request JSON, a JSON array of requests, or JSONL into request bodies."""
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, list):
        return [_unwrap(item, f"item {i}") for i, item in enumerate(whole)]
    if whole is not None:
        return [_unwrap(whole, "file")]
    bodies = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            bodies.append(_unwrap(orjson.loads(line), f"line {number}"))
        except orjson.JSONDecodeError as exc:
            raise LintInputError(f"line {number}: not valid JSON ({exc})") from exc
    return bodies


def lint_command(
    file: Path, json_output: bool, *, family: str | None = None, console: Console | None = None
) -> int:
    """Lint `file`, print the report (rich or JSON) and return the exit status."""
    err = Console(stderr=True)
    try:
        bodies = read_requests(file.read_text(encoding="utf-8"))
        report = lint_conversation(bodies, family=family)
    except (OSError, UnicodeDecodeError, LintInputError, ValueError) as exc:
        err.print(f"[red]farebox lint: cannot read {file}: {exc}[/]")
        return 2
    if json_output:
        sys.stdout.write(report.to_json() + "\n")
    else:
        render_report(report, console or Console())
    return 0 if report.clean else 1
