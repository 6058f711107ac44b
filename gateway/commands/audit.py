"""`farebox audit`: read the audit log (admin actions and policy reloads) through the admin API."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from gateway.commands.admin_client import (
    DEFAULT_URL,
    AdminError,
    AdminKeyOption,
    JsonOption,
    UrlOption,
    call,
    fail,
    print_json,
)
from gateway.commands.tables import Column, print_table

COLUMNS = (
    Column("at", label=True),
    Column("actor", label=True),
    Column("action", label=True),
    Column("outcome", label=True),
    Column("target", 1, label=True),
    Column("detail", 2, label=True),
)


def audit(
    since: Annotated[
        str | None, typer.Option(help="From this time on (ISO 8601 with a zone).")
    ] = None,
    action: Annotated[str | None, typer.Option(help="Only this action (keys.create, ...).")] = None,
    actor: Annotated[str | None, typer.Option(help="Only this actor (admin, open, ...).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many entries, newest first.")] = 100,
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show the audit log: who changed keys or reloaded the policy, when, and the outcome."""
    params = {"since": since, "action": action, "actor": actor, "limit": limit}
    try:
        entries = call(url, admin_key, "GET", "/admin/audit", params=params)
    except AdminError as exc:
        raise fail(exc) from None
    if json_output:
        print_json(entries)
        return
    rows = [_row(entry) for entry in entries["data"]]
    print_table(Console(), f"{len(rows)} audit entries, newest first", COLUMNS, rows)


def _row(entry: dict[str, Any]) -> list[str]:
    detail = entry.get("detail")
    return [
        str(entry["at"]),
        str(entry["actor"]),
        str(entry["action"]),
        str(entry["outcome"]),
        str(entry.get("target") or ""),
        json.dumps(detail, sort_keys=True) if detail else "",
    ]
