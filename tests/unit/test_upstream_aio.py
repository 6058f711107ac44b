"""gateway.upstream.aio: aiohttp on first use, and what stands in for it until then."""

from __future__ import annotations

import json
import subprocess
import sys

import aiohttp

from gateway.upstream import aio

FRESH = """
import json, sys
from gateway.upstream import aio, failures
before = "aiohttp" in sys.modules
stand_in = aio.client_error()
agent = aio.user_agent()
timed_out = failures.from_client_error(TimeoutError(), "m (h)")
other = failures.from_client_error(ValueError("x"), "m (h)")
still_out = "aiohttp" in sys.modules
module = aio.aiohttp()
print(json.dumps([
    before, still_out, stand_in is module.ClientError, issubclass(stand_in, Exception),
    agent, module.__version__, aio.client_error() is module.ClientError,
    [type(timed_out).__name__, str(timed_out)], [type(other).__name__, str(other)],
]))
"""


def test_nothing_imports_aiohttp_until_asked() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, check=True, timeout=60
    )
    before, still_out, same, is_exception, agent, version, after, timed_out, other = json.loads(
        done.stdout
    )
    assert before is False and still_out is False  # aio, failures and mapping: no aiohttp
    assert same is False and is_exception  # a class no aiohttp error can be an instance of
    assert agent == f"Python/3 aiohttp/{version}"  # what aiohttp itself sends
    assert after is True  # once loaded, except clauses catch aiohttp's ClientError
    assert timed_out == [
        "UpstreamTimeoutError",
        "upstream m (h) timed out while waiting for a reply",
    ]
    assert other == [
        "UpstreamUnreachableError",
        "upstream m (h) failed: ValueError before a complete reply",
    ]


def test_timeouts_are_aiohttps_for_its_session() -> None:
    limits = aio.Timeouts(sock_connect=2.0, sock_read=5.0)
    assert limits.total is None
    given = limits.for_aiohttp()
    assert given == aiohttp.ClientTimeout(total=None, sock_connect=2.0, sock_read=5.0)
    assert limits.for_aiohttp() is given  # built once per pair of limits


def test_the_mapping_reads_the_same_with_aiohttp_loaded() -> None:
    from aiohttp.http_exceptions import ContentEncodingError

    from gateway.upstream import failures

    assert aio.loaded() is aiohttp
    assert aio.client_error() is aiohttp.ClientError
    gone = failures.from_client_error(aiohttp.ServerDisconnectedError(), "m (h)")
    assert str(gone) == "upstream m (h) failed: ServerDisconnectedError before a complete reply"
    undecodable = aiohttp.ClientPayloadError("Can not decode content-encoding: gzip")
    undecodable.__cause__ = ContentEncodingError("gzip")
    mapped = failures.from_client_error(undecodable, "m (h)")
    assert type(mapped).__name__ == "UpstreamProtocolError"
    assert "cannot be decoded" in str(mapped)
    cut = failures.from_client_error(aiohttp.ClientPayloadError("cut"), "m (h)")
    assert "the reply was cut" in str(cut)
    refused = aiohttp.ConnectionTimeoutError("Connection timeout to host http://h:1")
    assert "timed out while connecting" in str(failures.from_client_error(refused, "m (h)"))
