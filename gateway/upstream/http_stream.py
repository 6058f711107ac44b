"""What every native HTTP upstream shares: one pooled client, a bounded whole reply, an SSE stream.

The chat (`openai_compat`) and Messages (`anthropic_messages`) upstreams send through one
pooled client: `http://` and `https://` origins through `h1` (an asyncio.Protocol with
httptools' parser and the loop's TLS, which replaced aiohttp's client there: see its
docstring and docs/performance.md), a URL with credentials in it (`https://user:pass@...`,
sent as Basic auth) through one aiohttp session. With aiohttp
instead of httpx the gateway's CPU per request had fallen from 6.2-6.6 ms to 2.2-3.0 ms
(httpcore's pool bookkeeping and its socket poll per pooled connection per request were
39% of the gateway's CPU). litellm keeps its httpx client.

A connection goes back to the pool only when its reply was read to the end; a reply
left part-read (a client gone mid-stream, a refused reply) closes its connection, which
is also how an upstream learns to stop generating.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeAlias

from gateway.body_guard import SharedDeadlines
from gateway.errors import UpstreamProtocolError
from gateway.upstream import failures, h1
from gateway.upstream.aio import Timeouts, aiohttp, client_error
from gateway.upstream.sse import DONE, EventSplitter, event_data

if TYPE_CHECKING:  # imported on first use (gateway.upstream.aio): a URL with credentials
    import aiohttp as aiohttp_types

POOL_SIZE = 1000
"""Open upstream connections at most, all hosts together."""
KEEPALIVE_S = 4.0
"""An idle pooled connection is closed after this long: before the 5 s after which uvicorn
(so vLLM and SGLang) closes it, so a request never races the server's close (a POST is
not retried on a connection that turned out dead)."""


@dataclass(slots=True)
class HttpRequest:
    """One POST to an upstream: its URL, body, headers and limits.

    Not frozen, though nothing changes one once built: a frozen dataclass sets each field
    through `object.__setattr__` (1.3-4.0 against 0.7-1.3 µs to build one, here).
    """

    url: str
    body: bytes | AsyncIterator[bytes]
    headers: dict[str, str]
    timeout: Timeouts
    secrets: tuple[str | None, ...] = field(default=())
    # Run once the request is written, before the reply's wait (`h1.Pool.request`); before
    # sending on aiohttp's path. Must not raise.
    while_waiting: Callable[[], None] | None = None


def client_timeout(connect: float, read: float) -> Timeouts:
    """`connect` for the TCP (and TLS) handshake, `read` for each wait on the socket.

    `sock_read` restarts on every read, as httpx's read timeout did: a whole reply must
    start within it, a stream may pause at most that long between events.
    """
    return Timeouts(sock_connect=connect, sock_read=read)


Response: TypeAlias = "h1.Reply | aiohttp_types.ClientResponse"
"""A reply being read: `h1`'s, or aiohttp's for a URL with credentials in it."""
Content: TypeAlias = "h1.Reply | aiohttp_types.StreamReader"
"""What a body is read from: `readany()` until b''."""


class HttpClient:
    """The pooled client of the native upstreams; its pools are made on first use.

    Both belong to the loop they were made on, so they are made lazily by the first
    request (inside the serving loop), never at construction. `pool_size` bounds each.
    """

    def __init__(self, pool_size: int = POOL_SIZE, keepalive_s: float = KEEPALIVE_S) -> None:
        self._pool_size, self._keepalive_s = pool_size, keepalive_s
        self._session: aiohttp_types.ClientSession | None = None
        self._h1: h1.Pool | None = None

    def pool(self) -> h1.Pool:
        if self._h1 is None or self._h1.closed:
            self._h1 = h1.Pool(self._pool_size, self._keepalive_s)
        return self._h1

    def session(self) -> aiohttp_types.ClientSession:
        if self._session is None or self._session.closed:
            module = aiohttp()  # imported here, by the first URL with credentials in it
            connector = module.TCPConnector(
                limit=self._pool_size, keepalive_timeout=self._keepalive_s
            )
            self._session = module.ClientSession(
                connector=connector,
                cookie_jar=module.DummyCookieJar(),  # one tenant's cookies are not another's
                auto_decompress=True,
                trust_env=False,
            )
        return self._session

    def start(self, request: HttpRequest) -> Awaitable[Response]:
        """Send `request`: its reply, to await. A transport failure is raised as aiohttp's
        error: `whole_reply` and `open_reply` map it around that await (no coroutine
        between them and the pool's)."""
        if h1.serves(request.url):  # http(s) without credentials in the URL
            pool = self._h1 if self._h1 is not None and not self._h1.closed else self.pool()
            return pool.request(
                request.url,
                request.body,
                request.headers,
                request.timeout,
                request.while_waiting,
            )
        if request.while_waiting is not None:
            request.while_waiting()
        return self.session().post(
            request.url,
            data=request.body,
            headers=request.headers,
            timeout=request.timeout.for_aiohttp(),
            allow_redirects=False,
        )

    async def aclose(self) -> None:
        if self._h1 is not None:
            await self._h1.aclose()
        if self._session is not None:
            await self._session.close()


def response_headers(response: Response) -> dict[str, str]:
    """The reply's headers, names in lower case, repeated ones joined as HTTP allows."""
    if isinstance(response, h1.Reply):
        fast = response.header_dict()
        if fast is not None:
            return fast
    items = response.header_items() if isinstance(response, h1.Reply) else response.headers.items()
    headers: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


async def read_at_most(response: Response, limit: int) -> tuple[bytes, bool]:
    """The decoded body, and whether it was whole: reading stops past `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    content = response.content
    if isinstance(content, h1.Reply):  # a reply in with its head: no `readany` coroutine
        ready = content.read_ready()
        if ready is not None:
            if len(ready) > limit:
                return ready[:limit], False
            if content.is_eof():
                return ready, True
            parts.append(ready)
            size = len(ready)
    while part := await content.readany():
        parts.append(part)
        size += len(part)
        if size > limit:
            return b"".join(parts)[:limit], False
        if content.is_eof():  # the body's end came with it: no read more to say so
            break
    return b"".join(parts), True


async def whole_reply(
    client: HttpClient, request: HttpRequest, where: str, limits: tuple[int, int]
) -> tuple[Response, bytes]:
    """Send `request` and read its whole body, at most `limits` (reply, error) bytes.

    A transport failure, an error status or a reply over its limit raises the upstream
    error the pipeline books; the response comes back released, with its body.
    """
    reply_limit, error_limit = limits
    try:
        response = await client.start(request)
    except (TimeoutError, client_error()) as exc:
        raise failures.from_client_error(exc, where) from exc
    try:
        limit = error_limit if response.status >= 400 else reply_limit
        body, whole = await read_at_most(response, limit)
    except (TimeoutError, client_error()) as exc:
        raise failures.from_client_error(exc, where) from exc
    finally:
        response.release()  # back to the pool when read to its end, else closed
    if response.status >= 400:
        headers = response_headers(response)
        raise failures.from_status(response.status, body, where, request.secrets, headers)
    if not whole:
        message = f"upstream {where} sent a reply over {reply_limit} bytes (decoded)"
        raise UpstreamProtocolError(message)
    return response, body


async def open_reply(
    client: HttpClient, request: HttpRequest, where: str, error_limit: int
) -> Response:
    """Send a streamed request; an error status is read (at most `error_limit`) and raised."""
    try:
        response = await client.start(request)
    except (TimeoutError, client_error()) as exc:
        raise failures.from_client_error(exc, where) from exc
    if response.status < 400:
        return response
    try:
        body, _ = await read_at_most(response, error_limit)
    except (TimeoutError, client_error()):
        body = b""
    finally:
        response.release()
    headers = response_headers(response)
    raise failures.from_status(response.status, body, where, request.secrets, headers)


FINAL_END_WAIT_S = 0.25
"""After a stream's last event, how long the end of its body (the chunked encoding's last
chunk, usually in the same packet or the next) may take before the connection is dropped
instead of kept. The client's stream ends after this wait, so it stays short."""
FINAL_DRAIN_BYTES = 64 * 1024
"""Bytes after the last event read and discarded at most; more and the connection closes."""
_FINAL_TYPES = (b'"message_stop"', b'"response.completed"', b'"response.incomplete"')


