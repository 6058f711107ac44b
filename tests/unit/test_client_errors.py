"""aiohttp's exceptions map, once, to the gateway's upstream errors (failures.from_client_error)."""

from __future__ import annotations

import socket

import aiohttp
import httpx
import pytest
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.http_exceptions import ContentEncodingError, TransferEncodingError

from gateway.errors import UpstreamProtocolError, UpstreamTimeoutError, UpstreamUnreachableError
from gateway.upstream.failures import from_client_error, from_transport_error

WHERE = "chat (10.0.0.1:8000)"


def _payload_error(cause: Exception) -> aiohttp.ClientPayloadError:
    error = aiohttp.ClientPayloadError(str(cause))
    error.__cause__ = cause
    return error


def test_timeouts_say_which_phase() -> None:
    connect = from_client_error(aiohttp.ConnectionTimeoutError(), WHERE)
    read = from_client_error(aiohttp.SocketTimeoutError(), WHERE)
    assert isinstance(connect, UpstreamTimeoutError) and "connecting" in connect.message
    assert isinstance(read, UpstreamTimeoutError) and "waiting for a reply" in read.message
    assert isinstance(from_client_error(TimeoutError(), WHERE), UpstreamTimeoutError)


def test_refused_connections_and_resets_are_unreachable() -> None:
    key = ConnectionKey("10.0.0.1", 8000, False, True, None, None, None)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))
    assert from_client_error(refused, WHERE).message == (
        f"upstream {WHERE} is unreachable (connection failed: connection refused)"
    )
    # happy eyeballs' "Multiple exceptions" carries no single number: no reason invented
    several = aiohttp.ClientConnectorError(key, OSError("Multiple exceptions: [...]"))
    assert from_client_error(several, WHERE).message.endswith("(connection failed)")
    for error in (
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientOSError(104, "reset"),
        _payload_error(TransferEncodingError("cut")),
    ):
        mapped = from_client_error(error, WHERE)
        assert isinstance(mapped, UpstreamUnreachableError), error
        assert WHERE in mapped.message and "before a complete reply" in mapped.message


def test_httpx_connect_errors_carry_the_systems_reason_too() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError) as caught:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
    mapped = from_transport_error(caught.value, WHERE)
    assert isinstance(mapped, UpstreamUnreachableError)
    assert mapped.message.endswith("(connection failed: connection refused)")


def test_a_body_that_does_not_decode_is_a_bad_reply() -> None:
    mapped = from_client_error(_payload_error(ContentEncodingError("gzip")), WHERE)
    assert isinstance(mapped, UpstreamProtocolError) and "content-encoding" in mapped.message
