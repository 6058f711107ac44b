"""The HTTP server: uvicorn with Farebox's connection limits and error shape.

uvicorn bounds idle keep-alive connections but not a client that sends its request
headers a byte at a time, answers malformed HTTP in plain text, and its concurrency
limit answers in plain text too. `FareboxHttpToolsProtocol` (a subclass of uvicorn's
httptools protocol; `FareboxH11Protocol` where httptools is not installed) adds a
header-read deadline, a size limit on the request head, a connection limit and
OpenAI-shaped answers for all of them; the server runs on uvloop where it exists.
The body-read deadline and size limits live in `gateway.body_guard`, where the route
is known. `server_config` builds the one configuration that `farebox serve` and the tests run.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib.util
import urllib.parse
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, cast

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable

from gateway import busy_poll
from gateway.busy_poll import BusyPoll
from gateway.drain import BACKSTOP_S, TASK_KEY
from gateway.errors import (
    BadHttpError,
    FareboxError,
    OverloadedError,
    RequestTimeoutError,
    error_bytes,
    send_error,
)
from gateway.request_id import new_request_id, request_id_header
from gateway.settings import Settings

# The most a request line and headers may take; one over it is refused with 400.
MAX_HEAD_BYTES = 64 * 1024
# h11 refuses NUL, VT and FF in a header value. Bytes as ints: `int in bytes` is a memchr,
# where `bytes in bytes` on CPython 3.11 first raises and clears a TypeError (~0.7 µs).
_NUL, _VT, _FF = 0x00, 0x0B, 0x0C
_QUERY, _FRAGMENT = ord("?"), ord("#")
_JOIN_BYTES = 64 * 1024  # a body up to this size goes out with its head in one write
# C parser and loop: a fraction of h11's and asyncio's CPU per request
# (docs/performance.md); h11 and asyncio where their wheels do not exist (uvloop: Windows).
HTTP_PARSER = "httptools" if importlib.util.find_spec("httptools") else "h11"
LOOP = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"

if HTTP_PARSER == "httptools":
    from httptools import HttpParserError, HttpParserUpgrade, parse_url
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from gateway.http_cycle import Cycle
else:  # pragma: no cover - the base is never used without httptools
    from uvicorn.protocols.http.h11_impl import H11Protocol as HttpToolsProtocol  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a client may take to send its headers, and how many may be connected."""

    header_timeout_s: float
    max_connections: int