def _is_final(event: bytes | None) -> bool:
    """`[DONE]` (OpenAI's last event), `message_stop` (Anthropic's) or a Responses end."""
    if event is None:
        return False
    data = event_data(event)
    if data is None:
        return False
    head = data[:48]
    return data.strip() == DONE or any(kind in head for kind in _FINAL_TYPES)


_FINAL_END = SharedDeadlines(FINAL_END_WAIT_S)
"""One timer for every stream's wait for its body's end: `asyncio.timeout` made and
cancelled a timer per stream (4.4-5.2 us against 0.9-1.0 us here, a loaded box)."""


async def _read_to_end(content: Content) -> bool:
    """Read what follows the last event to the body's end; False if it takes too long."""
    try:
        return await _FINAL_END.within(_drain(content))
    except (TimeoutError, client_error()):
        return False


async def _drain(content: Content) -> bool:
    drained = 0
    while not content.is_eof():
        drained += len(await content.readany())
        if drained > FINAL_DRAIN_BYTES:
            return False
    return content.exception() is None


class SseEvents:
    """The events of an SSE body, one network read at a time: `batch` or `anext`.

    `batch` gives every complete event one read brought (or the ones `anext` left), so a
    relay handles a read in one step and sends it as one message (an upstream that writes
    a whole stream at once is relayed in one write, not one per event); `anext` gives one
    event, for the relays that translate event by event. A plain class, not generators:
    the chat relay no longer goes through two generator levels per event.
    """

    __slots__ = (
        "_content",
        "_done",
        "_failed",
        "_index",
        "_ready",
        "_splitter",
        "_taken",
        "_where",
    )

    def __init__(self, content: Content, where: str) -> None:
        self._content, self._where = content, where
        self._failed: UpstreamProtocolError | None = None  # found by `next_ready`, raised by a read
        self._splitter = EventSplitter(where=where)
        self._ready: list[bytes] = []  # complete events read, from `_index` on not taken
        self._index = 0
        self._done = False
        self._taken: list[bytes] = []  # the last events handed out, for `SseStream.aclose`

    def __aiter__(self) -> SseEvents:
        return self

    async def __anext__(self) -> bytes:
        while self._index >= len(self._ready):
            if not await self._read():
                raise StopAsyncIteration
        event = self._ready[self._index]
        self._index += 1
        self._taken = [event]
        return event

    def next_ready(self) -> bytes | None:
        """`anext` when it would not wait: the next event if its bytes are already here.

        None where `anext` would wait, end or raise: the caller then awaits `anext` (with
        its deadline), which says the end or raises the error as before. A stream's first
        event usually came with its reply's head (one packet), so the first-event wait and
        its deadline need not be set up at all.
        """
        if self._index >= len(self._ready):
            content = self._content
            if self._done or self._failed is not None or not isinstance(content, h1.Reply):
                return None
            chunk = content.read_ready()
            if not chunk:
                return None
            try:
                self._ready, self._index = self._splitter.feed(chunk), 0
            except UpstreamProtocolError as exc:  # raised by the next read, as `_read` would
                self._failed = exc
                return None
            if not self._ready:
                return None
        event = self._ready[self._index]
        self._index += 1
        self._taken = [event]
        return event

    def ready(self) -> list[bytes]:
        """The events already read and not taken yet; never waits."""
        if self._index >= len(self._ready):
            return []
        events = self._ready[self._index :] if self._index else self._ready
        self._ready, self._index = [], 0
        self._taken = events
        return events

    async def batch(self) -> list[bytes]:
        """The events not taken yet, or those the next read completes; [] at the end."""
        while self._index >= len(self._ready):
            if not await self._read():
                return []
        return self.ready()

    async def aclose(self) -> None:
        """Read no more (the stream itself is closed by `SseStream.aclose`)."""
        self.close()

    def close(self) -> None:
        """`aclose`, which waits for nothing: a relay that knows this type need not await."""
        self._done = True
        self._ready, self._index = [], 0

    async def _read(self) -> bool:
        """Read once; False at the body's end (after its unterminated last event, if any)."""
        if self._done:
            return False
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        try:
            chunk = await self._content.readany()
        except (TimeoutError, client_error()) as exc:
            raise failures.from_client_error(exc, self._where) from exc
        if chunk:
            self._ready, self._index = self._splitter.feed(chunk), 0
            return True
        self._done = True
        rest = self._splitter.rest
        if not rest.strip():
            return False
        self._ready, self._index = [rest], 0
        return True

    def delivered_final(self) -> bool:
        """Whether the last events handed out hold the stream's last event."""
        return any(_is_final(event) for event in reversed(self._taken))


