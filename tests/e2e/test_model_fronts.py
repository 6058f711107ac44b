"""Every model route's front (gateway/front.py) against FastAPI's stack, over real HTTP.

A POST to a model route (`gateway.front.LANES`: chat, messages and its count_tokens,
responses, completions, embeddings) skips FastAPI's and Starlette's layers and the
middleware stack: its `Front` does their work in one layer. Each case runs on a gateway
with the fronts and on one without them (`app.lanes` emptied: every request through
FastAPI's routes and middlewares), and both must answer alike, in the shape the route's
clients parse: Anthropic's on the Messages API's paths, OpenAI's elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from pydantic import SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.app import create_app
from gateway.front import LANES, Gateway
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from tests.asgi_direct import post_scope, receive_once
from tests.conftest import SimControl
from tests.e2e.conftest import sim_config
from tests.servers import ServerThread

ADMIN_KEY = "farebox-admin-test-key-0123456789"
HI = [{"role": "user", "content": "hi"}]
MESSAGES_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "chat", "messages": HI, "max_tokens": 4},
    "/v1/messages": {"model": "chat", "messages": HI, "max_tokens": 4},
    "/v1/messages/count_tokens": {"model": "chat", "messages": HI},
    "/v1/responses": {"model": "chat", "input": "hi", "max_output_tokens": 16},
    "/v1/completions": {"model": "chat", "prompt": "hi", "max_tokens": 4},
    "/v1/embeddings": {"model": "embed", "input": "hi"},
}
# Each of them calls the upstream, so the broken observer is reached (count_tokens books
# nothing: it has no observer to break).
BOOKED = [path for path in BODIES if path != "/v1/messages/count_tokens"]


def test_every_front_has_a_case_here() -> None:
    assert set(BODIES) == set(LANES)


class ObserverBrokeError(RuntimeError):
    """What the broken observer raises: an exception nothing in the gateway handles."""


def _broken_observer(ctx: RequestContext) -> None:
    raise ObserverBrokeError("an observer with a bug")


@dataclass
class Counted:
    """A front, and how many requests it was handed (the server's or the app's hand-over)."""

    front: ASGIApp
    calls: int = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        await self.front(scope, receive, send)


@dataclass
class Served:
    server: ServerThread
    app: Gateway
    key: str  # a member's: model calls take one
    fronted: bool
    counted: dict[str, Counted] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url


def _serve(tmp_path: Path, sim_url: str, fronted: bool, observers: list[Any]) -> Served:
    settings = Settings(admin_key=SecretStr(ADMIN_KEY), data_dir=tmp_path, max_body_bytes=4096)
    app = create_app(settings, sim_config(sim_url), observers=observers)
    counted = {path: Counted(front) for path, front in app.lanes.items()}
    app.lanes = dict(counted) if fronted else {}  # read by the server as it starts
    server = ServerThread(app, settings).start()
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    made = httpx.post(
        f"{server.url}/admin/keys", headers=admin, json={"team": "a", "role": "member"}
    )
    assert made.status_code == 201, made.text
    return Served(server, app, made.json()["key"], fronted, counted)


@pytest.fixture(params=["front", "fastapi"])
def broken(request: pytest.FixtureRequest, sim: SimControl, tmp_path: Path) -> Iterator[Served]:
    """A keyed gateway whose only observer raises after every finished request."""
    served = _serve(tmp_path, sim.url, request.param == "front", [_broken_observer])
    yield served
    served.server.stop()


@pytest.fixture(params=["front", "fastapi"])
def working(request: pytest.FixtureRequest, sim: SimControl, tmp_path: Path) -> Iterator[Served]:
    served = _serve(tmp_path, sim.url, request.param == "front", [])
    yield served
    served.server.stop()


def _post(
    served: Served,
    path: str,
    content: bytes | Iterator[bytes] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST with the member's key: `content` as given, else the route's small JSON body."""
    sent = {"authorization": f"Bearer {served.key}", **(headers or {})}
    url = f"{served.url}{path}"
    if content is None:
        return httpx.post(url, headers=sent, json=BODIES[path], timeout=30)
    return httpx.post(url, headers=sent, content=content, timeout=30)


def _error(response: httpx.Response, path: str, status: int) -> dict[str, Any]:
    """The error object, checked to be in the shape `path`'s clients parse."""
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"].startswith("req-")
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    if path in MESSAGES_PATHS:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return dict(body["error"])
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def test_each_sdk_is_answered_through_the_fronts_or_fastapis_routes(working: Served) -> None:
    claude = anthropic.Anthropic(base_url=working.url, api_key=working.key, max_retries=0)
    message = claude.messages.create(model="chat", max_tokens=8, messages=HI)  # type: ignore[arg-type]
    assert message.content and message.usage.output_tokens > 0
    counted = claude.messages.count_tokens(model="chat", messages=HI)  # type: ignore[arg-type]
    assert counted.input_tokens > 0
    client = openai.OpenAI(base_url=f"{working.url}/v1", api_key=working.key, max_retries=0)
    chat = client.chat.completions.create(model="chat", messages=HI, max_tokens=4)  # type: ignore[arg-type]
    assert chat.choices[0].message.content
    response = client.responses.create(model="chat", input="hi", max_output_tokens=16)
    assert response.output_text
    completion = client.completions.create(model="chat", prompt="hi", max_tokens=4)
    assert completion.choices[0].text
    embedded = client.embeddings.create(model="embed", input="hi")
    assert embedded.data[0].embedding
    # Served where the gateway says: each path's front once with them, never without.
    calls = {path: front.calls for path, front in working.counted.items()}
    assert calls == {path: 1 if working.fronted else 0 for path in LANES}


