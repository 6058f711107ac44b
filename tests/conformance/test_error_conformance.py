"""Every error the gateway answers, wherever it is made, validates and carries `x-request-id`.

Errors come from the app's routes and handlers, the body guard, uvicorn's protocol, and
the upstream (relayed, or refused as unreadable); each is read off the wire and checked
against OpenAI's `ErrorResponse`, and the official SDK finds the id in `error.request_id`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conformance.openapi_schemas import ERROR, MODEL_LIST, violations
from tests.conformance.wire import Exchange, nonconforming, post_chat, write_config
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.hostile_upstream import HostileUpstream, ask, hostile_upstream

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileUpstream]:
    with hostile_upstream() as server:
        yield server


@pytest.fixture
def gateway(
    make_gateway: GatewayFactory, sim: SimControl, hostile: HostileUpstream, tmp_path: Path
) -> Gateway:
    extra = {"hostile": {"provider": "openai", "model": "hostile", "base_url": hostile.base_url}}
    return make_gateway(config=write_config(tmp_path, sim.url, extra), max_body_bytes=4096)


def _conforming_error(exchange: Exchange, status: int) -> dict[str, object]:
    assert exchange.status == status, exchange.objects
    assert not exchange.streamed
    assert nonconforming(exchange) == []
    assert exchange.headers["x-request-id"].startswith("req-")
    error = exchange.objects[0]["error"]
    assert isinstance(error, dict)
    return error


def test_bad_json_body(gateway: Gateway) -> None:
    error = _conforming_error(post_chat(gateway.base_url, b'{"model": "openai-chat", '), 400)
    assert error["type"] == "invalid_request_error"


def test_schema_violation_names_the_field(gateway: Gateway) -> None:
    error = _conforming_error(post_chat(gateway.base_url, {"model": "openai-chat"}), 400)
    assert error["param"] == "messages"


def test_unknown_model(gateway: Gateway) -> None:
    error = _conforming_error(
        post_chat(gateway.base_url, {"model": "nope", "messages": MESSAGES}), 404
    )
    assert error["code"] == "model_not_found"


def test_body_over_the_limit(gateway: Gateway) -> None:
    body = {"model": "openai-chat", "messages": [{"role": "user", "content": "x" * 5000}]}
    error = _conforming_error(post_chat(gateway.base_url, body), 413)
    assert error["code"] == "request_too_large"


def test_unknown_path(gateway: Gateway) -> None:
    response = httpx.get(f"{gateway.base_url}/nothing-here", timeout=10)
    assert response.status_code == 404
    assert violations(ERROR, response.json()) == []
    assert response.headers["x-request-id"].startswith("req-")


@pytest.mark.parametrize("model", ["openai-chat", "vllm-chat", "claude"])
@pytest.mark.parametrize("status", [401, 429, 500])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_are_relayed_in_shape(
    gateway: Gateway, sim: SimControl, model: str, status: int, stream: bool
) -> None:
    upstream = {"claude": "claude-sim"}.get(model, "sim-chat")
    sim.fault(match={"model": upstream}, status=status, count=1)
    body = {"model": model, "messages": MESSAGES, "stream": stream}
    exchange = post_chat(gateway.base_url, body)
    _conforming_error(exchange, status)
    # The ledger books the failed call under the id the client was given.
    assert gateway.last().request_id == exchange.headers["x-request-id"]


def test_unreadable_upstream_reply_is_a_conforming_502(gateway: Gateway) -> None:
    body = {"model": "hostile", "messages": ask("text")}
    error = _conforming_error(post_chat(gateway.base_url, body), 502)
    assert error["code"] == "upstream_bad_reply"


@pytest.mark.parametrize("scenario", ["first-not-json", "not-json"])
def test_unreadable_stream_ends_in_a_conforming_error(gateway: Gateway, scenario: str) -> None:
    body = {"model": "hostile", "messages": ask(scenario), "stream": True}
    exchange = post_chat(gateway.base_url, body)
    assert exchange.status == 200 and exchange.streamed
    assert exchange.objects[-1]["error"]["code"] == "upstream_bad_reply"
    assert nonconforming(exchange) == []
    assert exchange.headers["x-request-id"] == gateway.last().request_id


@pytest.mark.parametrize("model", ["openai-chat", "claude"])
def test_error_event_ending_a_broken_stream_conforms(
    gateway: Gateway, sim: SimControl, model: str
) -> None:
    upstream = {"claude": "claude-sim"}.get(model, "sim-chat")
    # Anthropic's stream opens with events litellm turns into no chunk: cut later there.
    cut = {"claude": 8}.get(model, 3)
    sim.fault(match={"model": upstream}, status=200, count=1, drop_after_chunks=cut)
    exchange = post_chat(gateway.base_url, {"model": model, "messages": MESSAGES, "stream": True})
    assert exchange.status == 200 and exchange.streamed
    assert "error" in exchange.objects[-1]
    assert nonconforming(exchange) == []


def test_models_list_conforms_and_has_an_id(gateway: Gateway) -> None:
    response = httpx.get(f"{gateway.base_url}/models", timeout=10)
    assert response.status_code == 200
    assert violations(MODEL_LIST, response.json()) == []
    assert {m["id"] for m in response.json()["data"]} >= {"openai-chat", "claude"}
    assert response.headers["x-request-id"].startswith("req-")


def test_malformed_http_is_answered_with_an_id(gateway: Gateway) -> None:
    port = int(gateway.base_url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = sock.recv(65536).decode()
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 400")
    assert "x-request-id: req-" in head
    assert violations(ERROR, httpx.Response(400, content=body).json()) == []


@pytest.mark.parametrize("model", ["openai-chat", "claude"])
def test_sdk_error_request_id_is_the_header(gateway: Gateway, sim: SimControl, model: str) -> None:
    upstream = {"claude": "claude-sim"}.get(model, "sim-chat")
    sim.fault(match={"model": upstream}, status=429, count=1)
    with pytest.raises(openai.RateLimitError) as caught:
        gateway.sdk().chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.request_id
    assert caught.value.request_id == caught.value.response.headers["x-request-id"]
    assert caught.value.request_id == gateway.last().request_id


def test_sdk_not_found_has_a_request_id(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.sdk().chat.completions.create(model="nope", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.request_id
    assert caught.value.request_id == caught.value.response.headers["x-request-id"]


def test_sdk_reply_request_id_is_the_ledger_id(gateway: Gateway) -> None:
    reply = gateway.sdk().chat.completions.create(model="claude", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply._request_id == gateway.last().request_id


def _raw_answer(port: int, request: bytes) -> tuple[str, dict[str, object]]:
    """Send raw bytes, read the answer until the server closes; (head, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).decode().partition("\r\n\r\n")
    return head, httpx.Response(200, content=body).json()


def test_header_timeout_is_answered_with_an_id(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    gateway = make_gateway(config=write_config(tmp_path, sim.url), header_timeout_s=0.5)
    head, body = _raw_answer(gateway.server.port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n")
    assert head.startswith("HTTP/1.1 408") and "x-request-id: req-" in head
    assert violations(ERROR, body) == []


def test_a_connection_over_the_cap_is_answered_with_an_id(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    gateway = make_gateway(config=write_config(tmp_path, sim.url), max_connections=1)
    with socket.create_connection(("127.0.0.1", gateway.server.port)):
        head, body = _raw_answer(gateway.server.port, b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
    assert head.startswith("HTTP/1.1 503") and "x-request-id: req-" in head
    assert violations(ERROR, body) == []