def ready_event(events: AsyncIterator[bytes]) -> bytes | None:
    """The next event of `events` if it is already read (`SseEvents.next_ready`), else None.

    Other event sources (litellm's, a thinking cap's) answer None: await them.
    """
    return events.next_ready() if isinstance(events, SseEvents) else None


class SseStream:
    """An open streaming reply; `aclose` also cancels the upstream generation.

    After the stream's last event the rest of the body is read to its end, waiting at
    most FINAL_END_WAIT_S, and the connection goes back to the pool for the next request;
    a stream closed before its last event (or whose end is late) closes its connection.
    Waiting one pass of the loop was not enough: many servers send the end in a packet of
    its own, and under load it came later (100 sequential streams once opened 3
    connections in tests/e2e/test_upstream_reuse.py).
    """

    def __init__(self, response: Response, where: str):
        self._response = response
        self._where = where
        self._events: SseEvents | None = None

    @cached_property
    def headers(self) -> dict[str, str]:
        """The reply's headers, decoded on first use: a native chat stream never reads them
        (only the litellm adapter's notice is believed), ~4 µs before its first event."""
        return response_headers(self._response)

    def events(self) -> SseEvents:
        self._events = SseEvents(self._response.content, self._where)
        return self._events

    def alone(self) -> bool:
        """Whether this stream's call is the only native upstream call in flight: no other
        request is waiting on an upstream, so the loop has little else to do."""
        response = self._response
        return isinstance(response, h1.Reply) and response.calls_in_flight() <= 1

    def release_ended(self) -> bool:
        """Release a stream whose body was read to its end (its last event and the body's
        end came together, as vLLM and the mock send them): `aclose` without a wait.
        False, and nothing done, for any other stream: `aclose` it."""
        response = self._response
        if response.closed or not isinstance(response, h1.Reply) or not response.is_eof():
            return False
        response.release()
        return True

    async def aclose(self) -> None:
        response = self._response
        if response.closed:
            return
        content = response.content
        ended = content.is_eof() and content.exception() is None
        if not ended and self._events is not None and self._events.delivered_final():
            ended = await _read_to_end(content)
        if ended:
            response.release()  # read to its end: the connection is reused
        else:
            response.close()  # part-read: closing tells the upstream to stop
