"""Decimal helpers: money never passes through float arithmetic."""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

ZERO = Decimal(0)
ONE = Decimal(1)
PER_MILLION = Decimal(1_000_000)


def to_decimal(value: object) -> Decimal | None:
    """Read a price written as int, float or string; None if it is absent or not a price."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        # repr() is the shortest string that round-trips, i.e. what the map's author wrote:
        # 3e-06 becomes exactly 0.000003, not 0.00000299999999999999992...
        value = repr(value)
    if not isinstance(value, int | str | Decimal):
        return None
    try:
        result = Decimal(value)
    except InvalidOperation:
        return None
    return result if result.is_finite() and result >= 0 else None


def money_str(value: Decimal) -> str:
    """Render a Decimal as a plain, exact string without exponent or trailing zeros."""
    if not value:
        return "0"
    normal = value.normalize()
    # str() writes plain notation whenever it can (exponent <= 0, down to 1E-6), as
    # format "f" does; it costs a seventh of format() here, and a reply renders ~8.
    text = str(normal)
    return text if "E" not in text else format(normal, "f")
