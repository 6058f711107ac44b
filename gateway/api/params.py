"""Query parameters shared by the reporting routes, validated into what the ledger accepts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def as_utc(value: datetime) -> datetime:
    """An aware UTC instant; a time without a zone is read as UTC."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:59-05:00 is past the last representable time
        raise ValueError("the time is out of range once converted to UTC") from None


# `since`/`until`: naive and zone-aware times may be mixed; both become aware UTC.
Instant = Annotated[datetime, AfterValidator(as_utc)]
