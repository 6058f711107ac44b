"""Map every upstream failure, once, to the most specific gateway error.

Messages name the upstream (alias and host) and never carry a key: any configured secret
found in an upstream's message is replaced before the error leaves this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from gateway.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamStatusError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.http_headers import safe_headers
from gateway.upstream import aio

if TYPE_CHECKING:  # raised only by litellm's client, which loads httpx itself
    import httpx

REDACTED = "[redacted]"

# OpenAI's error types; anything else (vLLM's "BadRequestError") is replaced by status.
OPENAI_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "rate_limit_error",
        "insufficient_quota",
        "server_error",
        "api_error",
    }
)


@lru_cache(maxsize=256)  # a handful of routes; urlsplit was ~5 µs of every request
def describe_upstream(alias: str, base_url: str) -> str:
    """`alias (host:port)`, with no path, query or credentials (a handful: each built once,
    where it was ~1 µs of `urlsplit` per upstream call)."""
    parts = urlsplit(base_url)
    host = parts.hostname or base_url
    return f"{alias} ({host}:{parts.port})" if parts.port else f"{alias} ({host})"


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace each non-empty secret in `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def _connect_failed(exc: BaseException, where: str) -> UpstreamUnreachableError:
    """A connection that could not be opened, with the system's reason when one is known
    ("connection refused": nothing listens there; "no route to host", "network is
    unreachable", "cannot assign requested address": no local port left, ...)."""
    reason = _system_reason(exc)
    said = f"connection failed: {reason}" if reason else "connection failed"
    return UpstreamUnreachableError(f"upstream {where} is unreachable ({said})")


def _system_reason(exc: BaseException) -> str | None:
    """The first system error number in `exc`, its `os_error` (aiohttp) or its causes
    (httpx wraps httpcore's, which wraps the OSError), as the C library words it."""
    seen: BaseException | None = exc
    for _ in range(8):  # a few links at most: never loop on a cycle
        if seen is None:
            return None
        found = getattr(seen, "os_error", None) or seen
        if isinstance(found, OSError) and found.errno:
            return os.strerror(found.errno).lower()
        seen = seen.__cause__ or seen.__context__
    return None


def from_transport_error(exc: httpx.HTTPError, where: str) -> UpstreamError:
    """An httpx exception raised before or while reading a reply."""
    import httpx  # loaded already: `exc` is one of its exceptions

    if isinstance(exc, httpx.TimeoutException):
        phase = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for a reply"
        return UpstreamTimeoutError(f"upstream {where} timed out while {phase}")
    if isinstance(exc, httpx.ConnectError):
        return _connect_failed(exc, where)
    if isinstance(exc, httpx.DecodingError):
        return UpstreamProtocolError(
            f"upstream {where} sent a reply that cannot be decoded (its content-encoding)"
        )
    return UpstreamUnreachableError(
        f"upstream {where} failed: {type(exc).__name__} before a complete reply"
    )


def from_client_error(exc: BaseException, where: str) -> UpstreamError:
    """An aiohttp exception (or its timeout) raised before or while reading a reply."""
    aiohttp = aio.loaded()  # not loaded: no aiohttp exception exists, `exc` is a timeout
    if aiohttp is not None and isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamTimeoutError(f"upstream {where} timed out while connecting")
    if isinstance(exc, TimeoutError):  # aiohttp's read timeouts are subclasses
        return UpstreamTimeoutError(f"upstream {where} timed out while waiting for a reply")
    known = _from_aiohttp(aiohttp, exc, where) if aiohttp is not None else None
    return known or UpstreamUnreachableError(
        f"upstream {where} failed: {type(exc).__name__} before a complete reply"
    )


def _from_aiohttp(aiohttp: Any, exc: BaseException, where: str) -> UpstreamError | None:
    """What an aiohttp connector or payload error says, or None for any other."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return UpstreamUnreachableError(
            f"upstream {where} is unreachable: its TLS certificate did not verify "
            f"({_tls_reason(exc)}); the gateway trusts the system's CA "
            "store, or the CA bundle that SSL_CERT_FILE names"
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return UpstreamUnreachableError(
            f"upstream {where} is unreachable: the TLS handshake failed ({_tls_reason(exc)})"
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _connect_failed(exc, where)
    if isinstance(exc, aiohttp.ClientPayloadError) and isinstance(
        exc.__cause__, aiohttp.http_exceptions.ContentEncodingError
    ):
        return UpstreamProtocolError(
            f"upstream {where} sent a reply that cannot be decoded (its content-encoding)"
        )
    if isinstance(exc, aiohttp.ClientPayloadError):
        # A stream or body cut short: the chunked encoding or content-length unmet.
        return UpstreamUnreachableError(
            f"upstream {where} closed the connection before a complete reply (the reply was cut)"
        )
    return None


def _tls_reason(exc: BaseException) -> str:
    """OpenSSL's reason, short ("unable to get local issuer certificate"), never a path."""
    inner = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None) or exc
    reason = getattr(inner, "verify_message", None) or getattr(inner, "reason", None)
    return str(reason or type(inner).__name__)


def from_status(
    status: int,
    body: bytes,
    where: str,
    secrets: Iterable[str | None] = (),
    headers: dict[str, str] | None = None,
) -> UpstreamStatusError:
    """An upstream that answered 4xx/5xx, whatever its error body looks like."""
    message, error_type, param, code = _parse_error_body(body)
    detail = redact(message, secrets) if message else f"HTTP {status}"
    return UpstreamStatusError(
        f"upstream {where} returned {status}: {detail}",
        status_code=status,
        error_type=error_type if error_type in OPENAI_ERROR_TYPES else None,
        param=param,
        code=None if code is None else str(code),
        headers=_relayable(headers or {}),
    )


def _relayable(headers: dict[str, str]) -> dict[str, str]:
    """Headers a client needs to back off correctly."""
    keep = ("retry-after", "retry-after-ms")
    return safe_headers({k: v for k, v in headers.items() if k.lower() in keep})


def _parse_error_body(body: bytes) -> tuple[str, str | None, str | None, Any]:
    """(message, type, param, code) from OpenAI's, vLLM's or Anthropic's error shapes."""
    try:
        data = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace")[:500].strip(), None, None, None
    if not isinstance(data, dict):
        return "", None, None, None
    inner = data.get("error")
    if isinstance(inner, dict):  # OpenAI, current vLLM, Anthropic (nested under "error")
        data = inner
    elif isinstance(inner, str):
        return inner, None, None, None
    message = data.get("message") or data.get("detail") or ""
    error_type = data.get("type") if isinstance(data.get("type"), str) else None
    param = data.get("param") if isinstance(data.get("param"), str) else None
    return str(message), error_type, param, data.get("code")
