"""`farebox keys`: create, list, show, revoke and rotate virtual keys through the admin API."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gateway.commands.admin_client import (
    DEFAULT_URL,
    AdminError,
    AdminKeyOption,
    JsonOption,
    UrlOption,
    call,
    err,
    fail,
    print_json,
)
from gateway.commands.tables import Column, print_table

app = typer.Typer(
    help="Virtual keys (fbx-...): create, list, show, revoke, rotate. Needs the admin key.",
    no_args_is_help=True,
)

LIST_COLUMNS = (
    Column("id", label=True),
    Column("prefix", label=True),
    Column("state", label=True),
    Column("team", 1, label=True),
    Column("project", 2, label=True),
    Column("role", 3, label=True),
    Column("name", 4, label=True),
    Column("expires", 5, label=True),
)


@app.command()
def create(
    name: Annotated[str | None, typer.Option(help="What the key is for.")] = None,
    team: Annotated[str | None, typer.Option(help="The team it bills.")] = None,
    project: Annotated[str | None, typer.Option(help="The project it bills.")] = None,
    plan: Annotated[str | None, typer.Option(help="The policy plan it runs under.")] = None,
    role: Annotated[str | None, typer.Option(help="member, service or finance.")] = None,
    model: Annotated[
        list[str] | None, typer.Option(help="A model alias (glob) it may call; repeat.")
    ] = None,
    tier: Annotated[list[str] | None, typer.Option(help="A speed tier it may ask; repeat.")] = None,
    max_output_tokens: Annotated[int | None, typer.Option(help="Output cap per call.")] = None,
    max_n: Annotated[int | None, typer.Option(help="Largest `n` per call.")] = None,
    daily_usd: Annotated[Decimal | None, typer.Option(help="Budget per UTC day.")] = None,
    monthly_usd: Annotated[Decimal | None, typer.Option(help="Budget per UTC month.")] = None,
    total_usd: Annotated[Decimal | None, typer.Option(help="Lifetime budget.")] = None,
    requests_per_min: Annotated[int | None, typer.Option(help="Rate limit.")] = None,
    tokens_per_min: Annotated[int | None, typer.Option(help="Rate limit.")] = None,
    expires_at: Annotated[
        str | None, typer.Option(help="ISO 8601 with a zone: 2027-01-01T00:00:00Z.")
    ] = None,
    attributes: Annotated[
        str | None,
        typer.Option(help="Attributes as JSON, or @file.json (options above override it)."),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a key. Its secret is printed once: store it now, it is not shown again."""
    body = _attributes(attributes)
    options = {"name": name, "team": team, "project": project, "plan": plan, "role": role,
               "models": model, "tiers": tier, "max_output_tokens": max_output_tokens,
               "max_n": max_n, "expires_at": expires_at}  # fmt: skip
    body.update({k: v for k, v in options.items() if v is not None})
    _merge(body, "budget", daily_usd=daily_usd, monthly_usd=monthly_usd, total_usd=total_usd)
    _merge(body, "rate_limit", requests_per_min=requests_per_min, tokens_per_min=tokens_per_min)
    made = _call(url, admin_key, "POST", "/admin/keys", body=body)
    _print_made(made, json_output)


@app.command("list")
def list_keys(
    include_revoked: Annotated[bool, typer.Option(help="Show revoked keys too.")] = False,
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """List keys (never their secrets)."""
    params = {"include_revoked": "true" if include_revoked else None}
    listed = _call(url, admin_key, "GET", "/admin/keys", params=params)
    if json_output:
        print_json(listed)
        return
    rows = [[_cell(key.get(f)) for f in _LIST_FIELDS] for key in listed["data"]]
    print_table(Console(), f"{len(rows)} keys", LIST_COLUMNS, rows)


_LIST_FIELDS = ("id", "prefix", "state", "team", "project", "role", "name", "expires_at")


@app.command()
def show(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...).")],
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show one key's attributes and state."""
    key = _call(url, admin_key, "GET", f"/admin/keys/{key_id}")
    _print_key(key, json_output)


@app.command()
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...).")],
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Revoke a key now; every replica refuses it within its refresh interval."""
    key = _call(url, admin_key, "DELETE", f"/admin/keys/{key_id}")
    _print_key(key, json_output)


@app.command()
def rotate(
    key_id: Annotated[str, typer.Argument(help="The key's id (key_...).")],
    overlap_s: Annotated[float, typer.Option(help="Seconds the old key keeps working.")] = 3600,
    url: UrlOption = DEFAULT_URL,
    admin_key: AdminKeyOption = None,
    json_output: JsonOption = False,
) -> None:
    """Replace a key by a new one with the same attributes; the old one works `overlap_s` more."""
    path = f"/admin/keys/{key_id}/rotate"
    made = _call(url, admin_key, "POST", path, body={"overlap_s": overlap_s})
    _print_made(made, json_output)
    if not json_output:
        previous = made["previous"]
        typer.echo(f"{previous['id']} ({previous['prefix']}) expires {previous['expires_at']}")


def _call(url: str, admin_key: str | None, method: str, path: str, **options: Any) -> Any:
    try:
        return call(url, admin_key, method, path, **options)
    except AdminError as exc:
        raise fail(exc) from None


def _attributes(given: str | None) -> dict[str, Any]:
    if given is None:
        return {}
    try:
        text = Path(given[1:]).read_text() if given.startswith("@") else given
        value = json.loads(text)
    except (OSError, ValueError) as exc:
        raise fail(AdminError(f"--attributes: {exc}")) from None
    if not isinstance(value, dict):
        raise fail(AdminError("--attributes: give a JSON object"))
    return value


def _merge(body: dict[str, Any], name: str, **values: Any) -> None:
    given = {k: str(v) if isinstance(v, Decimal) else v for k, v in values.items() if v is not None}
    if given:
        body[name] = {**body.get(name, {}), **given}


def _print_made(made: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(made)
    else:
        _print_key({k: v for k, v in made.items() if k not in {"key", "previous"}}, False)
        typer.echo(f"key: {made['key']}")
    err.print(
        "[yellow]Store this key now: it is not shown again (only its prefix is kept).[/]",
        highlight=False,
    )


def _print_key(key: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(key)
        return
    table = Table(title=f"key {key['id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for field, value in key.items():
        if field not in {"object", "id"} and value is not None:
            table.add_row(field, _cell(value))
    Console().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)
