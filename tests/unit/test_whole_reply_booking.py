"""A whole reply's booking (its `background`) runs after its last byte, and also when the
sending fails or is cut: the paid call is booked however the response ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.background import BackgroundTask
from starlette.types import Message

from gateway.pipeline.chat import json_response


class _Booking(BackgroundTask):
    def __init__(self, log: list[str]) -> None:  # no super().__init__: as Booking
        self.log = log

    async def __call__(self) -> None:
        await asyncio.sleep(0)  # a shielded booking still gets through an await
        self.log.append("booked")


async def _receive() -> Message:  # pragma: no cover - never called
    return {"type": "http.disconnect"}


async def test_the_booking_runs_after_the_body_is_sent() -> None:
    log: list[str] = []

    async def send(message: Message) -> None:
        log.append(message["type"])

    response = json_response(b'{"id":"x"}', 200, {"x-request-id": "req-1"})
    response.background = _Booking(log)
    await response({"type": "http"}, _receive, send)
    assert log == ["http.response.start", "http.response.body", "booked"]


async def test_a_failed_send_still_books() -> None:
    log: list[str] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the connection broke")

    response = json_response(b"{}", 200, {})
    response.background = _Booking(log)
    with pytest.raises(OSError):
        await response({"type": "http"}, _receive, send)
    assert log == ["booked"]


async def test_a_send_cut_by_shutdown_still_books() -> None:
    log: list[str] = []
    blocked = asyncio.Event()

    async def send(message: Message) -> None:
        blocked.set()
        await asyncio.Event().wait()  # a client that never reads: cut by the grace period

    response = json_response(b"{}", 200, {})
    response.background = _Booking(log)
    task: asyncio.Task[Any] = asyncio.ensure_future(response({"type": "http"}, _receive, send))
    await blocked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["booked"]


async def test_the_generic_path_books_too() -> None:
    """A reply whose headers name a content type is built by Starlette's own `__init__`."""
    log: list[str] = []

    async def send(message: Message) -> None:
        log.append(message["type"])

    response = json_response(b"{}", 204, {"content-type": "application/json"})
    response.background = _Booking(log)
    await response({"type": "http"}, _receive, send)
    assert log == ["http.response.start", "http.response.body", "booked"]
