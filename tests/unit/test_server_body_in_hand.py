"""A body the server already holds is taken without a deadline or an await, as `receive`
would give it.

`Cycle.take_body` hands over a request body that came in whole (one piece or several),
once, and then `receive` waits on the client as before; it declines while more body is
due, a 100 Continue is owed, the body was taken already or the client is gone.
`BodyGuard.read` takes such a body without a deadline and still refuses one over the limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl

from gateway.body_guard import BodyGuard
from gateway.http_cycle import Cycle

PATH = "/v1/chat/completions"


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.reading = True

    def write(self, data: Any) -> None:
        self.data += bytes(data)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def _cycle(expect_100_continue: bool = False) -> tuple[Cycle, _Transport]:
    transport = _Transport()
    logger = logging.getLogger("test")
    scope = {"method": "POST", "http_version": "1.1", "path": PATH, "headers": []}
    cycle = Cycle(
        scope,
        transport,
        FlowControl(transport),
        logger,
        logger,
        False,
        [],
        expect_100_continue,
        True,
        lambda: None,
    )
    return cycle, transport


def _arrive(cycle: Cycle, *pieces: bytes, complete: bool = True) -> None:
    """What the protocol's `on_body` and `on_message_complete` do."""
    for piece in pieces:
        cycle.add_body(piece)
        cycle.message_event.set()
    if complete:
        cycle.more_body = False
        cycle.message_event.set()


def _guard(limit: int = 1 << 20) -> BodyGuard:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
        raise AssertionError("the guard's read is called directly")

    return BodyGuard(app, prompt_limit=limit, api_limit=1 << 16, timeout_s=5.0)


async def test_a_body_in_one_piece_is_taken_once_then_receive_waits() -> None:
    cycle, _ = _cycle()
    piece = b'{"model": "m"}'
    _arrive(cycle, piece)
    body = cycle.take_body()
    assert body is piece  # the parser's bytes, not a copy
    assert cycle.take_body() is None
    waiting = asyncio.ensure_future(cycle.receive())
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing more: receive waits on the client, as before
    cycle.disconnected = True
    cycle.message_event.set()
    assert await waiting == {"type": "http.disconnect"}


async def test_a_body_in_pieces_is_taken_whole_and_reading_resumes() -> None:
    cycle, transport = _cycle()
    _arrive(cycle, b'{"a": ', b"1}")
    cycle.flow.pause_reading()  # as the protocol does over its high-water mark
    assert cycle.take_body() == b'{"a": 1}'
    assert transport.reading


async def test_an_empty_body_is_taken_as_empty() -> None:
    cycle, _ = _cycle()
    _arrive(cycle)
    assert cycle.take_body() == b""


async def test_take_body_declines_when_receive_has_work_to_do() -> None:
    cycle, _ = _cycle()
    _arrive(cycle, b"part", complete=False)
    assert cycle.take_body() is None  # more body is due
    assert await cycle.receive() == {"type": "http.request", "body": b"part", "more_body": True}

    cycle, transport = _cycle(expect_100_continue=True)
    _arrive(cycle, b"{}")
    assert cycle.take_body() is None  # the 100 Continue is receive's to send
    assert await cycle.receive() == {"type": "http.request", "body": b"{}", "more_body": False}
    assert transport.data == b"HTTP/1.1 100 Continue\r\n\r\n"

    cycle, _ = _cycle()
    _arrive(cycle, b"{}")
    cycle.disconnected = True
    assert cycle.take_body() is None


async def test_the_guard_takes_a_body_in_hand_without_a_deadline() -> None:
    cycle, _ = _cycle()
    _arrive(cycle, b'{"a": 1}')
    guard = _guard()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "path": PATH, "headers": []}
    assert await guard.read(scope, cycle.receive, send) == b'{"a": 1}'
    assert not sent
    assert guard.deadlines.waiting() == 0
    assert not guard.deadlines._queue  # no deadline was started for it


async def test_the_guard_refuses_a_body_in_hand_over_the_limit() -> None:
    cycle, _ = _cycle()
    _arrive(cycle, b"x" * 11)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "path": PATH, "headers": []}
    assert await _guard(limit=10).read(scope, cycle.receive, send) is None
    assert sent[0]["status"] == 413
    error = json.loads(sent[1]["body"])["error"]
    assert "request body is 11 bytes, over the limit of 10 bytes" in error["message"]


async def test_the_guard_reads_through_any_other_receive() -> None:
    messages = [
        {"type": "http.request", "body": b'{"a": ', "more_body": True},
        {"type": "http.request", "body": b"1}", "more_body": False},
    ]

    async def receive() -> Any:
        return messages.pop(0)

    scope = {"type": "http", "path": PATH, "headers": []}
    assert await _guard().read(scope, receive, _no_send) == b'{"a": 1}'


async def _no_send(message: Any) -> None:  # pragma: no cover
    raise AssertionError(f"nothing is sent: {message}")
