"""Who is calling, once the credential is checked: the open mode, the admin key, or a key.

Pure data: `gateway.auth` builds one per request (see docs/security.md); routes and the
pipeline read it from `request.scope["farebox.principal"]` (`principal_of`).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.keys.model import KeyRecord

PrincipalKind = Literal["open", "admin", "key"]
SCOPE_KEY = "farebox.principal"


@dataclass(frozen=True, slots=True)
class Principal:
    """`open`: no admin key configured (local development): everything allowed, headers
    believed. `admin`: the admin key. `key`: a virtual key, `key` its record."""

    kind: PrincipalKind
    key: KeyRecord | None = None

    @property
    def is_key(self) -> bool:
        return self.kind == "key"

    @property
    def role(self) -> str:
        """`open`, `admin`, or the key's role (member, service, finance)."""
        return self.key.attributes.role if self.key is not None else self.kind

    @property
    def team(self) -> str | None:
        return self.key.attributes.team if self.key is not None else None

    @property
    def project(self) -> str | None:
        return self.key.attributes.project if self.key is not None else None

    @property
    def sees_all(self) -> bool:
        """Reads every team's data: the open mode, the admin key, a finance key."""
        return self.kind != "key" or self.role == "finance"

    @property
    def may_set_identity(self) -> bool:
        """May name team, project and plan per request (headers): open mode or a service key."""
        return self.kind == "open" or self.role == "service"

    @property
    def caller(self) -> str | None:
        """What the ledger's `caller` column holds for this principal: the key id."""
        return self.key.id if self.key is not None else None


OPEN = Principal("open")
ADMIN = Principal("admin")


def principal_of(scope: MutableMapping[str, Any]) -> Principal:
    """The principal the auth middleware set on this request.

    Missing is a wiring bug, never a reason to let the request through: it raises.
    """
    principal = scope.get(SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise RuntimeError("no principal on this request: the auth middleware did not run")
    return principal
