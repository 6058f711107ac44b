"""One request and its response on an httptools connection, with less work per message.

uvicorn's `RequestResponseCycle` runs, per response head, two regex searches and a
`lower()` per header and a list grown four items per header; per body message two
`message.get`s, a list and a join even for one chunk; and `receive` creates and awaits a
coroutine on the body event even when the body is already in. `Cycle` writes the same
bytes and raises the same errors with less of that: the names are checked in one pass
over their join and the values in one over theirs joined by a tab (uvicorn's patterns are
character classes, read here as `bytes.translate` tables, and a tab is allowed in a value,
so the join holds a refused byte exactly when one of them does), a list of names is
checked, lowercased and rendered once into a `bytes %` template its values fill in, and a
body that came in one piece is handed on as the parser gave it (uvicorn copies it into a
bytearray, then out).
`gateway.server.FareboxHttpToolsProtocol` builds one per request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

_NAME, _VALUE = itemgetter(0), itemgetter(1)
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))
_CHUNKED_END = b"0\r\n\r\n"


def _refused_bytes(pattern: re.Pattern[bytes]) -> bytes:
    """A `bytes.translate` table that maps each byte `pattern` matches to NUL, any other to 1.

    `0 in data.translate(table)` says what `pattern.search(data)` says of a one-byte
    character class: one table lookup per byte, then a `memchr`, where the regex engine
    interprets the class again at each byte (~40 instructions a byte: ~3% of the
    server's instructions per request went to these searches).
    """
    return bytes(0 if pattern.fullmatch(bytes((byte,))) else 1 for byte in range(256))


_REFUSED_IN_NAME = _refused_bytes(HEADER_RE)
_REFUSED_IN_VALUE = _refused_bytes(HEADER_VALUE_RE)


def refused_name(names: bytes) -> bool:
    """Whether a byte of `names` is one uvicorn's `HEADER_RE` refuses in a header name."""
    return 0 in names.translate(_REFUSED_IN_NAME)


def refused_value(values: bytes) -> bool:
    """Whether a byte of `values` is one uvicorn's `HEADER_VALUE_RE` refuses in a value."""
    return 0 in values.translate(_REFUSED_IN_VALUE)


class _RenderedDefaults:
    """The server's default headers (`date`, `server`) as header lines, made once per list.

    uvicorn makes a new list each second (for `date`), and every response of that second
    starts with it: checked and written once, not per response. A list that is not plain
    (a name or value the checks refuse, a name not in lower case, a framing header) is
    not rendered: those responses take uvicorn's path, which raises or frames as it does.
    """

    __slots__ = ("_for", "_lines")

    def __init__(self) -> None:
        self._for: list[tuple[bytes, bytes]] | None = None
        self._lines: bytes | None = None

    def lines(self, defaults: list[tuple[bytes, bytes]]) -> bytes | None:
        if defaults is not self._for:
            self._for, self._lines = defaults, _render(defaults)
        return self._lines


def _render(defaults: list[tuple[bytes, bytes]]) -> bytes | None:
    names = b"".join([name for name, _ in defaults])
    if (
        refused_name(names)
        or refused_value(b"\t".join([value for _, value in defaults]))
        or names.lower() != names
        or any(name in _FRAMING for name, _ in defaults)
    ):
        return None
    return b"".join([name + b": " + value + b"\r\n" for name, value in defaults])


# One per process: each response of a second reads the same server defaults.
_RENDERED = _RenderedDefaults()


class _Shape:
    """A response's header names, checked once: its header lines as a `bytes %` template
    (one `%b` per value) and where its framing headers are.

    A route sends the same names on every response: the names are checked and rendered
    once, and each response fills in its values in C instead of a list grown four items
    per header and joined.
    """

    __slots__ = ("framing", "template")

    def __init__(self, names: tuple[bytes, ...]) -> None:
        joined = b"".join(names)
        if refused_name(joined):
            raise RuntimeError("Invalid HTTP header name.")
        if joined.lower() != joined:
            names = tuple(name.lower() for name in names)
        # A `%` is a token character (allowed in a name): doubled, it is written as one.
        lines = [name.replace(b"%", b"%%") + b": %b\r\n" for name in names]
        self.template = b"".join(lines)
        self.framing = tuple((at, name) for at, name in enumerate(names) if name in _FRAMING)


# Shapes by the names' tuple (not their join: two lists with one join differ in lines).
_SHAPES: dict[tuple[bytes, ...], _Shape] = {}
_SHAPES_SIZE = 256


class Cycle(RequestResponseCycle):
    """uvicorn's request-response cycle (same attributes, same bytes, same errors)."""

    def __init__(  # positional: one call per request, no keyword matching
        self,
        scope: Any,
        transport: asyncio.Transport,
        flow: FlowControl,
        logger: logging.Logger,
        access_logger: logging.Logger,
        access_log: bool,
        default_headers: list[tuple[bytes, bytes]],
        expect_100_continue: bool,
        keep_alive: bool,
        on_response: Callable[..., None],
    ) -> None:
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.logger = logger
        self.access_logger = access_logger
        self.access_log = access_log
        self.default_headers = default_headers
        self.message_event = asyncio.Event()
        self.on_response = on_response
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        self.body = b""  # type: ignore[assignment]  # bytes while one piece, then a bytearray
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0

    def add_body(self, body: bytes) -> int:
        """Keep a piece of the request body; return how much is held."""
        held = self.body
        if not held:
            self.body = body  # type: ignore[assignment]
            return len(body)
        if type(held) is bytes:
            held = self.body = bytearray(held)
        held += body
        return len(held)

    def take_body(self) -> bytes | None:
        """The request's whole body when it is already in and unread, taken as `receive`
        would take it; None when `receive` has to be awaited (more to come, a 100
        Continue to send, taken already, or the client gone).

        A small request's head and body come in one read, before its task first runs:
        the body guard then takes the body without a deadline or a coroutine.
        """
        if (
            self.more_body
            or self.waiting_for_100_continue
            or self.disconnected
            or self.response_complete
            or not self.message_event.is_set()
        ):
            return None
        self.flow.resume_reading()
        self.message_event.clear()
        body = self.body
        self.body = b""  # type: ignore[assignment]
        return body if type(body) is bytes else bytes(body)

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()  # pragma: no cover - the client stopped reading
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self._start(message)
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            kind = message["type"]
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
            )

    def _start(self, message: Any) -> None:
        """Write the status line and headers (`HeadWithBody` holds them for the body)."""
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        defaults = self.default_headers
        rendered = _RENDERED.lines(defaults)
        headers = list(message.get("headers", ()))
        if rendered is None:  # checked and written with the response's own, as uvicorn does
            headers = defaults + headers
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status_code,
            )
        names = tuple(map(_NAME, headers))  # no comprehension's frame
        shape = _SHAPES.get(names)
        if shape is None:
            shape = _Shape(names)  # raises for a name uvicorn refuses
            if len(_SHAPES) >= _SHAPES_SIZE:
                _SHAPES.clear()
            _SHAPES[names] = shape
        values = tuple(map(_VALUE, headers))
        if refused_value(b"\t".join(values)):
            raise RuntimeError("Invalid HTTP header value.")
        has_connection_close = False
        for at, name in shape.framing:
            has_connection_close = self._framing(name, values[at]) or has_connection_close
        content = [STATUS_LINE[status_code]]
        if rendered is not None:
            content.append(rendered)
        content.append(shape.template % values)
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status_code not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    def _framing(self, name: bytes, value: bytes) -> bool:
        """Read a framing header as uvicorn does; True if it is `connection: close`."""
        if name == b"content-length":
            if self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
        elif name == b"transfer-encoding":
            if value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
        elif b"close" in [token.lower().strip() for token in value.split(b",")]:
            self.keep_alive = False
            return True
        return False

    def _body(self, body: bytes, more_body: bool) -> None:
        """Write a piece of the response body; on the last, complete the response."""
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            if body:
                if more_body:
                    self.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
                else:
                    self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
            elif not more_body:
                self.transport.write(_CHUNKED_END)
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    async def receive(self) -> Any:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            event = self.message_event
            if not event.is_set():  # else `wait` would return at once: no coroutine
                await event.wait()
            event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body = self.body
        self.body = b""  # type: ignore[assignment]
        return {
            "type": "http.request",
            "body": body if type(body) is bytes else bytes(body),
            "more_body": self.more_body,
        }
