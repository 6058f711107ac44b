"""A virtual key as stored and as a request sees it: attributes, and the record around them.

Pure data: no I/O. The secret is never here; a record holds only its SHA-256 (`secret_hash`)
and a short public prefix (`prefix`, e.g. `fbx-3k9xq2ab`) for logs and listings.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["member", "service", "finance"]
"""member: calls models as its own team/project; service: may also set team and project per
request (internal platforms); finance: reads every team's spend, makes no model calls."""

OutagePolicy = Literal["fail_closed", "fail_open"]


class KeyBudget(BaseModel):
    """USD a key may spend per UTC day, UTC month and in total (None: no limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    daily_usd: Decimal | None = Field(default=None, ge=0)
    monthly_usd: Decimal | None = Field(default=None, ge=0)
    total_usd: Decimal | None = Field(default=None, ge=0)
    soft_ratio: Decimal | None = Field(default=Decimal("0.8"), gt=0, lt=1)
    on_state_outage: OutagePolicy = "fail_closed"


class KeyRateLimit(BaseModel):
    """Requests, tokens and USD per minute (None: no limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests_per_min: int | None = Field(default=None, gt=0)
    tokens_per_min: int | None = Field(default=None, gt=0)
    usd_per_min: Decimal | None = Field(default=None, gt=0)
    on_state_outage: OutagePolicy = "fail_open"


class KeyAttributes(BaseModel):
    """What `POST /admin/keys` takes: who the key bills, and what it may ask for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, max_length=128)
    team: str | None = Field(default=None, max_length=128)
    project: str | None = Field(default=None, max_length=128)
    plan: str | None = Field(default=None, max_length=128)
    role: Role = "member"
    models: tuple[str, ...] | None = None  # model aliases (glob patterns); None: all
    tiers: tuple[str, ...] | None = None  # speed tiers it may request; None: all
    max_output_tokens: int | None = Field(default=None, gt=0)  # clamps max_(completion_)tokens
    max_n: int | None = Field(default=None, gt=0)  # `n` above it is refused
    budget: KeyBudget | None = None
    rate_limit: KeyRateLimit | None = None
    expires_at: datetime | None = None  # timezone-aware


class KeyRecord(BaseModel):
    """A stored key: its id, public prefix, secret hash, attributes and life."""

    model_config = ConfigDict(frozen=True)

    id: str  # e.g. key_3k9xq2ab..., stable across listings, used in URLs and the ledger
    prefix: str  # the first characters of the secret, safe to show
    secret_hash: str  # hex SHA-256 of the whole secret
    attributes: KeyAttributes
    created_at: datetime
    revoked_at: datetime | None = None
    expires_at: datetime | None = None  # the attribute, or the end of a rotation's overlap
    rotated_from: str | None = None  # the id of the key this one replaced

    def state_at(self, now: datetime) -> Literal["active", "revoked", "expired"]:
        """Whether the key may be used at `now`."""
        if self.revoked_at is not None and self.revoked_at <= now:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"
