"""aiohttp, imported where it is first needed, not by every gateway process at start.

The gateway's own HTTP/1.1 client (`h1`) serves every plain or TLS upstream; aiohttp is left
two jobs: a URL with credentials in it (`http_stream.HttpClient.session`) and the exception
types a failed call is raised as (`ClientPayloadError`, `ServerDisconnectedError`, ..., so
`failures.from_client_error` maps either client's the same way). Importing it cost every
`farebox serve` ~100 ms of CPU and 66 modules before the port opened (two SSL contexts
built at import, the system's CA bundle loaded into each, are half of it), though a
request that does not fail never touches it.

So: an error is built through `aiohttp()` (the first failure of a process imports it, once),
and code that catches aiohttp's errors asks `client_error()`, which is aiohttp's
`ClientError` once aiohttp is loaded and, before, a class nothing raises: no aiohttp
exception can exist before aiohttp is imported. Limits are `Timeouts`, which h1 reads as it
read `aiohttp.ClientTimeout` (`sock_connect`, `sock_read`) and aiohttp's session is given
as one (`Timeouts.for_aiohttp`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp as aiohttp_types


def aiohttp() -> ModuleType:
    """The aiohttp module (imported on the first call)."""
    import aiohttp as module

    return module


class _NotLoaded(Exception):
    """Stands in for aiohttp's `ClientError` while aiohttp is not loaded: never raised."""


def client_error() -> type[Exception]:
    """aiohttp's `ClientError` for an `except` clause; before aiohttp is loaded, a class
    nothing raises (an aiohttp error needs aiohttp loaded to exist)."""
    module = loaded()
    return _NotLoaded if module is None else module.ClientError


def loaded() -> ModuleType | None:
    """aiohttp if something imported it, else None (so no aiohttp error exists)."""
    return sys.modules.get("aiohttp")


@cache
def user_agent() -> str:
    """The User-Agent aiohttp sends (`Python/3 aiohttp/<version>`), without importing it."""
    return f"Python/3 aiohttp/{version('aiohttp')}"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """A call's limits as aiohttp's `ClientTimeout` names them: `sock_connect` bounds the
    name's resolution and the TCP and TLS handshakes, `sock_read` each wait for bytes; no
    limit on the whole call (`total`)."""

    sock_connect: float | None
    sock_read: float | None
    total: None = None

    def for_aiohttp(self) -> aiohttp_types.ClientTimeout:
        """The same limits as an `aiohttp.ClientTimeout` (aiohttp's own session)."""
        return _client_timeout(self.sock_connect, self.sock_read)


@cache
def _client_timeout(connect: float | None, read: float | None) -> aiohttp_types.ClientTimeout:
    return aiohttp().ClientTimeout(total=None, sock_connect=connect, sock_read=read)
