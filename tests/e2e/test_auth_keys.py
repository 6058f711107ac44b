"""Virtual keys against every route class over real HTTP, and /metrics with and without a key."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory, sim_config
from tests.servers import free_port, running

ADMIN_KEY = "farebox-admin-keys-test-key-77"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
MESSAGES = [{"role": "user", "content": "hi"}]
# (method, path) -> status for (member, service, finance), with a valid key of each role
MATRIX = {
    ("POST", "/v1/chat/completions"): (200, 200, 403),
    ("GET", "/v1/models"): (200, 200, 200),
    ("GET", "/v1/spend"): (200, 200, 200),
    ("GET", "/v1/gpu"): (200, 200, 200),
    ("GET", "/readyz"): (200, 200, 200),
    ("GET", "/metrics"): (403, 403, 200),
    ("POST", "/admin/reload"): (403, 403, 403),
    ("GET", "/admin/keys"): (403, 403, 403),
    ("GET", "/admin/audit"): (403, 403, 403),
    ("GET", "/nowhere"): (404, 404, 404),
    ("GET", "/healthz"): (200, 200, 200),
}


def _make_key(url: str, **attributes: Any) -> dict[str, Any]:
    made = httpx.post(f"{url}/admin/keys", headers=ADMIN, json=attributes, timeout=10)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _call(url: str, method: str, path: str, key: str) -> httpx.Response:
    body = {"model": "chat", "messages": MESSAGES} if method == "POST" else None
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=30)


@pytest.fixture
def keyed(make_gateway: GatewayFactory) -> Gateway:
    return make_gateway(admin_key=ADMIN_KEY)


def test_each_role_on_each_route_class(keyed: Gateway) -> None:
    url = keyed.server.url
    keys = [_make_key(url, team="a", role=role)["key"] for role in ("member", "service", "finance")]
    for (method, path), statuses in MATRIX.items():
        for key, expected in zip(keys, statuses, strict=True):
            response = _call(url, method, path, key)
            assert response.status_code == expected, (method, path, response.text)
            assert response.headers["x-request-id"].startswith("req-")
            if expected == 403:
                error = response.json()["error"]
                assert error["type"] == "permission_error" and error["message"]


def test_the_sdk_sees_401_for_revoked_and_expired_keys_and_403_for_finance(
    keyed: Gateway,
) -> None:
    url = keyed.server.url
    revoked = _make_key(url, team="a")
    assert httpx.delete(f"{url}/admin/keys/{revoked['id']}", headers=ADMIN).status_code == 200
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    expiring = _make_key(url, team="a", expires_at=soon)
    finance = _make_key(url, team="a", role="finance")
    time.sleep(1.2)
    for made, word in ((revoked, "revoked"), (expiring, "expired")):
        with pytest.raises(openai.AuthenticationError) as caught:
            keyed.sdk(api_key=made["key"]).models.list()
        message = caught.value.message
        assert f"was {word}" in message and made["prefix"] in message and made["id"] in message
        assert made["key"] not in message and made["key"] not in caught.value.response.text
        assert caught.value.response.headers["www-authenticate"] == "Bearer"
    for method, path in MATRIX:  # every route class answers them the same 401
        for made, word in ((revoked, "revoked"), (expiring, "expired")):
            response = _call(url, method, path, made["key"])
            if path == "/healthz":
                assert response.status_code == 200
                continue
            assert response.status_code == 401, (path, response.text)
            assert f"was {word}" in response.json()["error"]["message"]
    with pytest.raises(openai.PermissionDeniedError) as denied:
        keyed.sdk(api_key=finance["key"]).chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert "finance keys" in denied.value.message


def test_x_api_key_carries_a_virtual_key(keyed: Gateway) -> None:
    member = _make_key(keyed.server.url, team="a")["key"]
    response = httpx.post(
        f"{keyed.base_url}/chat/completions",
        headers={"x-api-key": member},
        json={"model": "chat", "messages": MESSAGES},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert keyed.last().status_code == 200


def test_a_route_missing_from_the_table_takes_the_admin_key(
    sim: SimControl, tmp_path: Path
) -> None:
    settings = Settings(admin_key=ADMIN_KEY, data_dir=tmp_path)  # type: ignore[arg-type]
    app = create_app(settings, sim_config(sim.url))

    async def unlisted() -> dict[str, str]:
        return {"reached": "yes"}

    app.add_api_route("/v1/unclassified", unlisted)
    with running(app, settings) as server:
        member = _make_key(server.url, team="a")["key"]
        refused = _call(server.url, "GET", "/v1/unclassified", member)
        assert refused.status_code == 403, refused.text
        assert _call(server.url, "GET", "/v1/unclassified", ADMIN_KEY).json() == {"reached": "yes"}


def test_metrics_port_serves_without_a_key(make_gateway: GatewayFactory) -> None:
    port = free_port()
    gateway = make_gateway(admin_key=ADMIN_KEY, metrics_port=port)
    assert httpx.get(f"{gateway.server.url}/metrics").status_code == 401
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics")
    assert scraped.status_code == 200 and "farebox_requests" in scraped.text
    assert scraped.headers["content-type"].startswith("text/plain")
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 404
    assert httpx.post(f"http://127.0.0.1:{port}/metrics").status_code == 405
    gateway.stop()  # the lifespan stops it with the gateway
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
