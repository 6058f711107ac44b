"""Hostile client input gets a 400-class answer in OpenAI's shape, never a 500.

Each case is one of the classes a hostile run against the gateway turned up: nesting
deep enough to exhaust Python's stack, shapes the schema does not allow, time zones
mixed in a query, bodies over the limit, and inputs that an error message would echo.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings

API_LIMIT = 64 * 1024


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One gateway for the module: every case here is refused before any state changes."""
    tmp_path = tmp_path_factory.mktemp("hostile")
    config = parse_config(
        f"models:\n  dead:\n    model: m\n    base_url: http://127.0.0.1:{_dead_port()}/v1\n"
    )
    settings = Settings(data_dir=tmp_path, max_body_bytes=512 * 1024, max_api_body_bytes=API_LIMIT)
    with TestClient(create_app(settings, config)) as test_client:
        yield test_client


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert len(response.content) < 5000  # never an echo of the input
    return dict(body["error"])


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": "dead", "messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize("depth", [200, 1_000, 1_100, 50_000])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/prefix/lint"])
def test_deep_nesting_is_a_400_that_says_so(client: TestClient, route: str, depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    raw = b'{"model":"dead","messages":[{"role":"user","content":"x"}],"x":' + nested + b"}"
    error = _error(client.post(route, content=raw), 400)
    assert "nested" in error["message"] or "depth" in error["message"]


def test_deep_nesting_on_a_fastapi_route_is_a_400(client: TestClient) -> None:
    raw = b'{"model":' + b"[" * 20_000 + b"]" * 20_000 + b',"input_tokens":1}'
    _error(client.post("/v1/cost/estimate", content=raw), 400)


@pytest.mark.parametrize(
    "body, param",
    [
        (_chat(messages=[{"role": ["user"], "content": "x"}]), "messages[0].role"),
        (_chat(messages=[{"role": {"a": 1}}]), "messages[0].role"),
        (_chat(messages=["hi"]), "messages[0]"),
        (_chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (_chat(messages=[{"role": "user", "content": [1]}]), "messages[0].content"),
        (_chat(messages=[]), "messages"),
        (_chat(stream="yes"), "stream"),
        (_chat(stream_options=[1]), "stream_options"),
        (_chat(max_tokens=2**70), "max_tokens"),
        (_chat(model=["dead"]), "model"),
    ],
)
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/prefix/lint"])
def test_wrong_shapes_are_400s_naming_the_field(
    client: TestClient, route: str, body: dict[str, Any], param: str
) -> None:
    assert _error(client.post(route, json=body), 400)["param"] == param


@pytest.mark.parametrize(
    "body, param",
    [
        ({"requests": []}, "requests"),
        ({"requests": [{}]}, "requests[0].model"),
        ({"requests": ["x"]}, "requests[0]"),
        ({"requests": [_chat(messages=[{"role": ["user"]}])]}, "requests[0].messages[0].role"),
    ],
)
def test_lint_conversations_are_validated(
    client: TestClient, body: dict[str, Any], param: str
) -> None:
    assert _error(client.post("/v1/prefix/lint", json=body), 400)["param"] == param


def test_spend_takes_naive_and_aware_times_together(client: TestClient) -> None:
    for route in ("/v1/spend", "/v1/spend/tasks"):
        params = {"since": "2024-01-01T00:00:00", "until": "2030-01-01T00:00:00+05:00"}
        assert client.get(route, params=params).status_code == 200
        far = {"since": "9999-12-31T23:59:59-23:59"}
        assert _error(client.get(route, params=far), 400)["param"] == "since"


def test_a_large_body_on_an_api_route_is_413_without_an_echo(client: TestClient) -> None:
    big = {"model": "x" * (2 * API_LIMIT), "input_tokens": 1}
    error = _error(client.post("/v1/cost/estimate", json=big), 413)
    assert "FAREBOX_MAX_API_BODY_BYTES" in error["message"]


def test_a_long_value_is_not_echoed_back(client: TestClient) -> None:
    for body in (
        {"model": "dead", "input_tokens": 1, "tier": "t" * 50_000},
        {"model": "m" * 50_000, "input_tokens": 1},
        {"model": "dead", "input_tokens": 1, "k" * 50_000: 1},
    ):
        error = _error(client.post("/v1/cost/estimate", json=body), 400)
        assert len(error["message"]) < 2100 and len(error["param"] or "") < 300


@pytest.mark.parametrize(
    "method, path, status",
    [("GET", "/nowhere", 404), ("GET", "/v1/chat/completions", 405), ("PUT", "/v1/spend", 405)],
)
def test_unknown_routes_and_methods_are_openai_shaped(
    client: TestClient, method: str, path: str, status: int
) -> None:
    _error(client.request(method, path), status)


def test_bad_json_on_an_api_route_names_no_bogus_field(client: TestClient) -> None:
    raw = b'{"model": "dead", "input_tokens": '
    error = _error(
        client.post("/v1/cost/estimate", content=raw, headers={"content-type": "application/json"}),
        400,
    )
    assert error["param"] is None and "JSON" in error["message"]
