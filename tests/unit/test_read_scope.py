"""Who reads which rows: each kind of principal and filter, and the refusals."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.api.read_scope import scope_for
from gateway.auth.principal import ADMIN, OPEN, Principal
from gateway.errors import PermissionDeniedError
from gateway.keys.model import KeyAttributes, KeyRecord
from gateway.ledger.scope import EVERYTHING, ReadScope


def key(**attributes: object) -> Principal:
    record = KeyRecord(
        id="key_test",
        prefix="fbx-test",
        secret_hash="0" * 64,
        attributes=KeyAttributes.model_validate(attributes),
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return Principal("key", record)


@pytest.mark.parametrize("principal", [OPEN, ADMIN, key(role="finance", team="books")])
def test_those_who_see_all_get_everything_or_their_filters(principal: Principal) -> None:
    assert scope_for(principal) == EVERYTHING
    assert scope_for(principal, "beta", "api") == ReadScope(team="beta", project="api")


@pytest.mark.parametrize("role", ["member", "service"])
def test_a_team_key_reads_its_team_whatever_its_project(role: str) -> None:
    principal = key(team="alpha", project="web", role=role)
    assert scope_for(principal) == ReadScope(team="alpha")
    assert scope_for(principal, "alpha", "api") == ReadScope(team="alpha", project="api")


def test_another_team_is_a_403_naming_the_filter() -> None:
    with pytest.raises(PermissionDeniedError) as refused:
        scope_for(key(team="alpha"), "beta")
    assert refused.value.param == "team" and refused.value.code == "team_not_allowed"
    assert "alpha" in refused.value.message and refused.value.status_code == 403


def test_a_key_without_a_team_reads_its_own_rows_its_filters_narrowing_them() -> None:
    principal = key(name="script")
    assert scope_for(principal) == ReadScope(caller="key_test")
    assert scope_for(principal, "beta") == ReadScope(team="beta", caller="key_test")
