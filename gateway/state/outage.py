"""What counts as Redis being away, for the fallbacks of shared state and budgets.

Timeouts are OSErrors and a dead socket surfaces as a RedisError or an OSError; but a
reply that arrives after redis-py gave up on its connection can also meet asyncio's
closed transport, which raises a plain RuntimeError ("unable to perform operation on
<TCPTransport closed=True ...>"), and a connection closed between redis-py's "connected?"
check and its write raises AttributeError ('NoneType' object has no attribute
'writelines'). Both are the client's connection state, not ours: an error of those two
types raised inside redis-py's connection module, or inside its reply parsers (the
hiredis one or the pure-Python ones, which read that connection's stream), is an outage
too. Any other RuntimeError or AttributeError (raised in our code) is a bug and is not
hidden.

A reply that a key holds another shape than the call reads (WRONGTYPE: a list where a
string was written, say; written there by something else) comes from a Redis that is up:
`is_misshapen_key` tells it apart, so that the call is answered locally without counting
towards marking Redis away (one bad key would otherwise degrade every request's state).
"""

from __future__ import annotations

import os

import redis._parsers
import redis.asyncio.connection
from redis.exceptions import RedisError, ResponseError

CAUGHT = (RedisError, OSError, RuntimeError, AttributeError)
"""Catch these around a Redis call, then ask `is_outage` whether to fall back."""

_CLOSED_TRANSPORT = "unable to perform operation on"
_CONNECTION_MODULE = os.path.normcase(redis.asyncio.connection.__file__)
_PARSERS = os.path.join(os.path.normcase(os.path.dirname(redis._parsers.__file__)), "")


def is_outage(exc: BaseException) -> bool:
    """Whether `exc`, raised by a Redis call, means Redis is unreachable right now."""
    if isinstance(exc, RedisError | OSError):
        return True
    if isinstance(exc, RuntimeError) and str(exc).startswith(_CLOSED_TRANSPORT):
        return True
    return isinstance(exc, RuntimeError | AttributeError) and _raised_in_connection(exc)


def is_misshapen_key(exc: BaseException) -> bool:
    """Whether `exc` is Redis's answer that a key holds a value of another type."""
    return type(exc) is ResponseError and str(exc).startswith("WRONGTYPE")


def _raised_in_connection(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc` is redis-py's connection or parser code."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    where = os.path.normcase(tb.tb_frame.f_code.co_filename)
    return where == _CONNECTION_MODULE or where.startswith(_PARSERS)
