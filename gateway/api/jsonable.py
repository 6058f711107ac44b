"""Ledger results as JSON: money stays an exact decimal string, never a float."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from decimal import Decimal
from typing import Any

from gateway.pricing.money import money_str


def jsonable(value: Any) -> Any:
    """Dataclasses, Decimals and datetimes rendered for a JSON response."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Decimal):
        return money_str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
