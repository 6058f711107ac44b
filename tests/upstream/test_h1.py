"""The plain-http upstream client (gateway/upstream/h1.py) against a real local server.

Each test serves scripted replies from an asyncio server in this loop and checks what the
server received, which connections it saw, and what http_stream handed back or raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.errors import UpstreamProtocolError, UpstreamTimeoutError, UpstreamUnreachableError
from gateway.upstream import http_stream as hs

WHERE = "test (127.0.0.1)"
LIMITS = (1024 * 1024, 1024)


class Server:
    """Counts connections, keeps each request's head and body; over TLS with `tls`.

    `ended` counts the connections whose client closed them (EOF, or a TLS close_notify).
    """

    def __init__(
        self, reply: Callable[[int], bytes | None], tls: ssl.SSLContext | None = None
    ) -> None:
        self.reply = reply  # request number -> raw reply bytes, None to hang
        self.tls = tls
        self.host = "127.0.0.1"  # in the URL; the server listens on 127.0.0.1
        self.connections = 0
        self.ended = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop listening and end every connection while the loop still runs: a handler
        left hanging would close its socket at garbage collection, after the loop, and the
        ResourceWarning would fail whichever test runs then."""
        assert self.server is not None
        self.server.close()
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.host}:{port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").lower().split("\r\n")
                length = next(
                    (int(x.split(":")[1]) for x in lines if x.startswith("content-length:")), None
                )
                if length is not None:
                    body = await reader.readexactly(length)
                else:  # chunked
                    body = b""
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                        piece = await reader.readexactly(size + 2)
                        if size == 0:
                            break
                        body += piece[:-2]
                self.requests.append((head, body))
                reply = self.reply(len(self.requests))
                if reply is None:
                    await asyncio.sleep(30)
                    return
                writer.write(reply)
                await writer.drain()
                if b"connection: close" in reply.lower():
                    break
        except asyncio.IncompleteReadError:
            self.ended += 1
        except ConnectionError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
            self._handlers.discard(handler)


def whole(body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


def chunked(events: list[bytes], end: bool = True) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    return head + body + (b"0\r\n\r\n" if end else b"")


def request(
    url: str, body: bytes | AsyncIterator[bytes] = b'{"a":1}', read: float = 5.0
) -> hs.HttpRequest:
    return hs.HttpRequest(
        url,
        body,
        {"content-type": "application/json", "x-extra": "yes"},
        hs.client_timeout(2.0, read),
    )


async def test_whole_replies_reuse_one_connection_and_send_the_headers() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: whole(b'{"n":%d}' % n, "x-rep: a\r\nX-Rep: b\r\n")) as server:
        for n in range(1, 6):
            response, body = await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            assert body == b'{"n":%d}' % n and response.status == 200
            assert hs.response_headers(response)["x-rep"] == "a, b"
        head, sent = server.requests[0]
        assert sent == b'{"a":1}'
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        for line in (
            b"host: 127.0.0.1:",
            b"x-extra: yes",
            b"content-length: 7",
            b"accept-encoding: gzip, deflate",
        ):
            assert line in head.lower()
        assert server.connections == 1
    await client.aclose()


async def test_a_streamed_body_read_to_its_end_keeps_the_connection() -> None:
    events = [b'data: {"x":1}\n\n', b"data: [DONE]\n\n"]
    client = hs.HttpClient()
    async with Server(lambda n: chunked(events)) as server:
        for _ in range(3):
            stream = hs.SseStream(
                await hs.open_reply(client, request(server.url), WHERE, 1024), WHERE
            )
            got = [e async for e in stream.events()]
            await stream.aclose()
            assert got == events
        assert server.connections == 1
    await client.aclose()


async def test_a_stream_closed_part_read_closes_its_connection() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: chunked([b'data: {"x":1}\n\n'], end=False)) as server:
        for _ in range(2):
            stream = hs.SseStream(
                await hs.open_reply(client, request(server.url), WHERE, 1024), WHERE
            )
            assert await stream.events().batch()
            await stream.aclose()
        assert server.connections == 2
    await client.aclose()


