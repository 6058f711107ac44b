"""A stream's first token goes out on its own when its call is the only one in flight.

A real upstream on a real port (tests/e2e/test_relay_batches.py's) writes a whole stream
in one write, so the relay gets every event in one read. Alone (concurrency 1) the client
gets the events through the first token (the role chunk, whose content is empty, and the
first content chunk) as a message of their own, then the rest of the read; with other
calls in flight the read goes out whole, as before. Either way the bytes are the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.pipeline import relay
from gateway.settings import Settings
from gateway.upstream import http_stream
from tests.asgi_direct import body_collector, post_scope, receive_once
from tests.e2e.test_relay_batches import CONFIG, EVENTS, TOKENS, USAGE_EVENT, Upstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    yield server
    server.stop()


async def _bodies(app: Any, state: dict[str, Any], streams: int = 1) -> list[list[bytes]]:
    """The body messages each of `streams` concurrent streamed requests was sent."""
    body = orjson.dumps(
        {"model": "batch", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )

    async def one() -> list[bytes]:
        messages: list[bytes] = []

        send = body_collector(messages)

        await app(post_scope(state), receive_once(body), send)
        return messages

    return list(await asyncio.gather(*(one() for _ in range(streams))))


def _run(upstream: Upstream, tmp_path: Path, streams: int) -> list[list[bytes]]:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=f"http://127.0.0.1:{upstream.port}"))
    app = create_app(Settings(data_dir=tmp_path, config=config, log_level="warning"))

    async def main() -> list[list[bytes]]:
        async with app.router.lifespan_context(app) as given:
            return await _bodies(app, dict(given or {}), streams)

    return asyncio.run(main())


EXPECTED = b"".join(event for event in EVENTS if event != USAGE_EVENT)


def test_alone_the_first_token_is_sent_before_the_rest(upstream: Upstream, tmp_path: Path) -> None:
    upstream.piece = 0
    [messages] = _run(upstream, tmp_path, streams=1)
    assert messages[0] == EVENTS[0] + EVENTS[1]  # the role chunk and the first token
    assert b'"content":""' in EVENTS[0] and b'"content":"' + TOKENS[0].encode() in EVENTS[1]
    assert len(messages) == 2  # through the first token, then the rest of the one read
    assert b"".join(messages) == EXPECTED


def _event(delta: dict[str, Any] | None, **more: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]
    return b"data: " + orjson.dumps({"choices": choices, **more}) + b"\n\n"


ROLE = _event({"role": "assistant", "content": ""})


@pytest.mark.parametrize(
    ("events", "first"),
    [
        ([ROLE, _event({"content": "Hi"}), _event({"content": "!"})], 2),
        ([_event({"content": "Hi"}), _event({"content": "!"})], 1),  # no role chunk
        ([ROLE, _event({"role": "assistant", "content": None}), _event({"content": "a"})], 3),
        ([ROLE, _event({"reasoning_content": "hm"}), _event({"content": "a"})], 2),
        ([ROLE, _event({"tool_calls": [{"index": 0, "id": "c"}]})], 2),
        ([ROLE, _event(None, usage={"prompt_tokens": 1})], 2),
        ([ROLE, b"data: [DONE]\n\n"], 2),
        ([ROLE, b": keep-alive\n\n", _event({"content": "a"})], 2),  # not a chunk: shown
        ([ROLE] * 5 + [_event({"content": "a"})], 1),  # past OPENING_SCAN: the first alone
    ],
)
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_the_opening_runs_through_the_first_event_that_shows_anything(
    events: list[bytes], first: int, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not native:  # a build without the C reader: the orjson path
        monkeypatch.setattr(relay, "PLAIN_EVENT", None)
    assert relay.OPENING_SCAN == 4
    assert relay._through_first_token(events) == first


def test_with_other_calls_in_flight_the_read_goes_whole(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.piece = 0
    monkeypatch.setattr(http_stream.SseStream, "alone", lambda self: False)
    [messages] = _run(upstream, tmp_path, streams=1)
    assert messages == [EXPECTED]


def test_concurrent_streams_are_not_alone_and_get_the_same_bytes(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.piece = 0
    seen: list[bool] = []
    alone = http_stream.SseStream.alone

    def counted(self: http_stream.SseStream) -> bool:
        seen.append(alone(self))
        return seen[-1]

    monkeypatch.setattr(http_stream.SseStream, "alone", counted)
    results = _run(upstream, tmp_path, streams=4)
    assert all(b"".join(messages) == EXPECTED for messages in results)
    assert False in seen  # some opened while another call was in flight


def test_a_stream_written_in_pieces_is_relayed_the_same(upstream: Upstream, tmp_path: Path) -> None:
    upstream.piece = 100
    try:
        [messages] = _run(upstream, tmp_path, streams=1)
    finally:
        upstream.piece = 0
    assert b"".join(messages) == EXPECTED
