"""`farebox report --url`: the report's numbers read through a gateway with a key.

The gateway scopes what it answers to the key (a team key: its own team; a finance key:
every team), so a team's engineer gets the report without the database URL. The rows come
back as the same dataclasses the ledger queries return, and are printed the same way.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar, get_type_hints

import httpx

from gateway.ledger.read_rows import SpendRow, TaskCostStats, TaskOutcomes

Row = TypeVar("Row")
TIMEOUT_S = 30.0


class RemoteReadError(Exception):
    """The gateway could not be reached, or answered with an error (its message is kept)."""


def api_base(url: str) -> str:
    """`http://host:4000`, `.../v1` or `.../v1/` all name the same gateway."""
    base = url.rstrip("/")
    return base.removesuffix("/v1")


def read_remote(
    url: str,
    api_key: str | None,
    params: dict[str, Any],
    task_params: dict[str, Any],
) -> tuple[list[SpendRow], list[TaskCostStats], list[TaskOutcomes]]:
    """GET /v1/spend and /v1/spend/tasks with the key; the rows as the ledger gives them."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=api_base(url), headers=headers, timeout=TIMEOUT_S) as client:
        spent = _get(client, "/v1/spend", params)
        tasks = _get(client, "/v1/spend/tasks", {**params, **task_params, "group_by": "team"})
    return (
        [_row(SpendRow, item) for item in spent["data"]],
        [_row(TaskCostStats, item) for item in tasks["data"]],
        [_row(TaskOutcomes, item) for item in tasks["outcomes"]],
    )


def query(
    since: datetime | None, until: datetime | None, team: str | None, project: str | None
) -> dict[str, Any]:
    """The filters both reads share, as query parameters (a time without a zone is UTC)."""
    values = {
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "team": team,
        "project": project,
    }
    return {name: value for name, value in values.items() if value is not None}


def _get(client: httpx.Client, path: str, params: dict[str, Any]) -> dict[str, Any]:
    try:
        response = client.get(path, params=params)
    except httpx.HTTPError as exc:
        raise RemoteReadError(f"cannot reach {client.base_url}: {exc}") from exc
    if response.status_code != 200:
        raise RemoteReadError(f"{path}: {response.status_code} {_message(response)}")
    try:
        body: dict[str, Any] = response.json()
    except ValueError as exc:
        raise RemoteReadError(
            f"{path}: the answer is not JSON; is {client.base_url} Farebox?"
        ) from exc
    return body


def _message(response: httpx.Response) -> str:
    """The server's own error message (OpenAI shape), else the start of its body."""
    try:
        error = response.json()["error"]
        return f"{error['message']} ({error.get('code') or error.get('type')})"
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def _row(shape: type[Row], item: dict[str, Any]) -> Row:
    """A ledger dataclass from its JSON: money comes as exact decimal strings."""
    hints = get_type_hints(shape)
    values: dict[str, Any] = {}
    for field in fields(shape):  # type: ignore[arg-type]
        value = item.get(field.name)
        if value is not None and Decimal in _types(hints[field.name]):
            value = Decimal(value)
        values[field.name] = value
    return shape(**values)


def _types(hint: Any) -> tuple[Any, ...]:
    return getattr(hint, "__args__", None) or (hint,)
