"""`create_app(defer_routes=True)`, as `farebox serve` builds it: the routers no chat
request needs are included on the first request FastAPI routes, at their place."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.routing import iter_route_contexts
from starlette.testclient import TestClient

from gateway.api.routers import DEFERRED, ORDER
from gateway.app import create_app
from gateway.config import parse_config
from gateway.preflight import check_ledger
from gateway.settings import Settings

CONFIG = (
    "models:\n  chat:\n    provider: openai\n    model: m\n    base_url: http://127.0.0.1:9/v1\n"
)


def _paths(app: object) -> list[str]:
    """Every route's path, in the order the app matches them."""
    return [str(route.path) for route in iter_route_contexts(app.routes)]  # type: ignore[attr-defined]


def test_every_route_and_the_same_openapi_after_the_first_routed_request(tmp_path: Path) -> None:
    config = parse_config(CONFIG)
    eager = create_app(Settings(data_dir=tmp_path / "eager"), config)
    lazy = create_app(Settings(data_dir=tmp_path / "lazy"), config, defer_routes=True)
    assert "/v1/chat/completions" in _paths(lazy) and "/readyz" in _paths(lazy)
    assert "/v1/spend" not in _paths(lazy) and "/ui" not in _paths(lazy)
    with TestClient(lazy) as client:
        assert client.get("/readyz").status_code == 200  # the first request routed
        assert _paths(lazy) == _paths(eager)  # every route, in the same order
        assert client.get("/v1/spend").status_code == 200
        served = client.get("/openapi.json").text
    # Byte for byte: the paths come in the same order as an app that included them at once.
    assert json.loads(served) == json.loads(json.dumps(eager.openapi()))
    assert list(json.loads(served)["paths"]) == list(eager.openapi()["paths"])


def test_the_lifespan_includes_nothing_and_a_chat_request_needs_nothing(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), parse_config(CONFIG), defer_routes=True)
    before = _paths(app)
    with TestClient(app) as client:
        reply = client.post("/v1/chat/completions", json={"model": "nope", "messages": []})
        assert reply.status_code in (400, 404)  # answered by the chat front
        assert _paths(app) == before
        assert client.get("/v1/tasks/no-such-task").status_code == 404
        assert len(_paths(app)) > len(before)


def test_an_app_built_without_defer_has_every_router_at_once(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), parse_config(CONFIG))
    assert {"/v1/spend", "/ui", "/admin/reload"} <= set(_paths(app))
    assert set(ORDER) > DEFERRED


def test_the_openapi_schema_asked_first_has_every_path(tmp_path: Path) -> None:
    config = parse_config(CONFIG)
    eager = create_app(Settings(data_dir=tmp_path / "eager"), config).openapi()
    lazy = create_app(Settings(data_dir=tmp_path / "lazy"), config, defer_routes=True)
    assert list(lazy.openapi()["paths"]) == list(eager["paths"])  # never cached without them


def test_a_ledger_the_preflight_migrated_is_served_without_a_second_check(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    check_ledger(settings)  # as `farebox serve` does, before the app
    app = create_app(settings, parse_config(CONFIG), defer_routes=True, migrated=True)
    with TestClient(app) as client:
        assert client.get("/v1/spend").status_code == 200  # the ledger's tables are there
        reply = client.post("/v1/chat/completions", json={"model": "nope", "messages": []})
        assert reply.status_code in (400, 404)
