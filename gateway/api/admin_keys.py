"""Admin: virtual keys (create, list, show, revoke, rotate) and the audit log.

Only the admin key reaches these routes (the auth middleware, `gateway.auth`), or anyone
in open mode. Every change, accepted or refused, writes an audit entry naming who asked
(`admin` or `open`); an accepted one in the change's own transaction. A key's secret is
in the answer to its creation or rotation only; listings show its public prefix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.api.deps import ServicesDep
from gateway.audit import AuditEntry
from gateway.audit.log import AuditQuery
from gateway.auth.principal import principal_of
from gateway.errors import FareboxError, InvalidRequestError, LedgerUnavailableError
from gateway.keys.model import KeyAttributes, KeyRecord
from gateway.keys.store import KeyNotActive, NewKey
from gateway.ledger.reads import ledger_down
from gateway.schemas.body import invalid_field
from gateway.services import Services

router = APIRouter()

MAX_OVERLAP_S = 30 * 86400


class KeyNotFoundError(FareboxError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "key_not_found"


class Rotation(BaseModel):
    """`POST /admin/keys/{id}/rotate`: how long the old key keeps working."""

    model_config = ConfigDict(extra="forbid")

    overlap_s: float = Field(default=3600, ge=0, le=MAX_OVERLAP_S)


def key_view(record: KeyRecord, now: datetime, secret: str | None = None) -> dict[str, Any]:
    """A key as the API shows it: never its hash; its secret only when just made."""
    view: dict[str, Any] = {"object": "farebox.key", "id": record.id, "prefix": record.prefix}
    if secret is not None:
        view["key"] = secret
    view["state"] = record.state_at(now)
    view.update(record.attributes.model_dump(mode="json"))
    view.update(record.model_dump(mode="json", include={"created_at", "expires_at"}))
    view.update(record.model_dump(mode="json", include={"revoked_at", "rotated_from"}))
    return view


def summary(attributes: KeyAttributes) -> dict[str, Any]:
    """What an audit entry keeps of a key's attributes: the ones that are set."""
    return attributes.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


@router.post("/admin/keys", status_code=201)
async def create_key(request: Request, services: ServicesDep) -> JSONResponse:
    """Make a key for the attributes in the body; the answer's `key` is its only copy."""
    actor = _actor(request)
    try:
        attributes = _attributes(await request.body())
    except InvalidRequestError as exc:
        await _refused(services, actor, "keys.create", None, exc)
        raise
    entry = _accepted(actor, "keys.create", None, summary(attributes))
    with _ledger():
        made = await services.keys.store.create(attributes, audit=entry)
    services.keys.put(made.record)
    return JSONResponse(_made_view(made), status_code=201)


@router.get("/admin/keys")
async def list_keys(services: ServicesDep, include_revoked: bool = False) -> dict[str, Any]:
    """Every key (revoked ones with `?include_revoked=true`), oldest first."""
    with _ledger():
        records = await services.keys.store.list(include_revoked=include_revoked)
    now = datetime.now(UTC)
    return {"object": "list", "data": [key_view(record, now) for record in records]}


@router.get("/admin/keys/{key_id}")
async def show_key(key_id: str, services: ServicesDep) -> dict[str, Any]:
    """One key, without its secret or hash."""
    with _ledger():
        record = await services.keys.store.get(key_id)
    if record is None:
        raise _not_found(key_id)
    return key_view(record, datetime.now(UTC))


@router.delete("/admin/keys/{key_id}")
async def revoke_key(key_id: str, request: Request, services: ServicesDep) -> dict[str, Any]:
    """Revoke a key now (again: no change); every replica refuses it within a refresh."""
    actor = _actor(request)
    entry = _accepted(actor, "keys.revoke", key_id, {})
    with _ledger():
        record = await services.keys.store.revoke(key_id, audit=entry)
    if record is None:
        error = _not_found(key_id)
        await _refused(services, actor, "keys.revoke", key_id, error)
        raise error
    services.keys.put(record)
    return key_view(record, datetime.now(UTC))


