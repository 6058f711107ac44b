"""A forwarded Messages stream's first token goes out before the rest of its read.

bench/hotpath_mock.py writes a whole stream in one write, so the relay gets every event in
one read. Alone (concurrency 1) the client gets the events up to the first token
(`message_start`, `content_block_start`, `ping`, the first `text_delta`) as a message of
their own, then the rest of the read; with other calls in flight the read goes out whole,
as before. The events and the ledger row are the same either way.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from gateway.app import create_app
from gateway.pipeline import event_relay
from gateway.settings import Settings
from gateway.upstream import http_stream
from tests.anthropic_mock import answered, running_mock
from tests.asgi_direct import JSON_HEADERS, body_collector, post_scope, receive_once

CONFIG = """\
models:
  claude: {{provider: anthropic, model: claude-mock, base_url: "{url}"}}
prices:
  claude: {{input: 3, output: 15}}
"""
KINDS = [
    "message_start",
    "content_block_start",
    "ping",
    *["content_block_delta"] * 16,
    "content_block_stop",
    "message_delta",
    "message_stop",
]


@pytest.fixture(autouse=True)
def no_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay's 1 ms slices cut a read where a loaded box makes it slow: off here, so
    what is counted is where the first token cuts the read, not where the clock did."""
    monkeypatch.setattr(event_relay, "LOOP_SLICE_S", 60.0)


@pytest.fixture(scope="module")
def mock() -> Iterator[str]:
    with running_mock() as base:
        yield base


def _run(mock: str, tmp_path: Path) -> list[bytes]:
    """The body messages one streamed /v1/messages request was sent."""
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=mock))
    app = create_app(Settings(data_dir=tmp_path, config=config, log_level="warning"))
    body = orjson.dumps(
        {
            "model": "claude",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    headers = [*JSON_HEADERS, (b"anthropic-version", b"2023-06-01")]
    messages: list[bytes] = []

    send = body_collector(messages)

    async def main() -> None:
        async with app.router.lifespan_context(app) as given:
            scope = post_scope(dict(given or {}), "/v1/messages", headers)
            await app(scope, receive_once(body), send)

    asyncio.run(main())
    return messages


def _kinds(body: bytes) -> list[str]:
    lines = [line for line in body.split(b"\n") if line.startswith(b"event: ")]
    return [line.removeprefix(b"event: ").decode() for line in lines]


def _booked(tmp_path: Path) -> tuple[int, int, str]:
    with sqlite3.connect(tmp_path / "farebox.db") as connection:
        row = connection.execute(
            "SELECT prompt_tokens, completion_tokens, upstream_model FROM requests"
        ).fetchone()
    return tuple(row)  # type: ignore[return-value]


def test_alone_the_first_token_is_sent_before_the_rest(mock: str, tmp_path: Path) -> None:
    before = answered(mock)
    messages = _run(mock, tmp_path)
    assert answered(mock) == before + 1  # forwarded natively, once
    assert _kinds(messages[0]) == KINDS[:4]  # up to the first token
    assert b'"text":" tok0"' in messages[0]
    assert len(messages) == 2  # then the rest of the one read
    assert _kinds(b"".join(messages)) == KINDS
    assert b'"cost":' in messages[1]  # message_delta's usage priced, as before
    assert _booked(tmp_path) == (1, 16, "claude-mock")


def test_with_other_calls_in_flight_the_read_goes_whole(
    mock: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_stream.SseStream, "alone", lambda self: False)
    messages = _run(mock, tmp_path)
    assert len(messages) == 1
    assert _kinds(messages[0]) == KINDS
    assert _booked(tmp_path) == (1, 16, "claude-mock")
