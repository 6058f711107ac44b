"""A lean HTTP/1.1 client for `http://` and `https://` upstreams: asyncio.Protocol + httptools.

What aiohttp's client did per request, less its per-chunk machinery (a StreamReader whose
flow control resumed the transport on every chunk, a timer rescheduled on every
`data_received`, a response object of many fields): one protocol per connection parses the
reply with httptools' `HttpResponseParser` and keeps the body's pieces in a list; a reader
waits on one future, with one timer only while it waits.

It keeps the aiohttp client's behaviour where the gateway sees it:
- a pool per origin, `limit` connections at most over all origins, an idle connection
  closed after `keepalive_s` (and never reused past it);
- a connection goes back to the pool only when its reply was read to its end, it was
  framed (Content-Length or chunked) and the server keeps it alive; anything else (an
  error, a cancelled wait, a reply left part-read) closes it;
- `sock_connect` bounds the name's resolution, the TCP and TLS handshakes; `sock_read` each
  wait for bytes;
- gzip and deflate bodies are decoded as they are read (`accept-encoding: gzip, deflate`
  is sent unless the caller set its own), at most `DECODE_STEP` bytes per read;
- failures are raised as the aiohttp exceptions `failures.from_client_error` maps, so a
  timeout, a refused connection, a cut body or an undecodable one read the same.

Where a connection goes and how it is opened (the URL split once, TLS for `https://`, the
connect as aiohttp's connector makes it) is `h1_connect`'s.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import httptools

from gateway import busy_poll
from gateway.busy_poll import BusyPoll
from gateway.upstream import aio
from gateway.upstream.h1_connect import Key, Origin, open_connection, origin, tls_context
from gateway.upstream.h1_connect import serves as serves  # http_stream asks h1

if TYPE_CHECKING:
    import aiohttp

DECODE_STEP = 1024 * 1024
"""Bytes decoded from a compressed body per read at most (a gzip bomb is read in steps)."""
PAUSE_BYTES = 1024 * 1024
"""Bytes received and not read yet (the body's, with their chunk framing) past which the
socket is paused (a slow reader)."""
DEFAULT_HEADERS = (
    ("accept", b"Accept: */*\r\n"),
    ("accept-encoding", b"Accept-Encoding: gzip, deflate\r\n"),
)
USER_AGENT = f"User-Agent: {aio.user_agent()}\r\n".encode()


HEAD_CACHE_SIZE = 256
"""Request heads kept, framing aside: a route sends the same headers on every request (a
trace header that changes per request only misses, at the cost of one lookup)."""
_HEADS: dict[tuple[Origin, tuple[tuple[str, str], ...]], bytes] = {}


def _head(where: Origin, headers: dict[str, str], length: int | None) -> bytes:
    """The request's head; a newline in a header is refused, as aiohttp refuses it.

    All but its framing line is built once per origin and set of headers (`_HEADS`).
    """
    key = (where, tuple(headers.items()))
    head = _HEADS.get(key)
    if head is None:
        head = _head_lines(where, headers)
        if len(_HEADS) >= HEAD_CACHE_SIZE:
            _HEADS.clear()
        _HEADS[key] = head
    if length is None:
        return head + b"Transfer-Encoding: chunked\r\n\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % length


def _head_lines(where: Origin, headers: dict[str, str]) -> bytes:
    """The request line and headers, without the body's framing (checked for newlines)."""
    lines = [where.start]
    seen = set()
    for name, value in headers.items():
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(
                "Newline or carriage return detected in headers. Potential header injection attack."
            )
        low = name.lower()
        seen.add(low)
        if low in ("content-length", "transfer-encoding"):
            continue  # framed below from the body
        lines.append(f"{name}: {value}\r\n".encode("latin-1", "strict"))
    for name, line in DEFAULT_HEADERS:
        if name not in seen:
            lines.append(line)
    if "user-agent" not in seen:
        lines.append(USER_AGENT)
    if "host" not in seen:
        lines.append(where.authority)
    return b"".join(lines)


def _declared_length(headers: dict[str, str]) -> int | None:
    for name, value in headers.items():
        if name.lower() == "content-length":
            return int(value)
    return None


class _Decoder:
    """gzip or deflate, decoded as read, as aiohttp's `ZLibDecompressor` does."""

    __slots__ = ("_encoding", "_z")

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._z: Any = None

    def decode(self, data: bytes) -> bytes:
        if self._z is None:
            if self._encoding == "deflate":  # zlib-wrapped, or raw deflate as some send
                wbits = zlib.MAX_WBITS if data and data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            else:
                wbits = 16 + zlib.MAX_WBITS
            self._z = zlib.decompressobj(wbits=wbits)
        try:
            return bytes(self._z.decompress(data, DECODE_STEP))
        except zlib.error:
            error = _decode_error(self._encoding)
            raise error from error.__cause__  # the cause failures.py reads: the encoding

    def tail(self) -> bytes:
        """What the last `decode` left undecoded (past DECODE_STEP)."""
        return b"" if self._z is None else bytes(self._z.unconsumed_tail)

    def finish(self) -> None:
        """The body ended: a stream cut inside its compressed data did not decode."""
        if self._z is not None and not self._z.eof:
            raise _decode_error(self._encoding)


# aiohttp's exception types, imported with the first failure (gateway.upstream.aio).
def _decode_error(encoding: str) -> aiohttp.ClientPayloadError:
    error = aio.aiohttp().ClientPayloadError(f"Can not decode content-encoding: {encoding}")
    error.__cause__ = aio.aiohttp().http_exceptions.ContentEncodingError(encoding)
    return error


def _cut() -> aiohttp.ClientPayloadError:
    return _payload_error(
        "Response payload is not completed", "the connection closed before the body's end"
    )


def _payload_error(message: str, cause: str) -> aiohttp.ClientPayloadError:
    error = aio.aiohttp().ClientPayloadError(message)
    error.__cause__ = aio.aiohttp().http_exceptions.TransferEncodingError(cause)
    return error


class Connection(asyncio.Protocol):
    """One keep-alive connection: parses one reply at a time into its body pieces."""

    __slots__ = (
        "_deadline",
        "_drain",
        "_encoded",
        "_framed",
        "_headers",
        "_parser",
        "_paused",
        "_pool",
        "_timer",
        "_waiter",
        "body",
        "buffered",
        "busy",
        "complete",
        "error",
        "headers_done",
        "idle_since",
        "key",
        "loop",
        "lost",
        "poll",
        "reusable",
        "status",
        "transport",
    )

    def __init__(self, pool: Pool, key: Key) -> None:
        self._pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        # The loop it was made on, kept: `asyncio.get_running_loop()` is a getpid syscall
        # (CPython 3.11's fork check), ~1-1.5 us on a VM, and was asked three times a request.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.body: list[bytes] = []  # one list for the connection's life: the parser appends
        # to it itself (`on_body` is the list's `append`: no Python call per HTTP chunk, 20
        # in a stream of 20 events from vLLM or the mock), and `take` empties it.
        self._parser = httptools.HttpResponseParser(
            SimpleNamespace(
                on_header=self.on_header,
                on_headers_complete=self.on_headers_complete,
                on_body=self.body.append,
                on_message_complete=self.on_message_complete,
            )
        )
        self._waiter: asyncio.Future[None] | None = None
        # The read timeout: when the current wait fails (None while nothing waits), and
        # one timer per connection due by then. A wait moves the deadline; the timer stays
        # armed across waits (it is re-armed when it fires early, stopped when it fires
        # with nothing waiting): a timer made and cancelled per request cost a uvloop
        # handle, its close and one more turn of the loop.
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._drain: asyncio.Future[None] | None = None
        self._paused = False
        self.lost = False
        self.poll: BusyPoll | None = None
        self.busy = True  # a request is on it (False while idle in the pool)
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._framed = False
        self._encoded = False  # a content-encoding header came: `Reply` reads which
        self.headers_done = False
        self.body.clear()
        self.buffered = 0
        self.complete = False
        self.reusable = False
        self.error: BaseException | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.loop = asyncio.get_running_loop()
        self.poll = busy_poll.current()  # told of each read and write

    def data_received(self, data: bytes) -> None:
        if self.poll is not None:
            self.poll.read()
        if not self.busy:  # bytes on an idle connection: no reply is due, never reuse it
            self.close()
            return
        if self.complete or self.error is not None:
            self.reusable = False  # bytes no request asked for: never reuse
            return
        self.buffered += len(data)  # the body's bytes with their chunks' framing
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = _payload_error(f"the reply is not HTTP/1.1: {exc}", str(exc))
            self.reusable = False
        if self.buffered > PAUSE_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.reusable = False
        self._stop_timer()
        if self.headers_done and not self.complete and not self._framed and self.error is None:
            self.complete = True  # a body read until the connection closed
        elif not self.complete and self.error is None and self.busy:
            # (An idle pooled connection's close, the pool's or the server's, has no
            # reader: no error is built for it, so aiohttp is not imported for it.)
            if self.headers_done:
                self.error = _cut()
            else:
                self.error = aio.aiohttp().ServerDisconnectedError()
        self._pool.forget(self)
        self._wake()
        if self._drain is not None and not self._drain.done():
            self._drain.set_exception(aio.aiohttp().ServerDisconnectedError())

    def pause_writing(self) -> None:
        if self._drain is None or self._drain.done():
            self._drain = (self.loop or asyncio.get_running_loop()).create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim reply (100 Continue): the real one follows
            self._headers = []
            return
        self.status = status
        self.headers_done = True
        for name, value in self._headers:
            low = name.lower()
            if low == b"content-length" or (  # find, not `in`: see replies.line_data
                low == b"transfer-encoding" and value.lower().find(b"chunked") >= 0
            ):
                self._framed = True
            elif low == b"content-encoding":
                self._encoded = True

    def on_message_complete(self) -> None:
        if not self.headers_done:
            return  # the end of an interim reply
        self.complete = True
        self.reusable = self._parser.should_keep_alive()

    # used by Reply

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            self._deadline = None
            if not waiter.done():
                waiter.set_result(None)

    def _arm_timer(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Have the timer fire by `deadline`; one due earlier fires first and re-arms."""
        timer = self._timer
        if timer is not None:
            if timer.when() <= deadline:  # per request: deadlines only move later
                return
            timer.cancel()
        self._timer = loop.call_at(deadline, self._read_timer, deadline)

    def _read_timer(self, armed_for: float) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:  # nothing waits: the timer stops until the next wait
            return
        if deadline > armed_for:  # armed for an earlier wait: on to this one's deadline
            self._arm_timer(self.loop or asyncio.get_running_loop(), deadline)
            return
        self._deadline = None
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            timeout = aio.aiohttp().SocketTimeoutError("Timeout on reading data from socket")
            waiter.set_exception(timeout)

    def _stop_timer(self) -> None:
        """The connection is closed: nothing will wait on it again."""
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def waiter(self, read_timeout: float | None) -> asyncio.Future[None]:
        """A future done when more bytes (or the end, or an error) arrive, failed with a
        timeout past `read_timeout`. Whoever awaits it closes the connection if the
        await raises (else the timer's deadline is left for a wait that is over)."""
        loop = self.loop or asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if read_timeout is not None:
            deadline = self._deadline = loop.time() + read_timeout
            self._arm_timer(loop, deadline)
        return waiter

    async def wait(self, read_timeout: float | None) -> None:
        """Until more bytes (or the end, or an error) arrive, at most `read_timeout`."""
        try:
            await self.waiter(read_timeout)
        finally:
            self._waiter = None
            self._deadline = None

    def take(self) -> bytes:
        """The body's bytes not read yet; resumes a socket paused for a slow reader."""
        parts = self.body
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self.buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def write(self, head: bytes, body: bytes) -> None:
        """Write a request whose body is in hand (`send` without a coroutine)."""
        transport = self.transport
        assert transport is not None
        if self.poll is not None:
            self.poll.wrote()
        transport.write(head + body if len(body) < 16384 else head)
        if len(body) >= 16384:
            transport.write(body)

    async def send(self, head: bytes, body: bytes | AsyncIterator[bytes], chunked: bool) -> None:
        if isinstance(body, bytes):
            self.write(head, body)
            return
        transport = self.transport
        assert transport is not None
        if self.poll is not None:
            self.poll.wrote()
        transport.write(head)
        async for piece in body:
            if self.lost:
                raise aio.aiohttp().ServerDisconnectedError()
            if chunked:
                if piece:
                    transport.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
            else:
                transport.write(piece)
            if self._drain is not None:
                await self._drain
        if chunked:
            transport.write(b"0\r\n\r\n")

    def close(self) -> None:
        self.reusable = False
        self._stop_timer()
        if self.transport is not None and not self.lost:
            self.transport.close()
        self._pool.forget(self)

    def reuse(self) -> bool:
        """Ready for the next request: the last reply ended and the server keeps it open."""
        if not (self.reusable and self.complete) or self.lost or self.body:
            return False
        self._reset()  # the parser, after a whole keep-alive reply, reads the next
        return True


class Reply:
    """One reply, read as aiohttp's response is by http_stream: `readany` until b''."""

    __slots__ = ("_conn", "_decoder", "_ended", "_raw", "_read_timeout", "status")

    def __init__(self, conn: Connection, read_timeout: float | None) -> None:
        self._conn: Connection | None = conn
        self._raw = conn._headers  # the connection's next reply gets a list of its own
        self._read_timeout = read_timeout
        self.status = conn.status
        self._ended = False
        self._decoder: _Decoder | None = None
        # The headers were walked as they completed (`on_headers_complete`): again only
        # when one of them named an encoding (a plain reply's head is not read twice).
        for name, value in conn._headers if conn._encoded else ():
            if name.lower() == b"content-encoding":
                encoding = value.decode("latin-1").strip().lower()
                if encoding in ("gzip", "x-gzip", "deflate"):
                    self._decoder = _Decoder("deflate" if encoding == "deflate" else "gzip")
                elif encoding in ("br", "zstd"):  # aiohttp here has neither decoder
                    self._decoder = _Decoder(encoding)

    @property
    def content(self) -> Reply:
        return self

    def calls_in_flight(self) -> int:
        """Its pool's `in_use` (this reply's own call included); 0 once it is released."""
        conn = self._conn
        return conn._pool.in_use() if conn is not None else 0

    @property
    def closed(self) -> bool:
        return self._conn is None

    def header_dict(self) -> dict[str, str] | None:
        """The headers by lower-case name, when no name repeats (else None: join them)."""
        raw = self._raw
        headers = {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in raw}
        return headers if len(headers) == len(raw) else None

    def header_items(self) -> list[tuple[str, str]]:
        return [(n.decode("latin-1"), v.decode("latin-1")) for n, v in self._raw]

    def is_eof(self) -> bool:
        """Whether the body was read to its end: also when its end arrived with the last
        bytes read (a stream's `[DONE]` and its chunked end in one packet), so a closing
        stream does not wait for one more `readany` to say so."""
        if not self._ended and self._decoder is None:
            conn = self._conn
            if conn is not None and conn.complete and not conn.body and conn.error is None:
                self._ended = True
        return self._ended

    def exception(self) -> BaseException | None:
        return None

    def read_ready(self) -> bytes | None:
        """`readany` when it would not wait: the bytes already here, else None.

        None also where `readany` would raise or decode (an error, a compressed body), and
        at the body's end: those are left to `readany`, which says them as it always has.
        """
        conn = self._conn
        if conn is None or self._ended or self._decoder is not None or not conn.body:
            return None
        return conn.take()

    async def readany(self) -> bytes:
        """The decoded bytes that arrived (waiting for some); b'' at the body's end."""
        conn = self._conn
        if conn is None or self._ended:
            return b""
        decoder = self._decoder
        if decoder is not None and decoder._encoding in ("br", "zstd"):
            raise _decode_error(decoder._encoding)
        if decoder is not None:
            tail = decoder.tail()
            if tail:
                return decoder.decode(tail)
        while True:
            if conn.body:
                data = conn.take()
                if decoder is None:
                    return data
                decoded = decoder.decode(data)
                if decoded:
                    return decoded
                continue
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                if decoder is not None:
                    decoder.finish()
                self._ended = True
                return b""
            try:
                await conn.wait(self._read_timeout)
            except BaseException:
                self.close()
                raise

    def release(self) -> None:
        """Back to the pool when read to its end, else closed (as aiohttp's `release`)."""
        conn = self._conn
        if conn is None:
            return
        ended = self.is_eof()
        self._conn = None
        if ended and conn.reuse():
            conn._pool.put(conn)
        else:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Pool:
    """Keep-alive connections per origin; `limit` open at most, all origins together.

    `tls` verifies `https://` origins; by default `tls_context()`, made on the first one.
    """

    def __init__(self, limit: int, keepalive_s: float, tls: ssl.SSLContext | None = None) -> None:
        self._limit, self._keepalive_s = limit, keepalive_s
        self._tls = tls
        self._idle: dict[Key, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._sweep: asyncio.TimerHandle | None = None
        self.closed = False

    def in_use(self) -> int:
        """The connections open and not idle: the upstream calls in flight (or connecting)."""
        return len(self._open) - sum(map(len, self._idle.values()))

    def forget(self, conn: Connection) -> None:
        if conn in self._open:
            self._open.discard(conn)
            idle = self._idle.get(conn.key)
            if idle and conn in idle:
                idle.remove(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    def put(self, conn: Connection) -> None:
        if self.closed:
            conn.close()
            return
        loop = conn.loop or asyncio.get_running_loop()
        conn.idle_since, conn.busy = loop.time(), False
        self._idle.setdefault(conn.key, []).append(conn)
        if self._sweep is None:
            self._sweep = loop.call_at(conn.idle_since + self._keepalive_s, self._expire)
        self._wake_one()

    def _expire(self) -> None:
        """Close the connections idle for `keepalive_s`; come back for the next to expire."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() - self._keepalive_s
        oldest: float | None = None
        for conns in list(self._idle.values()):
            for conn in list(conns):
                if conn.idle_since <= deadline:
                    conn.close()
                elif oldest is None or conn.idle_since < oldest:
                    oldest = conn.idle_since
        if oldest is not None:
            self._sweep = loop.call_at(oldest + self._keepalive_s, self._expire)

    def _take_idle(self, key: Key) -> Connection | None:
        idle = self._idle.get(key)
        while idle:
            # The longest idle first, as aiohttp's connector takes them: at a low rate every
            # pooled connection keeps being used, so a burst after a quiet spell finds them
            # open instead of handshaking again (the expiry above bounds their age).
            conn = idle.pop(0)
            # Its own loop's clock (a pooled connection was made on it): asking for the
            # running loop is a getpid syscall (CPython 3.11's fork check) per request.
            now = (conn.loop or asyncio.get_running_loop()).time()
            if conn.lost or now - conn.idle_since >= self._keepalive_s:
                conn.close()
                continue
            conn.busy = True
            return conn
        return None

    async def acquire(self, where: Origin, connect_timeout: float | None) -> Connection:
        while True:
            conn = self._take_idle(where.key)
            if conn is not None:
                return conn
            if len(self._open) < self._limit:
                break
            if not self._close_other_idle():
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                except BaseException:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                    raise
        conn = Connection(self, where.key)
        self._open.add(conn)
        if where.tls and self._tls is None:
            self._tls = tls_context()
        try:
            await open_connection(conn, where, self._tls if where.tls else None, connect_timeout)
        except BaseException:
            self.forget(conn)
            if conn.transport is not None:
                conn.transport.close()
            raise
        return conn

    def _close_other_idle(self) -> bool:
        """At the limit, an idle connection to another origin makes room."""
        for conns in self._idle.values():
            if conns:
                conns[0].close()
                return True
        return False

    async def request(
        self,
        url: str,
        body: bytes | AsyncIterator[bytes],
        headers: dict[str, str],
        timeout: aio.Timeouts | aiohttp.ClientTimeout,
        while_waiting: Callable[[], None] | None = None,
    ) -> Reply:
        """POST `body` to `url` and wait for the reply's head; raises aiohttp's errors.

        `while_waiting` runs once the request is written, before the wait: CPU work the
        reply does not need (the pipeline's prefix check) done while the upstream computes.
        It must not raise: an error there would close a connection that did nothing wrong.
        """
        where = origin(url)
        if isinstance(body, bytes):
            length: int | None = len(body)
        else:
            length = _declared_length(headers)
        head = _head(where, headers, length)
        # A pooled connection and a body in hand (the usual request): no coroutine for
        # either step, neither of which would wait.
        conn = self._take_idle(where.key)
        if conn is None:
            conn = await self.acquire(where, timeout.sock_connect)
        try:
            if isinstance(body, bytes):
                conn.write(head, body)
            else:
                await conn.send(head, body, length is None)
            if while_waiting is not None:
                while_waiting()
            while not conn.headers_done:
                if conn.error is not None:
                    raise conn.error
                # The future itself, not `wait`'s coroutine: a failed wait closes `conn`.
                await conn.waiter(timeout.sock_read)
        except BaseException:
            conn.close()
            raise
        return Reply(conn, timeout.sock_read)

    async def aclose(self) -> None:
        """Close every connection; TLS ones without waiting on the server's close_notify.

        As aiohttp's connector closes (its `ssl_shutdown_timeout` 0): at shutdown a server
        slow to answer the TLS close must not hold the process.
        """
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self._open):
            if conn.transport is not None and conn.key[0] == "https":
                conn.lost = True  # aborted here: `close` then only forgets it
                conn.transport.abort()
            conn.close()
        self._idle.clear()
