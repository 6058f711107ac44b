"""Auth modes over real HTTP: open mode, the admin key, bad credentials; 401/403 as the SDK sees them."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Gateway, GatewayFactory
from tests.servers import free_port

ADMIN_KEY = "farebox-admin-test-key-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]
# (method, path) per route class, each answered by a route of the app
ENDPOINTS = [
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("GET", "/v1/spend"),
    ("GET", "/v1/tasks/t-1"),
    ("POST", "/v1/tasks/t-1/finish"),
    ("GET", "/v1/gpu"),
    ("POST", "/v1/cost/estimate"),
    ("POST", "/v1/prefix/lint"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("POST", "/admin/reload"),
    ("GET", "/nowhere"),
]


@pytest.fixture
def keyed(make_gateway: GatewayFactory) -> Gateway:
    return make_gateway(admin_key=ADMIN_KEY)


def _call(gateway: Gateway, method: str, path: str, **headers: str) -> httpx.Response:
    body = {"model": "chat", "messages": MESSAGES} if method == "POST" else None
    url = f"{gateway.server.url}{path}"
    return httpx.request(method, url, json=body, headers=headers, timeout=30)


def _error(response: httpx.Response, status: int, fragment: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"].startswith("req-")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert fragment in error["message"], error
    return dict(error)


def test_no_key_and_a_wrong_key_are_401_everywhere_but_healthz(keyed: Gateway) -> None:
    cases: tuple[tuple[dict[str, str], str], ...] = (
        ({}, "no API key"),
        ({"x-api-key": "fbx-wrong"}, "invalid API key"),
    )
    for (method, path), (headers, fragment) in itertools.product(ENDPOINTS, cases):
        response = _call(keyed, method, path, **headers)
        error = _error(response, 401, fragment)
        assert error["code"] == "invalid_api_key"
        assert response.headers["www-authenticate"] == "Bearer"
        assert "fbx-wrong" not in response.text
    assert httpx.get(f"{keyed.server.url}/healthz").json() == {"status": "ok"}


def test_the_sdk_raises_its_own_classes(keyed: Gateway) -> None:
    with pytest.raises(openai.AuthenticationError) as no_key:
        keyed.sdk(api_key="not-a-key").chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert no_key.value.code == "invalid_api_key" and no_key.value.request_id
    with pytest.raises(openai.PermissionDeniedError) as admin:
        keyed.sdk(api_key=ADMIN_KEY).chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert "admin key makes none" in admin.value.message
    assert admin.value.status_code == 403 and admin.value.request_id
    # a read takes the admin key
    assert [m.id for m in keyed.sdk(api_key=ADMIN_KEY).models.list()]


def test_the_admin_key_reads_and_administers(keyed: Gateway) -> None:
    bearer = {"Authorization": f"Bearer {ADMIN_KEY}"}
    ready = _call(keyed, "GET", "/readyz", **bearer)
    assert ready.status_code == 200 and ready.json()["auth"] == "keys"
    assert _call(keyed, "GET", "/metrics", **bearer).text.count("farebox_") > 0
    reload = _call(keyed, "POST", "/admin/reload", **bearer)
    assert reload.status_code == 400  # an in-memory configuration has no file to re-read
    assert "in-memory configuration" in reload.json()["error"]["message"]
    _error(_call(keyed, "GET", "/nowhere", **bearer), 404, "/nowhere")  # then the router's 404


def test_x_api_key_is_accepted_and_two_different_keys_are_401(keyed: Gateway) -> None:
    ready = _call(keyed, "GET", "/readyz", **{"x-api-key": ADMIN_KEY})
    assert ready.status_code == 200
    same = {"x-api-key": ADMIN_KEY, "Authorization": f"Bearer {ADMIN_KEY}"}
    assert _call(keyed, "GET", "/readyz", **same).status_code == 200
    both = {"x-api-key": "fbx-other", "Authorization": f"Bearer {ADMIN_KEY}"}
    _error(_call(keyed, "GET", "/readyz", **both), 401, "two different keys")
    basic = {"Authorization": "Basic YWRtaW46YWRtaW4="}
    _error(_call(keyed, "GET", "/readyz", **basic), 401, "must be `Bearer <key>`")


def test_open_mode_lets_everyone_through_and_says_so(gateway: Gateway) -> None:
    for headers in ({}, {"Authorization": "Bearer anything"}, {"x-api-key": "sk-whatever"}):
        ready = _call(gateway, "GET", "/readyz", **headers)
        assert ready.status_code == 200 and ready.json()["auth"] == "open"
        assert _call(gateway, "GET", "/metrics", **headers).status_code == 200
    completion = gateway.sdk(api_key="anything").chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
    )
    assert completion.choices[0].message.content


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    clean.update(FAREBOX_DATA_DIR=str(tmp_path / "data"), **env)
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(free_port()), *args]
    return subprocess.run(command, env=clean, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "env"), [(("--host", "0.0.0.0"), {}), ((), {"FAREBOX_HOST": "10.1.2.3"})]
)
def test_serve_refuses_a_public_address_in_open_mode(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    result = _serve(tmp_path, *args, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "refusing to serve in open mode" in " ".join(result.stderr.split())
    assert "--allow-open" in result.stderr
