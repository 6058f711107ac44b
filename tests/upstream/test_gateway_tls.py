"""The gateway in front of an `https://` upstream: what a client gets, what the upstream got.

The upstream is a real TLS server (its own CA, tests/upstream/tls_upstream.py) in a thread;
the gateway is the whole app (`create_app`, its lifespan, the pipeline and the ledger).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings
from tests.hostile_upstream import ANSWER, GOOD_EVENTS, completion
from tests.upstream.test_h1 import Server, chunked, whole
from tests.upstream.tls_upstream import Authority, ThreadedServer

KEY = "sk-provider-key-never-shown-0123456789"
ASK = {"model": "tls", "messages": [{"role": "user", "content": "Was the invoice paid?"}]}


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return Authority(tmp_path)


@pytest.fixture
def upstream(authority: Authority) -> Iterator[ThreadedServer]:
    replies = {1: whole(json.dumps(completion()).encode()), 2: chunked(GOOD_EVENTS)}
    server = ThreadedServer(Server(replies.__getitem__), authority.server_context(["localhost"]))
    yield server.start()
    server.stop()


def _gateway(upstream: ThreadedServer, data: Path) -> TestClient:
    config = parse_config(
        "models:\n  tls:\n    model: m\n"
        f"    base_url: https://localhost:{upstream.port}/v1\n"
        "    api_key_env: TLS_TEST_PROVIDER_KEY\n"
    )
    return TestClient(create_app(Settings(data_dir=data), config))


@pytest.fixture
def gateway(
    upstream: ThreadedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    monkeypatch.setenv("TLS_TEST_PROVIDER_KEY", KEY)
    with _gateway(upstream, tmp_path) as client:
        yield client


def test_an_untrusted_upstream_certificate_is_an_openai_error_without_the_key(
    gateway: TestClient, upstream: ThreadedServer
) -> None:
    response = gateway.post("/v1/chat/completions", json=ASK)
    assert response.status_code == 502
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "upstream_unreachable"
    assert "tls (localhost:" in error["message"]
    assert "its TLS certificate did not verify" in error["message"]
    assert "SSL_CERT_FILE" in error["message"]
    assert KEY not in response.text
    assert upstream.script.requests == []  # the key never left the gateway


def test_a_trusted_upstream_serves_whole_and_streamed_replies_on_one_connection(
    authority: Authority, upstream: ThreadedServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.pem))  # a private CA, as an operator would
    monkeypatch.setenv("TLS_TEST_PROVIDER_KEY", KEY)
    with _gateway(upstream, tmp_path) as gateway:
        response = gateway.post("/v1/chat/completions", json=ASK)
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == ANSWER
        streamed = gateway.post("/v1/chat/completions", json=ASK | {"stream": True})
        assert streamed.status_code == 200
        assert "The invoice " in streamed.text and streamed.text.endswith("data: [DONE]\n\n")
    heads = [head.lower() for head, _ in upstream.script.requests]
    assert len(heads) == 2 and upstream.script.connections == 1
    assert all(f"\r\nauthorization: bearer {KEY.lower()}\r\n".encode() in h for h in heads)
    assert all(h.startswith(b"post /v1/chat/completions http/1.1\r\n") for h in heads)