@pytest.mark.parametrize("path", BOOKED)
def test_an_unhandled_exception_is_a_500_in_the_paths_shape_with_the_request_id(
    broken: Served, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="farebox")
    response = _post(broken, path)
    error = _error(response, path, 500)
    request_id = response.headers["x-request-id"]
    message = "internal gateway error; see the gateway log"
    if path in MESSAGES_PATHS:  # the route renders it itself, as Anthropic's API would
        assert error == {"type": "api_error", "message": message}
        assert response.json()["request_id"] == request_id
        assert f"unhandled error on {path} ({request_id})" in caplog.messages
    else:
        assert error == {"message": message, "type": "server_error", "param": None, "code": None}
        assert f"unhandled ObserverBrokeError on {path} ({request_id})" in caplog.messages
    # The server goes on serving, on a new connection and on the same path.
    assert httpx.get(f"{broken.url}/healthz", timeout=10).status_code == 200
    assert _post(broken, path).status_code == 500


@pytest.mark.parametrize("path", list(BODIES))
def test_no_key_and_a_wrong_key_are_401_in_the_paths_shape(broken: Served, path: str) -> None:
    missing = httpx.post(f"{broken.url}{path}", json=BODIES[path], timeout=30)
    assert "no API key" in str(_error(missing, path, 401)["message"])
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = _post(broken, path, headers={"authorization": "Bearer fbx-wrong"})
    error = _error(wrong, path, 401)
    assert "invalid API key" in str(error["message"])
    if path in MESSAGES_PATHS:
        assert error["type"] == "authentication_error"


@pytest.mark.parametrize("path", list(BODIES))
def test_a_body_over_the_limit_is_413_and_closes(broken: Served, path: str) -> None:
    declared = _post(broken, path, content=b"x" * 5000)
    assert "FAREBOX_MAX_BODY_BYTES" in str(_error(declared, path, 413)["message"])
    assert declared.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts what arrives
        yield b"x" * 3000
        yield b"x" * 3000

    counted = _post(broken, path, content=chunks())
    assert "FAREBOX_MAX_BODY_BYTES" in str(_error(counted, path, 413)["message"])


@pytest.mark.parametrize("path", list(BODIES))
def test_a_body_of_any_content_type_is_read_as_json(broken: Served, path: str) -> None:
    content = json.dumps(BODIES[path]).encode()
    answered = 200 if path not in BOOKED else 500  # the broken observer's, once served
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        response = _post(broken, path, content=content, headers={"content-type": content_type})
        assert response.status_code == answered, response.text  # parsed and served: not 400
    bad = _post(broken, path, content=b'{"model": ', headers={"content-type": "text/plain"})
    assert "not valid JSON" in str(_error(bad, path, 400)["message"])


@pytest.mark.parametrize("path", list(BODIES))
def test_other_methods_on_a_model_path_are_fastapis(broken: Served, path: str) -> None:
    headers = {"authorization": f"Bearer {broken.key}"}
    response = httpx.get(f"{broken.url}{path}", headers=headers, timeout=10)
    assert response.status_code == 405, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_deferred_routes_front_answers_without_including_fastapis_routes(
    sim: SimControl, tmp_path: Path
) -> None:
    """`farebox serve` defers the routers a chat request needs none of; a model route's
    front imports its answer on its first request and leaves FastAPI's routers alone."""
    settings = Settings(data_dir=tmp_path)
    app = create_app(settings, sim_config(sim.url), defer_routes=True)

    def routed() -> set[str]:
        return {getattr(route, "path", "") for route in app.router.routes}

    async def scenario() -> None:
        async with app.router.lifespan_context(app) as state:
            assert "/v1/messages" not in routed()
            status: list[int] = []

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            for path in ("/v1/messages", "/v1/responses"):
                body = json.dumps(BODIES[path]).encode()
                await app(post_scope(dict(state or {}), path), receive_once(body), send)
            assert status == [200, 200]
            assert "/v1/messages" not in routed()  # answered by the fronts alone

    asyncio.run(scenario())


def test_the_sdks_read_the_500_and_its_request_id(broken: Served) -> None:
    client = openai.OpenAI(base_url=f"{broken.url}/v1", api_key=broken.key, max_retries=0)
    with client, pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="chat", messages=HI)  # type: ignore[arg-type]
    assert raised.value.status_code == 500
    assert raised.value.request_id is not None and raised.value.request_id.startswith("req-")
    assert raised.value.body == {
        "message": "internal gateway error; see the gateway log",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    claude = anthropic.Anthropic(base_url=broken.url, api_key=broken.key, max_retries=0)
    with claude, pytest.raises(anthropic.InternalServerError) as failed:
        claude.messages.create(model="chat", max_tokens=8, messages=HI)  # type: ignore[arg-type]
    assert failed.value.status_code == 500
    # The gateway's id in the body (the SDK's `request_id` is an Anthropic upstream's own).
    request_id = failed.value.response.headers["x-request-id"]
    assert failed.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "internal gateway error; see the gateway log"},
        "request_id": request_id,
    }
