"""The server's default headers, written once per list, give the bytes uvicorn writes.

`Cycle` renders the default headers (`date`, `server`) once per list uvicorn makes; a list
it cannot render as is (a refused name or value, a name in upper case, a framing header)
goes through uvicorn's per-response path. Each case is run on both cycles with each
kind of default list, and one list object is used for many responses, then replaced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.http_cycle import Cycle
from tests.unit.recording_transport import RecordingTransport

DEFAULTS = {
    "plain": [(b"date", b"Wed, 02 Dec 2026 04:40:00 GMT"), (b"server", b"uvicorn")],
    "none": [],
    "upper-case name": [(b"Server", b"uvicorn")],
    "refused name": [(b"x bad", b"1")],
    "refused value": [(b"x-bad", b"a\nb")],
    "tab in value": [(b"x-tab", b"a\tb")],
    "connection close": [(b"connection", b"close")],
    "content-length": [(b"content-length", b"2")],
}
RESPONSES = {
    "whole": [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]},
        {"type": "http.response.body", "body": b"{}"},
    ],
    "stream": [
        {"type": "http.response.start", "status": 200, "headers": ((b"X-Id", b"a"),)},
        {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
        {"type": "http.response.body", "body": b""},
    ],
}


async def _respond(kind: type, defaults: list[tuple[bytes, bytes]], messages: list[Any]) -> Any:
    transport = RecordingTransport()
    scope = {"method": "POST", "http_version": "1.1", "client": None, "path": "/"}
    logger = logging.getLogger("test")
    args = (scope, transport, FlowControl(transport), logger, logger, False, defaults, False, True)
    if kind is Cycle:
        cycle = Cycle(*args, lambda: None)
    else:
        names = ("scope", "transport", "flow", "logger", "access_logger", "access_log")
        keywords = dict(zip(names, args, strict=False))
        cycle = kind(
            **keywords,
            default_headers=defaults,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=True,
            on_response=lambda: None,
        )
    try:
        for message in messages:
            await cycle.send(message)
    except (RuntimeError, ValueError) as exc:
        return (type(exc).__name__, str(exc), transport.data)
    return transport.data, transport.closed, cycle.keep_alive


@pytest.mark.parametrize("defaults", sorted(DEFAULTS))
@pytest.mark.parametrize("response", sorted(RESPONSES))
def test_the_defaults_are_written_as_uvicorn_writes_them(defaults: str, response: str) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        listed = list(DEFAULTS[defaults])  # one list for several responses, as in a second
        ours = [await _respond(Cycle, listed, RESPONSES[response]) for _ in range(3)]
        theirs = [await _respond(RequestResponseCycle, listed, RESPONSES[response])]
        return ours, theirs

    ours, theirs = asyncio.run(run())
    assert ours == theirs * 3


def test_a_new_list_of_defaults_is_written_not_the_last_one() -> None:
    async def run() -> list[bytes]:
        written = []
        for second in (b"04:40:00", b"04:40:01"):
            listed = [(b"date", b"Wed, 02 Dec 2026 " + second + b" GMT"), (b"server", b"uvicorn")]
            data, _, _ = await _respond(Cycle, listed, RESPONSES["whole"])
            written.append(data)
        return written

    first, second = asyncio.run(run())
    assert b"date: Wed, 02 Dec 2026 04:40:00 GMT\r\nserver: uvicorn\r\n" in first
    assert b"date: Wed, 02 Dec 2026 04:40:01 GMT\r\nserver: uvicorn\r\n" in second
