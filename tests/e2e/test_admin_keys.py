"""The admin keys API on a real gateway: create, list, show, revoke, rotate, and the audit log.

The gateway runs with an admin key (the auth middleware lets only it reach /admin), on a
real ledger; keys are used through real HTTP and the openai SDK.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import text

from gateway.ledger import make_engine
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.pg import fresh_pg_database, pg_url

ADMIN_KEY = "adm-test-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def keyed(make_gateway: GatewayFactory) -> Gateway:
    return make_gateway(admin_key=ADMIN_KEY)


@pytest.fixture
def admin(keyed: Gateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=keyed.server.url, headers=ADMIN, timeout=10) as client:
        yield client


def _models(gateway: Gateway, key: str) -> int:
    """The status of a read with `key` (any valid key may list models)."""
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{gateway.base_url}/models", headers=headers, timeout=10).status_code


def _audit(admin: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = admin.get("/admin/audit", params=params)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def test_create_shows_the_secret_once_and_the_key_works(
    keyed: Gateway, admin: httpx.Client
) -> None:
    body = {"name": "ci", "team": "research", "project": "agents", "models": ["chat", "sim-*"],
            "budget": {"daily_usd": "5"}}  # fmt: skip
    response = admin.post("/admin/keys", json=body)
    assert response.status_code == 201, response.text
    made = response.json()
    secret = made["key"]
    assert secret.startswith("fbx-") and made["prefix"] == secret[:12]
    assert made["id"].startswith("key_") and made["state"] == "active"
    assert made["team"] == "research" and made["models"] == ["chat", "sim-*"]
    assert made["budget"]["daily_usd"] == "5" and made["created_at"] and made["expires_at"] is None
    digest = hashlib.sha256(secret.encode()).hexdigest()
    # Never again: not in the listing, not in show, and no hash either.
    for path in ("/admin/keys", f"/admin/keys/{made['id']}", "/admin/keys?include_revoked=true"):
        answer = admin.get(path)
        assert answer.status_code == 200
        assert (
            secret not in answer.text and digest not in answer.text and '"key"' not in answer.text
        )
    shown = admin.get(f"/admin/keys/{made['id']}").json()
    assert shown["prefix"] == made["prefix"] and shown["team"] == "research"
    # It works at once on this replica, through the SDK, billed to its team.
    reply = keyed.sdk(api_key=secret).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices
    assert keyed.last().identity.team == "research"  # type: ignore[union-attr]


def test_the_database_holds_the_hash_not_the_secret(keyed: Gateway, admin: httpx.Client) -> None:
    made = admin.post("/admin/keys", json={"team": "research"}).json()

    async def rows() -> list[dict[str, Any]]:
        engine = make_engine(keyed.settings.ledger_url())
        try:
            async with engine.connect() as connection:
                result = await connection.execute(text("SELECT * FROM api_keys"))
                return [dict(row) for row in result.mappings()]
        finally:
            await engine.dispose()

    [row] = asyncio.run(rows())
    assert row["secret_hash"] == hashlib.sha256(made["key"].encode()).hexdigest()
    assert made["key"] not in repr(row)


def test_revoke_refuses_the_key_and_is_audited(keyed: Gateway, admin: httpx.Client) -> None:
    made = admin.post("/admin/keys", json={"team": "research"}).json()
    assert _models(keyed, made["key"]) == 200
    response = admin.delete(f"/admin/keys/{made['id']}")
    assert response.status_code == 200 and response.json()["state"] == "revoked"
    assert _models(keyed, made["key"]) == 401
    with pytest.raises(openai.AuthenticationError):
        keyed.sdk(api_key=made["key"]).models.list()
    assert admin.get("/admin/keys").json()["data"] == []
    [listed] = admin.get("/admin/keys", params={"include_revoked": "true"}).json()["data"]
    assert listed["id"] == made["id"] and listed["revoked_at"]
    actions = [(e["action"], e["outcome"], e["target"], e["actor"]) for e in _audit(admin)]
    assert actions == [
        ("keys.revoke", "accepted", made["id"], "admin"),
        ("keys.create", "accepted", made["id"], "admin"),
    ]
    [create] = _audit(admin, action="keys.create")
    assert create["detail"] == {"team": "research", "id": made["id"], "prefix": made["prefix"]}


def test_rotation_keeps_the_old_key_until_the_overlap_ends(
    keyed: Gateway, admin: httpx.Client
) -> None:
    old = admin.post("/admin/keys", json={"team": "research", "max_n": 2}).json()
    response = admin.post(f"/admin/keys/{old['id']}/rotate", json={"overlap_s": 1})
    assert response.status_code == 201, response.text
    new = response.json()
    assert new["key"] != old["key"] and new["rotated_from"] == old["id"]
    assert new["team"] == "research" and new["max_n"] == 2
    assert new["previous"]["id"] == old["id"] and "key" not in new["previous"]
    assert _models(keyed, old["key"]) == 200 and _models(keyed, new["key"]) == 200
    time.sleep(1.1)
    assert _models(keyed, old["key"]) == 401
    assert _models(keyed, new["key"]) == 200
    assert admin.get(f"/admin/keys/{old['id']}").json()["state"] == "expired"
    # An expired key is not rotated again: a 400 that says why, audited as refused.
    again = admin.post(f"/admin/keys/{old['id']}/rotate")
    assert _error(again, 400)["code"] == "key_expired"
    [refused] = _audit(admin, action="keys.rotate", limit=1)
    assert refused["outcome"] == "refused" and "expired" in refused["detail"]["reason"]
    [accepted] = [e for e in _audit(admin, action="keys.rotate") if e["outcome"] == "accepted"]
    assert accepted["target"] == old["id"] and accepted["detail"]["id"] == new["id"]
    assert accepted["detail"]["overlap_s"] == 1


def test_default_rotation_overlap_is_an_hour(admin: httpx.Client) -> None:
    old = admin.post("/admin/keys", json={}).json()
    new = admin.post(f"/admin/keys/{old['id']}/rotate").json()
    left = _epoch(new["previous"]["expires_at"]) - _epoch(new["created_at"])
    assert left == 3600


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"role": "boss"}, "role"),
        ({"teams": "research"}, "teams"),
        ({"budget": {"daily_usd": "-1"}}, "budget.daily_usd"),
        ({"max_n": 0}, "max_n"),
        ({"expires_at": "2030-01-01T00:00:00"}, "expires_at"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ([1, 2], "body"),  # not an object: the body itself
    ],
)
def test_bad_attributes_are_a_400_naming_the_field_and_audited(
    admin: httpx.Client, body: Any, param: str
) -> None:
    error = _error(admin.post("/admin/keys", json=body), 400)
    assert error["type"] == "invalid_request_error"
    assert (error["param"] or "") == param
    assert admin.get("/admin/keys").json()["data"] == []
    [entry] = _audit(admin)
    assert entry["action"] == "keys.create" and entry["outcome"] == "refused"
    assert entry["detail"]["reason"] == error["message"]


def test_bad_json_is_a_400(admin: httpx.Client) -> None:
    response = admin.post(
        "/admin/keys", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert "not valid JSON" in _error(response, 400)["message"]


def test_unknown_ids_are_404_in_openai_shape(admin: httpx.Client) -> None:
    for response in (
        admin.get("/admin/keys/key_nope"),
        admin.delete("/admin/keys/key_nope"),
        admin.post("/admin/keys/key_nope/rotate", json={"overlap_s": 5}),
    ):
        error = _error(response, 404)
        assert error["code"] == "key_not_found" and error["param"] == "id"
        assert "key_nope" in error["message"]
    refused = _audit(admin)
    assert [(e["action"], e["outcome"]) for e in refused] == [
        ("keys.rotate", "refused"),
        ("keys.revoke", "refused"),
    ]


def test_rotation_overlap_is_validated(admin: httpx.Client) -> None:
    made = admin.post("/admin/keys", json={}).json()
    error = _error(admin.post(f"/admin/keys/{made['id']}/rotate", json={"overlap_s": -1}), 400)
    assert error["param"] == "overlap_s"


def test_admin_routes_refuse_virtual_keys_and_no_key(keyed: Gateway, admin: httpx.Client) -> None:
    made = admin.post("/admin/keys", json={"team": "research"}).json()
    for headers, status in (({"Authorization": f"Bearer {made['key']}"}, 403), ({}, 401)):
        for method, path in (("POST", "/admin/keys"), ("GET", "/admin/keys"),
                             ("GET", "/admin/audit"), ("DELETE", f"/admin/keys/{made['id']}")):  # fmt: skip
            response = httpx.request(method, f"{keyed.server.url}{path}", headers=headers, json={})
            _error(response, status)
    assert [e["action"] for e in _audit(admin)] == ["keys.create"]


def test_audit_filters(admin: httpx.Client) -> None:
    made = admin.post("/admin/keys", json={"team": "research"}).json()
    admin.delete(f"/admin/keys/{made['id']}")
    assert [e["action"] for e in _audit(admin, action="keys.revoke")] == ["keys.revoke"]
    assert len(_audit(admin, actor="admin")) == 2
    assert _audit(admin, actor="open") == []
    assert len(_audit(admin, limit=1)) == 1
    assert _audit(admin, since="2999-01-01T00:00:00Z") == []
    assert len(_audit(admin, since="2000-01-01T00:00:00+00:00")) == 2
    assert (
        _error(admin.get("/admin/audit", params={"since": "2000-01-01T00:00:00"}), 400)["param"]
        == "since"
    )
    assert _error(admin.get("/admin/audit", params={"limit": 0}), 400)["param"] == "limit"


def test_open_mode_records_the_actor_as_open(gateway: Gateway) -> None:
    with httpx.Client(base_url=gateway.server.url, timeout=10) as client:
        made = client.post("/admin/keys", json={"team": "research"}).json()
        [entry] = client.get("/admin/audit").json()["data"]
    assert entry["actor"] == "open" and entry["target"] == made["id"]


@pytest.mark.postgres
async def test_a_key_made_on_one_replica_works_on_another(make_gateway: GatewayFactory) -> None:
    async with fresh_pg_database("keys_replicas") as name:
        shared = {"admin_key": ADMIN_KEY, "database_url": pg_url(name), "keys_refresh_s": 0.2}
        one, two = make_gateway(**shared), make_gateway(**shared)
        made = httpx.post(f"{one.server.url}/admin/keys", headers=ADMIN, json={"team": "r"}).json()
        assert _eventually(lambda: _models(two, made["key"]) == 200)
        httpx.delete(f"{one.server.url}/admin/keys/{made['id']}", headers=ADMIN)
        assert _models(one, made["key"]) == 401  # at once where it was revoked
        assert _eventually(lambda: _models(two, made["key"]) == 401)


@pytest.mark.postgres
async def test_a_new_key_works_on_its_first_request_to_another_replica(
    make_gateway: GatewayFactory,
) -> None:
    """No poll explains it (one a minute): the miss itself reloads the keys, and waits."""
    async with fresh_pg_database("keys_first_use") as name:
        shared = {"admin_key": ADMIN_KEY, "database_url": pg_url(name), "keys_refresh_s": 60}
        one, two = make_gateway(**shared), make_gateway(**shared)
        made = httpx.post(f"{one.server.url}/admin/keys", headers=ADMIN, json={"team": "r"}).json()
        assert _models(two, made["key"]) == 200
        made_too = httpx.post(f"{one.server.url}/admin/keys", headers=ADMIN, json={}).json()
        time.sleep(1.05)  # past the once-a-second bound on miss reloads
        assert _models(two, made_too["key"]) == 200


def _eventually(check: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False
