"""Every error a client can get without a working upstream, in OpenAI's shape."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings


def _dead_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here any more
    return port


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    config = parse_config(
        f"models:\n  dead:\n    model: m\n    base_url: http://127.0.0.1:{_dead_port()}/v1\n"
    )
    app = create_app(Settings(max_body_bytes=2048, data_dir=tmp_path), config)
    with TestClient(app) as test_client:
        yield test_client


def _assert_openai_error(response: object, status: int, fragment: str) -> dict[str, object]:
    assert response.status_code == status  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert fragment in error["message"]
    return dict(error)


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", content=b'{"model": ')
    _assert_openai_error(response, 400, "not valid JSON")


def test_schema_violation_names_the_field(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", json={"model": "dead", "messages": "hi"})
    error = _assert_openai_error(response, 400, "messages")
    assert error["param"] == "messages"


def test_unknown_model_is_404(client: TestClient) -> None:
    response = client.post(
        "/v1/chat/completions",
        json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
    )
    error = _assert_openai_error(response, 404, "gpt-9")
    assert error["code"] == "model_not_found"


def test_body_over_the_limit_is_413(client: TestClient) -> None:
    big = {"model": "dead", "messages": [{"role": "user", "content": "x" * 4000}]}
    _assert_openai_error(client.post("/v1/chat/completions", json=big), 413, "limit")


def test_body_over_the_limit_without_content_length_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model":"dead","messages":[{"role":"user","content":"'
        for _ in range(10):
            yield b"y" * 500
        yield b'"}]}'

    response = client.post("/v1/chat/completions", content=chunks())
    _assert_openai_error(response, 413, "limit")


def test_unreachable_upstream_is_502(client: TestClient) -> None:
    body = {"model": "dead", "messages": [{"role": "user", "content": "x"}]}
    error = _assert_openai_error(client.post("/v1/chat/completions", json=body), 502, "dead")
    assert error["code"] == "upstream_unreachable"
    body["stream"] = True
    _assert_openai_error(client.post("/v1/chat/completions", json=body), 502, "unreachable")


def test_unknown_path_has_the_same_error_shape(client: TestClient) -> None:
    _assert_openai_error(client.get("/v1/nothing"), 404, "/v1/nothing")


def test_models_health_and_readiness(client: TestClient) -> None:
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["dead"]
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


def test_readyz_is_503_without_upstreams(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), parse_config("models: {}\n"))
    with TestClient(app) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "no upstream models configured" in ready.json()["problems"]
