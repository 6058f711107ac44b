"""A whole reply on every model route is billed before it goes out (its cost is in it) and
booked after its last byte (ledger row, metrics, prompt history), as chat's is; when its
sending fails, the paid call is booked all the same."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.types import Message

from gateway.app import create_app
from gateway.settings import Settings
from tests.asgi_direct import post_scope, receive_once
from tests.conftest import SimControl
from tests.e2e.conftest import ANTHROPIC_KEY, sim_config

HI = [{"role": "user", "content": "hi"}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "chat", "messages": HI, "max_tokens": 4}),
    "messages, translated": ("/v1/messages", {"model": "chat", "messages": HI, "max_tokens": 4}),
    "messages, native": ("/v1/messages", {"model": "claude", "messages": HI, "max_tokens": 4}),
    "responses": ("/v1/responses", {"model": "chat", "input": "hi", "max_output_tokens": 16}),
    "completions": ("/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 4}),
    "embeddings": ("/v1/embeddings", {"model": "embed", "input": "hi"}),
}


class BrokenPipeAtBodyError(OSError):
    """The client went away as the body was written."""


def _serve_one(
    sim_url: str, data: Path, path: str, body: dict[str, Any], fail_body: bool
) -> tuple[list[Any], int]:
    """Send one request in-process; what the ledger had submitted at each message sent,
    and after the app returned."""
    settings = Settings(data_dir=data, ledger_flush_interval=1000.0)
    app = create_app(settings, sim_config(sim_url))
    seen: list[Any] = []

    async def scenario() -> int:
        async with app.router.lifespan_context(app) as state:
            ledger = app.state.services.ledger

            async def send(message: Message) -> None:
                seen.append((message["type"], ledger.records_submitted))
                if message["type"] == "http.response.start":
                    seen.append(message["status"])
                if message["type"] == "http.response.body":
                    cost = json.loads(message["body"]).get("usage", {}).get("cost")
                    seen.append(cost is not None)
                    if fail_body:
                        raise BrokenPipeAtBodyError("the connection broke")

            raw = json.dumps(body).encode()
            before = ledger.records_submitted
            try:
                await app(post_scope(dict(state or {}), path), receive_once(raw), send)
            except BrokenPipeAtBodyError:
                seen.append("raised")
            return int(ledger.records_submitted - before)

    booked = asyncio.run(scenario())
    return seen, booked


@pytest.mark.parametrize("case", list(CASES))
def test_a_whole_reply_is_booked_after_its_last_byte(
    case: str, sim: SimControl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAREBOX_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    path, body = CASES[case]
    seen, booked = _serve_one(sim.url, tmp_path, path, body, fail_body=False)
    start, status, (body_type, submitted_at_body), has_cost = seen
    assert status == 200 and body_type == "http.response.body"
    assert start == ("http.response.start", submitted_at_body)
    assert has_cost or case == "embeddings"  # billed before: the cost is in the reply
    assert submitted_at_body == 0  # not booked while the reply was written
    assert booked == 1  # booked once it was


@pytest.mark.parametrize("case", list(CASES))
def test_a_whole_reply_whose_sending_fails_is_booked(
    case: str, sim: SimControl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAREBOX_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    path, body = CASES[case]
    seen, booked = _serve_one(sim.url, tmp_path, path, body, fail_body=True)
    assert seen[-1] == "raised"
    assert booked == 1