async def test_a_large_body_goes_out_in_pieces_with_its_length() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"x" * 100_000

    client = hs.HttpClient()
    async with Server(lambda n: whole(b"{}")) as server:
        req = hs.HttpRequest(
            server.url, pieces(), {"content-length": "400000"}, hs.client_timeout(2, 5)
        )
        await hs.whole_reply(client, req, WHERE, LIMITS)
        unsized = hs.HttpRequest(server.url, pieces(), {}, hs.client_timeout(2, 5))
        await hs.whole_reply(client, unsized, WHERE, LIMITS)
        assert [len(body) for _, body in server.requests] == [400_000, 400_000]
        assert b"transfer-encoding: chunked" in server.requests[1][0].lower()
    await client.aclose()


async def test_a_silent_upstream_is_a_read_timeout_and_a_closed_port_unreachable() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: None) as server:
        with pytest.raises(UpstreamTimeoutError, match="waiting for a reply"):
            await hs.whole_reply(client, request(server.url, read=0.2), WHERE, LIMITS)
        url = server.url
    await asyncio.sleep(0.05)
    with pytest.raises(UpstreamUnreachableError, match="connection failed: connection refused"):
        await hs.whole_reply(client, request(url), WHERE, LIMITS)
    await client.aclose()


async def test_cut_gzip_oversize_and_error_replies_map_as_before() -> None:
    packed = gzip.compress(b'{"ok":true}')
    replies = {
        1: whole(packed, "content-encoding: gzip\r\n"),
        2: whole(b"not gzip", "content-encoding: gzip\r\n"),
        3: b'HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 100\r\n\r\n{"cut',
        4: whole(b'{"error":{"message":"slow"}}', "retry-after: 3\r\n").replace(
            b"200 OK", b"429 Too Many"
        ),
        5: whole(b"x" * 2000),
    }
    client = hs.HttpClient()
    async with Server(lambda n: replies[n]) as server:
        _, body = await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        assert body == b'{"ok":true}'
        with pytest.raises(UpstreamProtocolError, match="content-encoding"):
            await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        with pytest.raises(UpstreamUnreachableError, match="before a complete reply"):
            await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        with pytest.raises(Exception) as refused:
            await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        assert getattr(refused.value, "status_code", None) == 429 and "slow" in str(refused.value)
        assert getattr(refused.value, "headers", None) == {"retry-after": "3"}
        with pytest.raises(UpstreamProtocolError, match="over 1000 bytes"):
            await hs.whole_reply(client, request(server.url), WHERE, (1000, 1000))
    await client.aclose()


async def test_a_newline_in_a_header_is_refused() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: whole(b"{}")) as server:
        bad = hs.HttpRequest(server.url, b"{}", {"x-a": "1\r\nx-b: 2"}, hs.client_timeout(2, 5))
        with pytest.raises(ValueError):
            await hs.whole_reply(client, bad, WHERE, LIMITS)
        assert server.requests == []
    await client.aclose()


async def test_an_idle_connection_expires_after_keepalive() -> None:
    client = hs.HttpClient(keepalive_s=0.1)
    async with Server(lambda n: whole(b"{}")) as server:
        await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        await asyncio.sleep(0.3)
        await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        assert server.connections == 2
    await client.aclose()


async def test_the_pool_limit_holds_over_concurrent_requests() -> None:
    client = hs.HttpClient(pool_size=2)

    async with Server(lambda n: whole(b"{}")) as server:
        await asyncio.gather(
            *(hs.whole_reply(client, request(server.url), WHERE, LIMITS) for _ in range(10))
        )
        assert server.connections <= 2 and len(server.requests) == 10
    await client.aclose()


async def test_a_cancelled_wait_closes_the_connection() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: None if n == 1 else whole(b"{}")) as server:
        task = asyncio.ensure_future(hs.whole_reply(client, request(server.url), WHERE, LIMITS))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        assert server.connections == 2
    await client.aclose()


async def test_a_quiet_spell_keeps_every_pooled_connection_warm_for_the_next_burst() -> None:
    # Sequential requests take the longest idle connection first (as aiohttp's connector
    # did), so over a spell longer than the keep-alive all 4 stay in use and a burst after
    # it opens none; taking the most recent one would let 3 expire and reopen them.
    client = hs.HttpClient(keepalive_s=2.0)

    async def burst() -> None:
        await asyncio.gather(
            *(hs.whole_reply(client, request(server.url), WHERE, LIMITS) for _ in range(4))
        )

    async with Server(lambda n: whole(b"{}")) as server:
        await burst()
        assert server.connections == 4
        for _ in range(16):  # 2.4 s in all; each connection used every ~0.6 s
            await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            await asyncio.sleep(0.15)
        await burst()
        assert server.connections == 4 and len(server.requests) == 24
    await client.aclose()
