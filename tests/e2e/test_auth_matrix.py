"""Every endpoint x every credential state: the status and the OpenAI error shape each gets.

One keyed gateway (an admin key configured) on the simulator, with real virtual keys made
through the admin API: team alpha's member key owns a task; team beta's member key, a
finance key, a revoked key and an expired key try every route of the app. `ENDPOINTS`
must cover every path and method the app serves (the first test fails on a new route
that is not in it), so no endpoint is left out of the matrix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from gateway.anthropic_errors import anthropic_type, is_messages_path
from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings
from tests.e2e.conftest import Gateway, GatewayFactory

ADMIN_KEY = "adm-matrix-0123456789abcdef"
TASK = "alpha-task-1"
CHAT: dict[str, Any] = {
    "model": "chat",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 8,
}


MESSAGE: dict[str, Any] = {"model": "claude", "max_tokens": 8, "messages": CHAT["messages"]}
COUNT: dict[str, Any] = {"model": "claude", "messages": CHAT["messages"]}
RESPONSE: dict[str, Any] = {"model": "chat", "input": "hi", "max_output_tokens": 16}
COMPLETION: dict[str, Any] = {"model": "chat", "prompt": "hi", "max_tokens": 8}
EMBEDDING: dict[str, Any] = {"model": "embed", "input": "hi"}
MODEL_CALLS = (
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/completions",
    "/v1/embeddings",
)
STORED = ("/v1/responses/{response_id}", "/v1/responses/{response_id}/input_items")


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # the route's path with its parameters filled in
    route: str  # the route as the app declares it
    json: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


ENDPOINTS = (
    Endpoint("POST", "/v1/chat/completions", "/v1/chat/completions", CHAT, {"X-Task-Id": TASK}),
    Endpoint("POST", "/v1/messages", "/v1/messages", MESSAGE, {"X-Task-Id": TASK}),
    Endpoint("POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens", COUNT),
    Endpoint("POST", "/v1/responses", "/v1/responses", RESPONSE, {"X-Task-Id": TASK}),
    Endpoint("POST", "/v1/completions", "/v1/completions", COMPLETION, {"X-Task-Id": TASK}),
    Endpoint("POST", "/v1/embeddings", "/v1/embeddings", EMBEDDING, {"X-Task-Id": TASK}),
    Endpoint("GET", "/v1/responses/{response}", STORED[0]),
    Endpoint("GET", "/v1/responses/{response}/input_items", STORED[1]),
    Endpoint("DELETE", "/v1/responses/{response}", STORED[0]),
    Endpoint("GET", "/v1/models", "/v1/models"),
    Endpoint("GET", "/healthz", "/healthz"),
    Endpoint("GET", "/readyz", "/readyz"),
    Endpoint("POST", f"/v1/tasks/{TASK}/finish", "/v1/tasks/{task_id}/finish", {}),
    Endpoint("GET", f"/v1/tasks/{TASK}", "/v1/tasks/{task_id}"),
    Endpoint("GET", "/v1/spend", "/v1/spend", params={"team": "alpha"}),
    Endpoint("GET", "/v1/spend/tasks", "/v1/spend/tasks", params={"team": "alpha"}),
    Endpoint(
        "POST",
        "/v1/cost/estimate",
        "/v1/cost/estimate",
        {"model": "claude", "input_tokens": 1000, "output_tokens": 100},
    ),
    Endpoint("GET", "/v1/gpu", "/v1/gpu"),
    *(
        Endpoint("GET", f"/v1/explorer/{name}", f"/v1/explorer/{name}", params={"team": "alpha"})
        for name in ("spend", "breakdown", "cache", "tasks", "gpu")
    ),
    Endpoint("POST", "/v1/prefix/lint", "/v1/prefix/lint", CHAT),
    Endpoint("POST", "/admin/reload", "/admin/reload"),
    Endpoint("POST", "/admin/keys", "/admin/keys", {"team": "gamma"}),
    Endpoint("GET", "/admin/keys", "/admin/keys"),
    Endpoint("GET", "/admin/keys/{victim}", "/admin/keys/{key_id}"),
    Endpoint("DELETE", "/admin/keys/{victim}", "/admin/keys/{key_id}"),
    Endpoint("POST", "/admin/keys/{victim}/rotate", "/admin/keys/{key_id}/rotate", {}),
    Endpoint("GET", "/admin/audit", "/admin/audit"),
    Endpoint("GET", "/metrics", "/metrics"),
)


def test_the_matrix_covers_every_route(tmp_path: Any) -> None:
    config = parse_config("models:\n  m:\n    model: m\n    base_url: http://127.0.0.1:9/v1\n")
    app = create_app(Settings(data_dir=tmp_path, admin_key=ADMIN_KEY), config)  # type: ignore[arg-type]
    served = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    covered = {(endpoint.method, endpoint.route) for endpoint in ENDPOINTS}
    assert served - covered == set(), "add these routes to ENDPOINTS"


@dataclass
class World:
    gateway: Gateway
    keys: dict[str, str]  # state -> secret
    victim: str  # the id of a key the admin routes act on
    http: httpx.Client  # one client: a new one per call builds an SSL context (~50 ms)
    response: str = ""  # the id of alpha's stored response


def _admin(gateway: Gateway) -> httpx.Client:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    return httpx.Client(base_url=gateway.server.url, headers=headers, timeout=10)


def _make_key(admin: httpx.Client, **attributes: Any) -> dict[str, Any]:
    response = admin.post("/admin/keys", json=attributes)
    assert response.status_code == 201, response.text
    return dict(response.json())


@pytest.fixture
def world(make_gateway: GatewayFactory) -> Iterator[World]:
    gateway = make_gateway(admin_key=ADMIN_KEY)
    with _admin(gateway) as admin:
        alpha = _make_key(admin, name="alpha", team="alpha")
        beta = _make_key(admin, name="beta", team="beta")
        finance = _make_key(admin, name="finance", role="finance")
        revoked = _make_key(admin, name="revoked", team="alpha")
        assert admin.delete(f"/admin/keys/{revoked['id']}").status_code == 200
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        expired = _make_key(admin, name="expired", team="alpha", expires_at=soon)
        victim = _make_key(admin, name="victim", team="alpha")
    # Alpha's task exists: in the ledger and claimed for alpha.
    reply = gateway.sdk(api_key=alpha["key"]).chat.completions.create(
        **CHAT, extra_headers={"X-Task-Id": TASK}
    )
    assert reply.choices[0].message.content
    kept = gateway.sdk(api_key=alpha["key"]).responses.create(**RESPONSE)
    while datetime.now(UTC).isoformat() <= soon:  # the expired key's time has passed
        time.sleep(0.05)
    keys = {
        "none": "",
        "wrong": "fbx-" + "x" * 43,
        "revoked": revoked["key"],
        "expired": expired["key"],
        "other_team": beta["key"],
        "own_team": alpha["key"],
        "finance": finance["key"],
        "admin": ADMIN_KEY,
    }
    with httpx.Client(base_url=gateway.server.url, timeout=30) as http:
        yield World(gateway, keys, victim["id"], http, kept.id)


def _call(world: World, endpoint: Endpoint, state: str) -> httpx.Response:
    headers = dict(endpoint.headers)
    if world.keys[state]:
        headers["Authorization"] = f"Bearer {world.keys[state]}"
    path = endpoint.path.replace("{victim}", world.victim).replace("{response}", world.response)
    return world.http.request(
        endpoint.method,
        path,
        json=endpoint.json,
        headers=headers,
        params=endpoint.params,
        timeout=30,
    )


def _expected(endpoint: Endpoint, state: str) -> tuple[int, str | None]:
    """(status, error code or None) for `state` calling `endpoint`."""
    path = endpoint.route
    if path == "/healthz":
        return 200, None
    if state in ("none", "wrong", "revoked", "expired"):
        return 401, "invalid_api_key"
    admin_route, model_call = path.startswith("/admin/"), path in MODEL_CALLS + STORED
    if state == "admin":
        if model_call:
            return 403, "permission_denied"
        if path == "/admin/reload":  # past auth; this gateway's configuration has no file
            return 400, "invalid_config"
        return (201, None) if endpoint.method == "POST" and path in _CREATES else (200, None)
    if admin_route:  # a virtual key of any role on an admin route
        return 403, "permission_denied"
    if path == "/metrics":
        return (200, None) if state == "finance" else (403, "permission_denied")
    if state == "finance":
        return (403, "permission_denied") if model_call or "finish" in path else (200, None)
    if state == "own_team":
        return 200, None
    if path == "/v1/messages/count_tokens":
        return 200, None  # no task: nothing of alpha's to own
    if path in STORED:  # alpha's stored response: as unknown to another team
        return 404, "response_not_found"
    # Another team's key, on alpha's task and alpha's numbers.
    if model_call or "finish" in path:
        return 403, "task_not_owned"
    if path == "/v1/tasks/{task_id}":
        return 404, "task_not_found"
    if path.startswith(("/v1/spend", "/v1/explorer")):
        return 403, "team_not_allowed"
    return 200, None


_CREATES = ("/admin/keys", "/admin/keys/{key_id}/rotate")  # with POST: 201
STATES = ("none", "wrong", "revoked", "expired", "other_team", "own_team", "finance", "admin")


def test_every_endpoint_answers_each_credential_state(world: World) -> None:
    """One world for all states (a gateway start each would cost the suite a minute)."""
    wrong: list[str] = []
    for state in STATES:  # the admin last: it revokes the victim key
        # The admin's DELETE after its rotate, so the victim is still there to rotate.
        for endpoint in sorted(ENDPOINTS, key=lambda e: e.method == "DELETE"):
            response = _call(world, endpoint, state)
            status, code = _expected(endpoint, state)
            problem = _check(response, status, code, endpoint.route)
            if problem:
                wrong.append(f"{state}: {endpoint.method} {endpoint.path}: {problem}")
    assert not wrong, "\n".join(wrong)


def _check(response: httpx.Response, status: int, code: str | None, path: str = "") -> str | None:
    if response.status_code != status:
        return f"{response.status_code} (expected {status}): {response.text[:200]}"
    if code is None:
        return None
    body = response.json()
    if is_messages_path(path):  # Anthropic's shape, which has no code: the type says it
        return _check_anthropic(response, body, status)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        return f"not the OpenAI error shape: {body}"
    if error["code"] != code:
        return f"code {error['code']!r} (expected {code!r}): {error['message']}"
    if status == 401 and response.headers.get("www-authenticate") != "Bearer":
        return "a 401 without WWW-Authenticate: Bearer"
    if "x-request-id" not in response.headers:
        return "no x-request-id"
    return None


def _check_anthropic(response: httpx.Response, body: Any, status: int) -> str | None:
    error = body.get("error") if isinstance(body, dict) else None
    if body.get("type") != "error" or not isinstance(error, dict):
        return f"not the Anthropic error shape: {body}"
    if set(error) != {"type", "message"} or error["type"] != anthropic_type(status):
        return f"not Anthropic's {anthropic_type(status)}: {body}"
    if status == 401 and response.headers.get("www-authenticate") != "Bearer":
        return "a 401 without WWW-Authenticate: Bearer"
    if "x-request-id" not in response.headers:
        return "no x-request-id"
    return None


def test_no_secret_in_any_refusal(world: World) -> None:
    """A refusal names at most a key's public prefix, never the secret."""
    for state in ("wrong", "revoked", "expired", "other_team", "finance"):
        secret = world.keys[state]
        for endpoint in ENDPOINTS:
            response = _call(world, endpoint, state)
            assert secret not in response.text, (state, endpoint.path)


SDK_ERRORS: dict[str, type[openai.APIStatusError]] = {
    "wrong": openai.AuthenticationError,  # (no key at all: the SDK refuses to send that)
    "revoked": openai.AuthenticationError,
    "expired": openai.AuthenticationError,
    "other_team": openai.PermissionDeniedError,
    "finance": openai.PermissionDeniedError,
    "admin": openai.PermissionDeniedError,
}


def test_the_sdk_raises_its_own_error_class(world: World) -> None:
    before = len(world.gateway.seen)
    for state, error in SDK_ERRORS.items():
        client = world.gateway.sdk(api_key=world.keys[state])
        with pytest.raises(error) as raised:
            client.chat.completions.create(**CHAT, extra_headers={"X-Task-Id": TASK})
        assert isinstance(raised.value.body, dict) and raised.value.body.get("code"), state
    assert len(world.gateway.seen) == before  # refused before the pipeline: nothing booked
