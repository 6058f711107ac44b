"""A stream whose body ended with its `[DONE]` ends for the client in the same message.

The relay bills the attempt (quota, the task's cost, the observers) before the client's
stream ends, as it always has; the rest of its booking (the ledger row, metrics) follows that
end (tests/unit/test_stream_booking_after_end.py). When the upstream's `[DONE]` and the end of
its body came in together (as vLLM and the perf-floor mock send them), the last read's events
go out after the billing with the end of the client's body, one message (`more_body` False)
instead of the events, then an empty end. When the upstream's body end is still to come, the
events go out first and the end after the billing and that wait, as before. Driven through
the ASGI interface against a real upstream on a real port (tests/e2e/test_relay_batches.py's),
the observers telling when the attempt was billed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from gateway.upstream import http_stream
from tests.asgi_direct import post_scope, receive_once
from tests.e2e.test_relay_batches import CONFIG, EVENTS, USAGE_EVENT, Upstream

EXPECTED = b"".join(event for event in EVENTS if event != USAGE_EVENT)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    yield server
    server.stop()


Sent = tuple[bytes, bool, int]
"""A body message: its bytes, `more_body`, and how many attempts were booked when sent."""


def _stream(upstream: Upstream, tmp_path: Path, streams: int = 1) -> list[list[Sent]]:
    """The body messages each of `streams` concurrent streamed requests was sent."""
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=f"http://127.0.0.1:{upstream.port}"))
    booked: list[RequestContext] = []
    settings = Settings(data_dir=tmp_path, config=config, log_level="warning")
    app = create_app(settings, observers=[booked.append])
    body = orjson.dumps(
        {"model": "batch", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )

    async def one(state: dict[str, Any]) -> list[Sent]:
        sent: list[Sent] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200
            else:
                sent.append((message.get("body", b""), message["more_body"], len(booked)))

        await app(post_scope(state), receive_once(body), send)
        return sent

    async def main() -> list[list[Sent]]:
        async with app.router.lifespan_context(app) as given:
            state = dict(given or {})
            return list(await asyncio.gather(*(one(state) for _ in range(streams))))

    results = asyncio.run(main())
    assert len(booked) == streams  # each booked once
    assert all(ctx.status_code == 200 and ctx.error_type is None for ctx in booked)
    return results


def test_alone_the_rest_of_the_read_ends_the_body_once_booked(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.piece = 0
    [sent] = _stream(upstream, tmp_path)
    opening = EVENTS[0] + EVENTS[1]  # the role chunk and the first token, before the booking
    assert sent[0] == (opening, True, 0)
    assert sent[1:] == [(EXPECTED[len(opening) :], False, 1)]  # the rest, booked, and the end


def test_not_alone_the_whole_read_ends_the_body_once_booked(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.piece = 0
    monkeypatch.setattr(http_stream.SseStream, "alone", lambda self: False)
    [sent] = _stream(upstream, tmp_path)
    assert sent == [(EXPECTED, False, 1)]


def test_concurrent_streams_each_end_with_their_last_events(
    upstream: Upstream, tmp_path: Path
) -> None:
    upstream.piece = 0
    for sent in _stream(upstream, tmp_path, streams=4):
        assert b"".join(body for body, _, _ in sent) == EXPECTED
        assert [more for _, more, _ in sent][-1] is False
        assert all(more for _, more, _ in sent[:-1]) and sent[-1][0].endswith(b"[DONE]\n\n")


class HeldEnd(Upstream):
    """Writes the whole stream at once but the end of its body, which it holds back."""

    async def _stream(self, writer: asyncio.StreamWriter, events: list[bytes]) -> None:
        body = b"".join(events)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(body), body))
        await writer.drain()
        await asyncio.sleep(5)  # past the gateway's wait for it (FINAL_END_WAIT_S)
        writer.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def held_end() -> Iterator[Upstream]:
    server = HeldEnd().start()
    yield server
    server.stop()


def test_a_body_whose_end_is_not_in_ends_after_the_booking_and_the_wait(
    held_end: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_stream.SseStream, "alone", lambda self: False)
    [sent] = _stream(held_end, tmp_path)
    # The events at once, before the booking; then, booked, the end on its own.
    assert sent == [(EXPECTED, True, 0), (b"", False, 1)]
