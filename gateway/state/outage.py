"""What counts as Redis being away, for the fallbacks of shared state and budgets.

Timeouts are OSErrors and a dead socket surfaces as a RedisError or an OSError; but a
reply that arrives after redis-py gave up on its connection can also meet asyncio's
closed transport, which raises a plain RuntimeError ("unable to perform operation on
<TCPTransport closed=True ...>"). That one is an outage too; any other RuntimeError is a
bug and is not hidden.
"""

from __future__ import annotations

from redis.exceptions import RedisError

CAUGHT = (RedisError, OSError, RuntimeError)
"""Catch these around a Redis call, then ask `is_outage` whether to fall back."""

_CLOSED_TRANSPORT = "unable to perform operation on"


def is_outage(exc: BaseException) -> bool:
    """Whether `exc`, raised by a Redis call, means Redis is unreachable right now."""
    if isinstance(exc, RedisError | OSError):
        return True
    return isinstance(exc, RuntimeError) and str(exc).startswith(_CLOSED_TRANSPORT)
