"""The admin API over HTTP, for `farebox keys` and `farebox audit`.

The commands talk to a running gateway (not to its database), so the admin key guards
them exactly as it guards the API, and every change lands in the audit log.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

DEFAULT_URL = "http://127.0.0.1:4000"
TIMEOUT_S = 30.0

UrlOption = Annotated[
    str,
    typer.Option(
        "--url", envvar="FAREBOX_URL", help="The gateway (env FAREBOX_URL).", show_default=True
    ),
]
AdminKeyOption = Annotated[
    str | None,
    typer.Option(
        "--admin-key",
        envvar="FAREBOX_ADMIN_KEY",
        help="The admin key (env FAREBOX_ADMIN_KEY; none for a gateway in open mode).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's JSON answer.")]

err = Console(stderr=True)


class AdminError(Exception):
    """The gateway could not be reached, or refused: the message says which and why."""


def call(
    url: str,
    admin_key: str | None,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
) -> Any:
    """Send one admin request; answer its JSON, or raise `AdminError` with the server's message."""
    headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
    base = url.rstrip("/").removesuffix("/v1")
    query = {k: v for k, v in (params or {}).items() if v is not None}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=TIMEOUT_S) as client:
            response = client.request(method, path, json=body, params=query)
    except httpx.HTTPError as exc:
        raise AdminError(f"cannot reach the gateway at {base}: {exc}") from exc
    if response.is_success:
        return response.json()
    raise AdminError(f"{response.status_code}: {_message(response)}")


def _message(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        param = f" (param: {error['param']})" if error.get("param") else ""
        return f"{error['message']}{param}"
    except (ValueError, KeyError, TypeError):
        return response.text[:500] or response.reason_phrase


def fail(exc: AdminError) -> typer.Exit:
    """Say what failed on stderr; the exit to raise."""
    err.print(f"[red]farebox: {exc}[/]", highlight=False)
    return typer.Exit(1)


def print_json(document: Any) -> None:
    """The API's answer, as it came."""
    typer.echo(json.dumps(document, indent=2))
