"""Where an h1 connection goes and how it is opened: the URL split once, TLS, the connect.

TLS (`https://`) is the loop's own (`create_connection(ssl=...)`), set up as aiohttp's
connector sets it up: `ssl.create_default_context()` (certificates and host names verified
against the system's CA store, or the bundle in `SSL_CERT_FILE` / `SSL_CERT_DIR`), ALPN
`http/1.1`, SNI with the URL's host (a trailing dot stripped); the address is resolved and
tried as aiohttp does (happy eyeballs, 0.25 s before the next address), all of it within
`sock_connect`. Closing a TLS connection sends close_notify (the loop's graceful close, as
aiohttp closes one); a server's close_notify or EOF ends a reply read until the close and
fails a framed one cut short; `Pool.aclose` aborts them, as aiohttp's connector does.

A URL that carries credentials (`https://user:pass@host`, sent by aiohttp as Basic auth)
is not served here: `serves` says so and `http_stream.HttpClient` keeps aiohttp for it.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import aiohappyeyeballs

from gateway.upstream.aio import aiohttp, client_error

HAPPY_EYEBALLS_DELAY_S = 0.25
"""aiohttp's: how long one address may take to connect before the next is tried too."""
DEFAULT_PORTS = {"http": 80, "https": 443}
ADDRCONFIG = socket.AI_ADDRCONFIG & getattr(socket, "AI_MASK", -1)
"""aiohttp's resolver's flags: no IPv6 addresses for a host with no IPv6 configured."""

Key = tuple[str, str, int]
"""A pool's key: scheme, host, port."""


def tls_context() -> ssl.SSLContext:
    """The context aiohttp's connector verifies with: the system's CAs (or SSL_CERT_FILE).

    Loading the CA store reads files (tens of ms for a full bundle), so a pool makes it
    once, on its first `https://` connection, never for a gateway with plain-http routes.
    """
    context = ssl.create_default_context()  # CERT_REQUIRED, check_hostname, TLS 1.2+
    context.set_alpn_protocols(["http/1.1"])
    return context


@lru_cache(maxsize=256)
def serves(url: str) -> bool:
    """Whether this client takes `url`: http(s) with a host and no credentials in it."""
    parts = urlsplit(url)
    return (
        parts.scheme in DEFAULT_PORTS
        and bool(parts.hostname)
        and parts.username is None
        and parts.password is None
    )


class Origin:
    """A URL split once: the pool key, the address, the Host header and the request line."""

    __slots__ = ("authority", "host", "key", "port", "start", "tls")

    def __init__(self, url: str) -> None:
        if not serves(url):
            raise ValueError(f"not an http:// or https:// URL without credentials: {url!r}")
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or DEFAULT_PORTS[scheme]
        self.host, self.port, self.tls = host, port, scheme == "https"
        self.key: Key = (scheme, host, port)
        name = f"[{host}]" if ":" in host else host
        authority = name if port == DEFAULT_PORTS[scheme] else f"{name}:{port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.start = f"POST {target} HTTP/1.1\r\n".encode("latin-1")
        self.authority = f"Host: {authority}\r\n".encode("latin-1")


@lru_cache(maxsize=256)
def origin(url: str) -> Origin:
    """A handful of upstream URLs: each split once."""
    return Origin(url)


async def open_connection(
    protocol: asyncio.Protocol, where: Origin, tls: ssl.SSLContext | None, timeout: float | None
) -> None:
    """Connect `protocol` to `where` within `timeout`; raises aiohttp's connector errors."""
    try:
        async with asyncio.timeout(timeout):
            await _connect(protocol, where, tls)
    except TimeoutError as exc:
        if isinstance(exc, client_error()):
            raise
        scheme = "https" if where.tls else "http"
        raise aiohttp().ConnectionTimeoutError(
            f"Connection timeout to host {scheme}://{where.host}:{where.port}"
        ) from exc


async def _connect(protocol: asyncio.Protocol, where: Origin, tls: ssl.SSLContext | None) -> None:
    """Resolve, connect (happy eyeballs) and, for https, the TLS handshake, as aiohttp."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            where.host, where.port, type=socket.SOCK_STREAM, flags=ADDRCONFIG
        )
        sock = await aiohappyeyeballs.start_connection(
            infos, happy_eyeballs_delay=HAPPY_EYEBALLS_DELAY_S
        )
    except OSError as exc:
        raise aiohttp().ClientConnectorError(_key(where), exc) from exc
    try:
        await asyncio.get_running_loop().create_connection(
            lambda: protocol,
            sock=sock,
            ssl=tls,
            server_hostname=where.host.rstrip(".") if tls is not None else None,
        )
    # On a failure the loop closes `sock` (its transport owns it): closing it here too
    # could close a descriptor another connection was given since (uvloop #645).
    except ssl.CertificateError as exc:  # not verified, or made out to another host
        raise aiohttp().ClientConnectorCertificateError(_key(where), exc) from exc
    except ssl.SSLError as exc:
        raise aiohttp().ClientConnectorSSLError(_key(where), exc) from exc
    except OSError as exc:
        if isinstance(exc, TimeoutError):  # the TLS handshake's own limit
            raise
        raise aiohttp().ClientConnectorError(_key(where), exc) from exc


def _key(where: Origin) -> Any:
    """aiohttp's `ConnectionKey` of `where`, which its connector errors carry."""
    from aiohttp.client_reqrep import ConnectionKey

    return ConnectionKey(where.host, where.port, where.tls, True, None, None, None)