@router.post("/admin/keys/{key_id}/rotate", status_code=201)
async def rotate_key(key_id: str, request: Request, services: ServicesDep) -> JSONResponse:
    """A new key with the same attributes; the old one works `overlap_s` more seconds."""
    actor = _actor(request)
    try:
        rotation = _rotation(await request.body())
        entry = _accepted(actor, "keys.rotate", key_id, {"overlap_s": rotation.overlap_s})
        with _ledger():
            rotated = await services.keys.store.rotate(key_id, rotation.overlap_s, audit=entry)
        if rotated is None:
            raise _not_found(key_id)
    except KeyNotActive as exc:
        error = InvalidRequestError(
            f"key '{key_id}' is {exc.state} and cannot be rotated: create a new key",
            param="id", code=f"key_{exc.state}",
        )  # fmt: skip
        await _refused(services, actor, "keys.rotate", key_id, error)
        raise error from None
    except (InvalidRequestError, KeyNotFoundError) as exc:
        await _refused(services, actor, "keys.rotate", key_id, exc)
        raise
    made, old = rotated
    services.keys.put(old)
    services.keys.put(made.record)
    view = _made_view(made)
    view["previous"] = key_view(old, made.record.created_at)
    return JSONResponse(view, status_code=201)


@router.get("/admin/audit")
async def read_audit(
    services: ServicesDep,
    since: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Audit entries, newest first; `since` is an ISO 8601 time with its offset."""
    try:
        query = AuditQuery.model_validate(
            {"since": since, "action": action, "actor": actor, "limit": limit}
        )
    except ValidationError as exc:
        raise invalid_field(exc.errors()) from None
    with _ledger():
        entries = await services.audit.read(query)
    return {"object": "list", "data": [entry.model_dump(mode="json") for entry in entries]}


def _actor(request: Request) -> str:
    principal = principal_of(request.scope)
    return principal.kind if principal.key is None else f"key:{principal.key.id}"


def _attributes(raw: bytes) -> KeyAttributes:
    """The body's attributes, or a 400 naming the field."""
    try:
        attributes = KeyAttributes.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise invalid_field(exc.errors()) from None
    expires_at = attributes.expires_at
    if expires_at is not None and expires_at.tzinfo is None:
        raise InvalidRequestError(
            "invalid field 'expires_at': give a time zone (e.g. 2027-01-01T00:00:00Z)",
            param="expires_at",
        )
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise InvalidRequestError(
            "invalid field 'expires_at': the time is already past", param="expires_at"
        )
    return attributes


def _rotation(raw: bytes) -> Rotation:
    try:
        return Rotation.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        raise invalid_field(exc.errors()) from None


def _made_view(made: NewKey) -> dict[str, Any]:
    return key_view(made.record, made.record.created_at, secret=made.secret)


def _not_found(key_id: str) -> KeyNotFoundError:
    return KeyNotFoundError(f"no key with id '{key_id}'", param="id")


def _accepted(actor: str, action: str, target: str | None, detail: dict[str, Any]) -> AuditEntry:
    return AuditEntry(
        at=datetime.now(UTC), actor=actor, action=action, target=target,
        outcome="accepted", detail=detail,
    )  # fmt: skip


async def _refused(
    services: Services, actor: str, action: str, target: str | None, error: FareboxError
) -> None:
    detail = {"reason": error.message, "param": error.param, "status": error.status_code}
    await services.audit.record(
        actor=actor, action=action, target=target, outcome="refused", detail=detail
    )


@contextlib.contextmanager
def _ledger() -> Iterator[None]:
    """A database outage is a 503 that says so, not a 500."""
    try:
        yield
    except ledger_down() as exc:
        raise LedgerUnavailableError(
            "the ledger database, where keys are kept, is unreachable; retry shortly "
            "(keys already issued keep working)"
        ) from exc
