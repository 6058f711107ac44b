"""The body guard's deadline: one shared timer, the same answers as a timeout per read.

Every read gets its own deadline (`timeout_s` after it started) and a 408 in OpenAI's
shape when it passes; a read that finishes in time is answered with its body; a cancel
from outside during a read stays a cancel; a loop in another thread still gets its
deadline; reads done leave the shared queue.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from starlette.types import Message

from gateway.body_guard import BodyGuard

PATH = "/v1/chat/completions"


def _scope(path: str = PATH) -> dict[str, Any]:
    return {"type": "http", "path": path, "headers": [(b"content-type", b"application/json")]}


def _guard(timeout_s: float) -> BodyGuard:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
        raise AssertionError("the guard's read is called directly")

    return BodyGuard(app, prompt_limit=1 << 20, api_limit=1 << 16, timeout_s=timeout_s)


class Client:
    """A client that sends its body when told (or never), and what the guard sent it."""

    def __init__(self, body: bytes = b'{"a": 1}') -> None:
        self.body = body
        self.ready = asyncio.Event()
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        await self.ready.wait()
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return int(starts[0]["status"]) if starts else None

    def error(self) -> dict[str, Any]:
        body = b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")
        error: dict[str, Any] = json.loads(body)["error"]
        return error


async def test_a_body_in_time_is_read_and_a_stalled_one_gets_408() -> None:
    guard = _guard(0.2)
    quick, stalled = Client(), Client()
    quick.ready.set()
    got = await asyncio.gather(
        guard.read(_scope(), quick.receive, quick.send),
        guard.read(_scope(), stalled.receive, stalled.send),
    )
    assert got == [b'{"a": 1}', None]
    assert quick.sent == []
    assert stalled.status() == 408
    error = stalled.error()
    assert "FAREBOX_BODY_TIMEOUT_S" in error["message"] and "0.2 s" in error["message"]
    assert guard.deadlines.waiting() == 0


async def test_each_read_has_its_own_deadline() -> None:
    guard = _guard(0.3)
    first, second = Client(), Client()
    started = time.monotonic()
    one = asyncio.create_task(guard.read(_scope(), first.receive, first.send))
    await asyncio.sleep(0.15)
    two = asyncio.create_task(guard.read(_scope(), second.receive, second.send))
    assert await one is None
    first_cut = time.monotonic() - started
    assert first.status() == 408 and second.status() is None  # the second is still in time
    second.ready.set()  # and sends its body before its own deadline
    assert await two == b'{"a": 1}'
    assert second.sent == []
    assert first_cut >= 0.3


async def test_a_read_after_an_expired_one_gets_its_full_time() -> None:
    guard = _guard(0.2)
    stalled = Client()
    assert await guard.read(_scope(), stalled.receive, stalled.send) is None
    late = Client()
    task = asyncio.create_task(guard.read(_scope(), late.receive, late.send))
    await asyncio.sleep(0.1)
    late.ready.set()
    assert await task == b'{"a": 1}'
    stalled_again = Client()
    started = time.monotonic()
    assert await guard.read(_scope(), stalled_again.receive, stalled_again.send) is None
    assert time.monotonic() - started >= 0.2 and stalled_again.status() == 408


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    guard = _guard(5.0)
    client = Client()
    task = asyncio.create_task(guard.read(_scope(), client.receive, client.send))
    await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:  # pragma: no cover
        raise AssertionError("the read was not cancelled")
    assert client.sent == []  # no 408 for a cancel that was not the deadline's
    assert guard.deadlines.waiting() == 0


async def test_finished_reads_leave_the_queue() -> None:
    guard = _guard(30.0)
    for _ in range(1000):
        client = Client()
        client.ready.set()
        assert await guard.read(_scope(), client.receive, client.send) == b'{"a": 1}'
    assert len(guard.deadlines._queue) <= 1
    assert guard.deadlines.waiting() == 0


async def test_a_loop_in_another_thread_still_gets_its_deadline() -> None:
    guard = _guard(0.2)
    here = Client()
    here_task = asyncio.create_task(guard.read(_scope(), here.receive, here.send))
    await asyncio.sleep(0.01)  # this loop holds the shared timer now
    statuses: list[int | None] = []

    def other_thread() -> None:
        async def stalled_read() -> None:
            client = Client()
            assert await guard.read(_scope(), client.receive, client.send) is None
            statuses.append(client.status())

        asyncio.run(stalled_read())

    thread = threading.Thread(target=other_thread)
    thread.start()
    await asyncio.to_thread(thread.join)
    assert statuses == [408]
    here.ready.set()
    assert await here_task is None  # it had stalled past its own deadline meanwhile
    assert here.status() == 408


async def test_a_new_loop_takes_over_from_a_finished_one() -> None:
    guard = _guard(0.2)

    def in_new_loop() -> int | None:
        async def stalled_read() -> int | None:
            client = Client()
            assert await guard.read(_scope(), client.receive, client.send) is None
            return client.status()

        return asyncio.run(stalled_read())

    assert await asyncio.to_thread(in_new_loop) == 408
    assert await asyncio.to_thread(in_new_loop) == 408
    client = Client()
    assert await guard.read(_scope(), client.receive, client.send) is None
    assert client.status() == 408
