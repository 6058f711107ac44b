"""Budget periods on UTC calendar boundaries: which window `now` falls in, when it resets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gateway.tenants.limits import Period

# A closed window's counters outlive it a while, so that a late settle still lands in the
# window its reservation was made in (and a report can read it), then Redis drops them.
KEEP_AFTER_RESET = timedelta(days=2)


@dataclass(frozen=True, slots=True)
class Window:
    """One period's window: a name for its counters and when the next one starts."""

    name: str  # "day:2026-11-30", "month:2026-11" or "total"
    resets_at: datetime | None  # None: a lifetime budget never resets


def window(period: Period, now: datetime) -> Window:
    """The window of `period` that `now` (timezone-aware) falls in."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (use datetime.now(UTC))")
    now = now.astimezone(UTC)
    if period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return Window(f"day:{start:%Y-%m-%d}", start + timedelta(days=1))
    if period == "month":
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = start.replace(year=start.year + 1, month=1) if start.month == 12 else None
        return Window(f"month:{start:%Y-%m}", following or start.replace(month=start.month + 1))
    return Window("total", None)


def keep_for_s(resets_at: datetime | None, now: datetime) -> int | None:
    """Seconds a window's counters are kept from `now` (None: for good)."""
    if resets_at is None:
        return None
    return max(math.ceil((resets_at + KEEP_AFTER_RESET - now).total_seconds()), 1)