def raw_response(error: FareboxError) -> bytes:
    """A complete HTTP/1.1 response for `error` that closes the connection.

    No request reached the app, so the id is a fresh one (the SDK reads it all the same).
    """
    body = error_bytes(error)
    reason = HTTPStatus(error.status_code).phrase
    head = (
        f"HTTP/1.1 {error.status_code} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"x-request-id: {new_request_id()}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class HeadWithBody:
    """A connection's transport that writes a response head with the body after it.

    uvicorn writes a response's head and its body in two `write`s: two send syscalls
    and, with TCP_NODELAY, two packets the client wakes for. The head is held until
    the next write (the body of a whole reply comes in the same turn of the loop) and
    both go out in one `writelines` (one `writev` on uvloop), or alone at the loop's
    next turn (a stream's head, whose first event is not in yet). Anything else is
    written at once; `close` writes a held head first.
    """

    __slots__ = ("_held", "_loop", "_poll", "_transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        poll: BusyPoll | None = None,
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._poll = poll  # told of each write (`gateway.busy_poll`)

    def write(self, data: bytes) -> None:
        if self._poll is not None:
            self._poll.wrote()
        held = self._held
        if held is not None:
            self._held = None
            if len(data) <= _JOIN_BYTES:
                self._transport.writelines((held, data))
                return
            self._transport.write(held)  # not joined where writelines copies (asyncio)
        elif data.startswith(b"HTTP/"):  # a response head, written before its body
            self._held = data
            self._loop.call_soon(self._write_held)
            return
        self._transport.write(data)

    def _write_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._transport.write(held)

    def close(self) -> None:
        self._write_held()
        self._transport.close()

    def is_closing(self) -> bool:  # asked several times a request: not via __getattr__
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:  # every other method: the transport's own
        return getattr(self._transport, name)


class _Guard:
    """The header deadline, the connection cap and JSON errors, for either HTTP parser.

    Mixed in before uvicorn's protocol class: `_headers_arrived` must be called by the
    subclass when a request's headers are complete.
    """

    limits: ClassVar[ConnectionLimits]
    _header_timer: asyncio.TimerHandle | None = None
    # When the awaited request head must be in; None while a request is served. The timer
    # is not moved per request (a cancel and a new timer each time): when it fires, it
    # answers 408 past the deadline, waits on for a later one, or stops if there is none.
    _head_deadline: float | None = None
    # When an idle keep-alive connection is closed (uvicorn's timeout_keep_alive), where
    # the protocol keeps it here instead of in a timer of its own: the same one timer.
    _idle_deadline: float | None = None
    # Provided by uvicorn's protocol classes.
    app: Any
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _guard_connection(self) -> None:
        self._arm_header_timer()
        if len(self.connections) > self.limits.max_connections:
            # Read the request (within the header deadline), then answer 503 and close:
            # closing at once would reset the socket under a client still writing.
            self.app = _overloaded

    def _answer_and_close(self, error: FareboxError) -> None:
        if not self.transport.is_closing():
            self.transport.write(raw_response(error))
            self.transport.close()

    def _arm_header_timer(self) -> None:
        """Start the deadline for the next request head."""
        self._head_deadline = self.loop.time() + self.limits.header_timeout_s
        self._arm_timer()

    def _arm_timer(self) -> None:
        """Have the timer fire by the nearest deadline; a later one is checked when it fires."""
        head, idle = self._head_deadline, self._idle_deadline
        deadline = idle if head is None else head if idle is None else min(head, idle)
        if deadline is None:
            return
        timer = self._header_timer
        if timer is not None:
            if timer.when() <= deadline:  # per request: the deadlines only move later
                return
            timer.cancel()
        self._header_timer = self.loop.call_at(deadline, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        """The head is in: no deadline until the response completes."""
        self._head_deadline = None

    def _stop_header_timer(self) -> None:
        """The connection is gone: stop the timer itself."""
        self._head_deadline = self._idle_deadline = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        now = self.loop.time()
        idle = self._idle_deadline
        if idle is not None and now >= idle:  # uvicorn's keep-alive timeout: close, no answer
            self._stop_header_timer()
            if not self.transport.is_closing():
                self.transport.close()
            return
        deadline = self._head_deadline
        if deadline is None or now < deadline:  # served now, or the deadline moved on
            self._arm_timer()  # waits on for what is left, if anything
            return
        seconds = self.limits.header_timeout_s
        self._answer_and_close(
            RequestTimeoutError(
                f"request headers not received within {seconds:g} s (FAREBOX_HEADER_TIMEOUT_S)"
            )
        )


class FareboxHttpToolsProtocol(_Guard, HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a connection cap, JSON errors.

    llhttp bounds nothing itself, so a request head over `MAX_HEAD_BYTES` is refused
    here (h11 refuses one over 16 KiB the same way). The parser's callbacks are
    uvicorn's with less per request: one override each instead of an override and its
    parent, a plain path read without `httptools.parse_url`, and `gateway.http_cycle.Cycle`
    for the request's messages. A POST to a model route (one of the app's `lanes`) goes to
    its front, not through uvicorn's proxy-headers layer and the app: the model routes read
    neither `client` nor `scheme`, which is all that layer sets (every other request still
    passes it).
    """

    _head_bytes = 0
    _in_head = True
    # The app whose `lanes` (POST path -> front) are served straight (set by `protocol_class`).
    direct_app: ClassVar[Any] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # llhttp refuses header values h11 accepts (DEL, C1 and most C0 controls) before
        # the app can say which header is wrong; take what h11 takes, and refuse in
        # `on_headers_complete` what h11 refuses (NUL, VT, FF). CR and LF stay llhttp's.
        with contextlib.suppress(AttributeError):  # httptools < 0.6.3
            self.parser.set_dangerous_leniencies(
                lenient_data_after_close=True,  # as uvicorn sets it
                lenient_headers=True,
            )

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # its flow control keeps the transport itself
        self._poll = busy_poll.current()
        self.transport = cast(asyncio.Transport, HeadWithBody(transport, self.loop, self._poll))
        self._guard_connection()
        self._lanes = self._lanes_of_app()

    def _lanes_of_app(self) -> dict[str, Any]:
        """The fronts this connection hands POST requests to by path: the app's lanes when
        the connection got the app behind uvicorn's proxy-headers layer alone. A connection
        over the cap (the 503 app, whatever its path), or any other wrapping (uvicorn's
        message logger at log level trace), sends every request to the app it got."""
        app, direct = self.app, self.direct_app
        if direct is not None and isinstance(app, ProxyHeadersMiddleware) and app.app is direct:
            lanes: dict[str, Any] = self.direct_app.lanes  # `direct`: narrowed by the `is`
            return lanes
        return {}

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._poll is not None:
            self._poll.read()
        self._idle_deadline = None  # not idle: uvicorn's keep-alive timeout is off
        try:
            self.parser.feed_data(data)
        except HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self.send_400_response(f"request head over {MAX_HEAD_BYTES} bytes")

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }

    def on_headers_complete(self) -> None:
        # One pass over every value, not a call per header (~0.5 µs each).
        values = b"\n".join([value for _, value in self.headers])
        if _NUL in values or _VT in values or _FF in values:
            raise ValueError("a header value holds NUL, VT or FF")  # the parser's 400
        self._in_head = False
        self._cancel_header_timer()  # the deadline is met
        parser = self.parser
        scope = self.scope
        http_version = parser.get_http_version()
        method = scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        url = self.url
        if url[:1] == b"/" and _QUERY not in url and _FRAGMENT not in url:
            raw_path, query = url, b""  # what parse_url gives for an origin-form path
        else:
            parsed_url = parse_url(url)
            raw_path, query = parsed_url.path, parsed_url.query or b""
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root_path = self.root_path
        if root_path:
            path, raw_path = root_path + path, root_path.encode("ascii") + raw_path
        scope["path"] = path
        scope["raw_path"] = raw_path
        scope["query_string"] = query
        app: Any
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency
            or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        elif method == "POST" and (lane := self._lanes.get(path)) is not None:
            # `Gateway.__call__`'s hand-over, here: one coroutine less.
            scope["app"] = self.direct_app  # type: ignore[typeddict-unknown-key]  # as Starlette sets it
            app = lane
        else:
            app = self.app
        existing_cycle = self.cycle
        self.cycle = Cycle(
            scope,
            self.transport,
            self.flow,
            self.logger,
            self.access_logger,
            self.access_log,
            self.server_state.default_headers,
            self.expect_100_continue,
            http_version != "1.0" and parser.should_keep_alive(),
            self.on_response_complete,
        )
        if existing_cycle is None or existing_cycle.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:  # pipelined: queued until the response before it is complete
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        """uvicorn's, and the task is kept in the request's scope (`TASK_KEY`), where the
        chat path's in-flight tracking reads it: `asyncio.current_task()` asks for the
        running loop, which costs a getpid syscall (CPython's fork check)."""
        coroutine = cycle.run_asgi(app)
        if self.config.reset_contextvars:  # uvicorn's opt-in: each task a fresh context
            task = self.loop.create_task(coroutine, context=contextvars.Context())
        else:
            task = self.loop.create_task(coroutine)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        cycle.scope[TASK_KEY] = task

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return
        if cast(Cycle, cycle).add_body(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            return
        cycle.more_body = False
        cycle.message_event.set()

    def on_response_complete(self) -> None:
        """uvicorn's, with its keep-alive timeout kept as a deadline of the guard's timer.

        uvicorn made a keep-alive timer on every response and cancelled it on the next
        request's first bytes: a timer made and dropped per request.
        """
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request already parsed starts now: its head is in
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_deadline = self.loop.time() + self.timeout_keep_alive
        self._arm_header_timer()  # the next request's headers

    def send_400_response(self, msg: str) -> None:
        """Answer malformed HTTP in OpenAI's error shape, then close."""
        self._answer_and_close(BadHttpError(f"malformed HTTP request: {msg}"))


async def _overloaded(scope: Any, receive: Any, send: Any) -> None:
    """The app a connection over the limit gets: 503, and the connection closes."""
    error = OverloadedError("the gateway has too many open connections; retry shortly")
    await send_error(send, error, ((b"retry-after", b"1"), request_id_header(scope)))


def protocol_class(
    limits: ConnectionLimits, parser: str = HTTP_PARSER, app: Any = None
) -> type[_Guard]:
    """A protocol class bound to `limits` (uvicorn builds one protocol per connection).

    With `app` (an ASGI app with `lanes`, as `gateway.front.Gateway`), POST requests to
    their paths skip uvicorn's proxy-headers layer and the app on httptools.
    """
    if parser == "httptools":
        base: type[_Guard] = FareboxHttpToolsProtocol
    else:  # h11 and uvicorn's protocol on it are imported only where they serve
        from gateway.server_h11 import FareboxH11Protocol

        base = FareboxH11Protocol
    bound: dict[str, Any] = {"limits": limits}
    if base is FareboxHttpToolsProtocol and isinstance(getattr(app, "lanes", None), dict):
        bound |= {"direct_app": app}
    return type(base.__name__, (base,), bound)


def server_config(app: Any, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """The uvicorn configuration `farebox serve` runs; tests start the same one."""
    limits = ConnectionLimits(settings.header_timeout_s, settings.max_connections)
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "access_log": False,
        "lifespan": "on",
        "http": protocol_class(limits, app=app),
        "loop": LOOP,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        # No route is a WebSocket: without this uvicorn imports the websockets package
        # (17 modules, ~10 ms before the port opens) to hand an `Upgrade: websocket`
        # request to an app that refuses it; now it is answered as the HTTP request it is.
        "ws": "none",
        # uvicorn's own limit answers in plain text; the protocol enforces ours.
        "limit_concurrency": None,
        # On SIGTERM: stop accepting, let in-flight requests (streams) finish; past the
        # grace period `gateway.drain` cuts them; this is uvicorn's backstop after that.
        "timeout_graceful_shutdown": settings.shutdown_grace_s + BACKSTOP_S,
    }
    return uvicorn.Config(app, **(options | overrides))
