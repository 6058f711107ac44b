"""The chat path's front (gateway/front.py) against FastAPI's stack, over real HTTP.

POST /v1/chat/completions skips FastAPI's and Starlette's layers and the middleware
stack: `ChatFront` does their work in one layer. Each test sends the same case to chat
and to a route FastAPI serves behind every middleware, and checks they answer alike.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import SecretStr

from gateway.app import create_app
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.e2e.conftest import sim_config
from tests.servers import ServerThread

ADMIN_KEY = "farebox-admin-test-key-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"  # a prompt route FastAPI serves, behind every middleware


class ObserverBrokeError(RuntimeError):
    """What the broken observer raises: an exception nothing in the gateway handles."""


def _broken_observer(ctx: RequestContext) -> None:
    raise ObserverBrokeError("an observer with a bug")


def _body(path: str) -> dict[str, object]:
    if path == CHAT:
        return {"model": "chat", "messages": MESSAGES, "max_tokens": 4}
    return {"model": "chat", "prompt": "hi", "max_tokens": 4}


@dataclass
class Served:
    """A keyed gateway whose only observer raises after every finished request."""

    server: ServerThread
    key: str  # a member's: model calls take one

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture
def server(sim: SimControl, tmp_path: Path) -> Iterator[Served]:
    settings = Settings(admin_key=SecretStr(ADMIN_KEY), data_dir=tmp_path, max_body_bytes=4096)
    app = create_app(settings, sim_config(sim.url), observers=[_broken_observer])
    server = ServerThread(app, settings).start()
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    made = httpx.post(
        f"{server.url}/admin/keys", headers=admin, json={"team": "a", "role": "member"}
    )
    assert made.status_code == 201, made.text
    yield Served(server, made.json()["key"])
    server.stop()


def _post(
    server: Served,
    path: str,
    content: bytes | Iterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST with the member's key: `content` as given, else the route's small JSON body."""
    sent = {"authorization": f"Bearer {server.key}", **(headers or {})}
    url = f"{server.url}{path}"
    if content is None:
        return httpx.post(url, headers=sent, json=_body(path), timeout=30)
    return httpx.post(url, headers=sent, content=content, timeout=30)


def _error(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"].startswith("req-")
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_an_unhandled_exception_is_a_500_in_openai_shape_with_the_request_id(
    server: Served, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="farebox")
    response = _post(server, path)
    error = _error(response, 500)
    assert error == {
        "message": "internal gateway error; see the gateway log",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    request_id = response.headers["x-request-id"]
    logged = f"unhandled ObserverBrokeError on {path} ({request_id})"
    assert logged in caplog.messages
    # The server goes on serving, on a new connection and on chat.
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_the_sdk_reads_the_chat_500_and_its_request_id(server: Served) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key, max_retries=0)
    with client, pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="chat", messages=MESSAGES)  # type: ignore[arg-type]
    assert raised.value.status_code == 500
    assert raised.value.request_id is not None and raised.value.request_id.startswith("req-")
    assert raised.value.body == {
        "message": "internal gateway error; see the gateway log",
        "type": "server_error",
        "param": None,
        "code": None,
    }


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_no_key_and_a_wrong_key_are_401_with_the_request_id(server: Served, path: str) -> None:
    missing = httpx.post(f"{server.url}{path}", json=_body(path), timeout=30)
    assert "no API key" in str(_error(missing, 401)["message"])
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = _post(server, path, headers={"authorization": "Bearer fbx-wrong"})
    assert "invalid API key" in str(_error(wrong, 401)["message"])


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_body_over_the_limit_is_413_and_closes(server: Served, path: str) -> None:
    declared = _post(server, path, content=b"x" * 5000)
    assert "FAREBOX_MAX_BODY_BYTES" in str(_error(declared, 413)["message"])
    assert declared.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts what arrives
        yield b"x" * 3000
        yield b"x" * 3000

    counted = _post(server, path, content=chunks())
    assert "FAREBOX_MAX_BODY_BYTES" in str(_error(counted, 413)["message"])


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_body_of_any_content_type_is_read_as_json(server: Served, path: str) -> None:
    content = json.dumps(_body(path)).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = _post(server, path, content=content, headers={"content-type": content_type})
        # The body was parsed and served (the broken observer then answers 500): not a 400.
        assert _error(response, 500)["type"] == "server_error"
    bad = _post(server, path, content=b'{"model": ', headers={"content-type": "text/plain"})
    assert "not valid JSON" in str(_error(bad, 400)["message"])


def test_other_methods_on_the_chat_path_are_fastapis(server: Served) -> None:
    response = httpx.get(
        f"{server.url}{CHAT}", headers={"authorization": f"Bearer {server.key}"}, timeout=10
    )
    assert _error(response, 405)["type"] == "invalid_request_error"
