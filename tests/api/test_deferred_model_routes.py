"""The model routes `farebox serve` defers (messages, responses, completions, embeddings)
answer their first request as an app that included them at once answers it.

`create_app(defer_routes=True)` imports them on the first request FastAPI routes; here
that request is the model route's own, against the simulator on a real port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from starlette.testclient import TestClient

from gateway.api.routers import DEFERRED
from gateway.app import create_app
from gateway.config import parse_config
from gateway.settings import Settings
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.servers import running

PROMPT = "Say hi"
FIRST_REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/messages": {
        "model": "chat",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": PROMPT}],
    },
    "/v1/responses": {"model": "chat", "input": PROMPT, "max_output_tokens": 16},
    "/v1/completions": {"model": "chat", "prompt": PROMPT, "max_tokens": 16},
    "/v1/embeddings": {"model": "embed", "input": PROMPT},
}


def _config(sim_url: str) -> str:
    return (
        "models:\n"
        f"  chat: {{provider: openai, model: sim-chat, base_url: '{sim_url}/v1', family: vllm}}\n"
        f"  embed: {{provider: openai, model: sim-embed, base_url: '{sim_url}/v1', family: vllm}}\n"
        "prices:\n  chat: {input: 1, output: 2}\n  embed: {input: 0.02}\n"
    )


def _first_answer(data_dir: Path, path: str, defer: bool) -> tuple[int, Any]:
    """The app's answer to its first request; a simulator of its own (its prompt cache
    would count a second app's prompt as cached)."""
    with running(create_sim_app(SimConfig())) as sim:
        config = parse_config(_config(sim.url))
        app = create_app(Settings(data_dir=data_dir), config, defer_routes=defer)
        paths = {str(route.path) for route in iter_route_contexts(app.routes)}
        assert (path in paths) is not defer  # deferred: not there before its first request
        with TestClient(app) as client:
            reply = client.post(path, json=FIRST_REQUESTS[path])
            return reply.status_code, reply.json()


def _shape(body: Any) -> Any:
    """What must match: keys, types and usage; not ids, times or generated text."""
    if isinstance(body, dict):
        return {k: (v if k == "usage" else _shape(v)) for k, v in body.items()}
    if isinstance(body, list):
        return [_shape(item) for item in body]
    return type(body).__name__


def test_the_model_routes_are_deferred_ones() -> None:
    assert {f"gateway.api.{name}" for name in ("messages", "responses")} <= DEFERRED
    assert {f"gateway.api.{name}" for name in ("completions", "embeddings")} <= DEFERRED


@pytest.mark.parametrize("path", list(FIRST_REQUESTS))
def test_a_deferred_model_route_answers_its_first_request_as_an_eager_app(
    tmp_path: Path, path: str
) -> None:
    lazy_status, lazy = _first_answer(tmp_path / "lazy", path, defer=True)
    eager_status, eager = _first_answer(tmp_path / "eager", path, defer=False)
    assert lazy_status == eager_status == 200, (lazy, eager)
    assert _shape(lazy) == _shape(eager)
