"""h1 over TLS (`https://` origins) against a real local TLS server with its own CA.

Each scenario runs on asyncio's loop and on uvloop's (the one the gateway serves on): their
TLS layers are different code. The CA is trusted the way an operator trusts a private one,
by naming its PEM in `SSL_CERT_FILE`; left out, the conftest's one-root bundle is all the
client trusts and the test server's certificate must be refused.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from gateway.errors import UpstreamTimeoutError, UpstreamUnreachableError
from gateway.upstream import h1, h1_connect
from gateway.upstream import http_stream as hs
from tests.upstream.test_h1 import LIMITS, WHERE, Server, chunked, request, whole
from tests.upstream.tls_upstream import Authority

Run = Callable[[Coroutine[Any, Any, None]], None]
LOOPS = pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return Authority(tmp_path)


@pytest.fixture
def trusted(authority: Authority, monkeypatch: pytest.MonkeyPatch) -> Authority:
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.pem))
    return authority


def _sni(context: ssl.SSLContext) -> list[str | None]:
    """The server names the clients' handshakes sent (SNI), in order."""
    names: list[str | None] = []
    context.sni_callback = lambda _sock, name, _context: names.append(name)
    return names


async def _until(check: Callable[[], bool], seconds: float = 3.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)


@LOOPS
def test_whole_replies_share_one_verified_tls_connection_with_sni(
    run: Run, trusted: Authority
) -> None:
    tls = trusted.server_context(["localhost"])
    names = _sni(tls)

    async def scenario() -> None:
        client = hs.HttpClient()
        async with Server(lambda n: whole(b'{"n":%d}' % n), tls) as server:
            server.host = "localhost"  # resolved to ::1 and 127.0.0.1: one of them listens
            for n in range(1, 6):
                response, body = await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
                assert (response.status, body) == (200, b'{"n":%d}' % n)
            assert server.connections == 1 and len(server.requests) == 5
            head, sent = server.requests[0]
            assert sent == b'{"a":1}' and b"\r\nhost: localhost:" in head.lower()
            await client.aclose()  # the pool's TLS connection ends with it
            await _until(lambda: server.ended == 1, 1.0)
            assert server.ended == 1

    run(scenario())
    assert names == ["localhost"]  # one handshake, named for the URL's host


@LOOPS
def test_streams_read_to_their_end_keep_the_connection_and_one_left_part_read_ends_it(
    run: Run, trusted: Authority
) -> None:
    events = [b'data: {"x":1}\n\n', b"data: [DONE]\n\n"]
    replies = {4: chunked([b'data: {"x":1}\n\n'], end=False), 5: whole(b"{}")}

    async def scenario() -> None:
        client = hs.HttpClient()
        tls = trusted.server_context(["127.0.0.1"])
        async with Server(lambda n: replies.get(n, chunked(events)), tls) as server:
            for _ in range(3):
                stream = hs.SseStream(
                    await hs.open_reply(client, request(server.url), WHERE, 1024), WHERE
                )
                assert [e async for e in stream.events()] == events
                await stream.aclose()
            assert server.connections == 1
            stream = hs.SseStream(
                await hs.open_reply(client, request(server.url), WHERE, 1024), WHERE
            )
            assert await stream.events().batch() == [b'data: {"x":1}\n\n']
            await stream.aclose()  # part-read: the connection is closed (TLS close_notify)
            await _until(lambda: server.ended == 1)
            assert server.ended == 1  # the upstream saw the end: it stops generating
            _, body = await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            assert body == b"{}" and server.connections == 2
        await client.aclose()

    run(scenario())


@LOOPS
def test_the_servers_close_ends_a_reply_read_to_the_close_and_fails_one_cut_short(
    run: Run, trusted: Authority
) -> None:
    replies = {
        1: b'HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 100\r\n\r\n{"cut',
        2: b'HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{"until":"the close"}',
    }

    async def scenario() -> None:
        client = hs.HttpClient()
        async with Server(replies.__getitem__, trusted.server_context(["127.0.0.1"])) as server:
            with pytest.raises(UpstreamUnreachableError, match="before a complete reply"):
                await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            _, body = await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            assert body == b'{"until":"the close"}' and server.connections == 2
        await client.aclose()

    run(scenario())


@LOOPS
def test_an_untrusted_certificate_is_refused_before_anything_is_sent(
    run: Run, authority: Authority
) -> None:
    async def scenario() -> None:
        client = hs.HttpClient()
        async with Server(lambda n: whole(b"{}"), authority.server_context(["127.0.0.1"])) as up:
            with pytest.raises(UpstreamUnreachableError) as refused:
                await hs.whole_reply(client, request(up.url), WHERE, LIMITS)
            assert up.requests == []
        await client.aclose()
        message = str(refused.value)
        assert "its TLS certificate did not verify" in message
        assert "unable to get local issuer certificate" in message

    run(scenario())


@LOOPS
def test_a_certificate_for_another_host_is_refused(run: Run, trusted: Authority) -> None:
    async def scenario() -> None:
        client = hs.HttpClient()
        tls = trusted.server_context(["upstream.example"])
        async with Server(lambda n: whole(b"{}"), tls) as server:
            for host in ("localhost", "127.0.0.1"):
                server.host = host
                with pytest.raises(
                    UpstreamUnreachableError, match=r"(Hostname|IP address) mismatch"
                ):
                    await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
            assert server.requests == []
        await client.aclose()

    run(scenario())


async def test_a_server_silent_in_the_handshake_is_a_connect_timeout(trusted: Authority) -> None:
    client = hs.HttpClient()
    async with Server(lambda n: None) as silent:  # plain TCP: never answers the ClientHello
        url = silent.url.replace("http://", "https://")
        slow = hs.HttpRequest(url, b"{}", {}, hs.client_timeout(0.3, 5))
        with pytest.raises(UpstreamTimeoutError, match="while connecting"):
            await hs.whole_reply(client, slow, WHERE, LIMITS)
    await client.aclose()


async def test_proxy_variables_are_ignored_as_the_aiohttp_session_ignores_them(
    trusted: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The aiohttp session was made with trust_env=False: no proxy, no netrc. h1 keeps that.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: nothing there
    client = hs.HttpClient()
    async with Server(lambda n: whole(b"{}"), trusted.server_context(["127.0.0.1"])) as server:
        await hs.whole_reply(client, request(server.url), WHERE, LIMITS)
        assert len(server.requests) == 1
    await client.aclose()


async def test_credentials_in_the_url_stay_on_aiohttp_which_sends_them() -> None:
    client = hs.HttpClient()
    async with Server(lambda n: whole(b"{}")) as server:
        url = server.url.replace("http://", "http://user:pass@")
        assert not h1.serves(url) and h1.serves(server.url)
        await hs.whole_reply(client, request(url), WHERE, LIMITS)
        head = server.requests[0][0].lower()
        assert b"\r\nauthorization: basic dxnlcjpwyxnz\r\n" in head  # base64("user:pass")
    await client.aclose()


def test_the_pool_keeps_http_and_https_origins_apart() -> None:
    assert h1_connect.origin("https://api.example/v1/x").key == ("https", "api.example", 443)
    assert h1_connect.origin("http://api.example/v1/x").key == ("http", "api.example", 80)
    assert (
        h1_connect.origin("https://api.example:8443/v1/x").authority
        == b"Host: api.example:8443\r\n"
    )
    assert h1_connect.origin("https://api.example/v1/x").authority == b"Host: api.example\r\n"
