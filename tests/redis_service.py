"""The local Redis for tests: fail under CI when it is missing, skip elsewhere."""

from __future__ import annotations

import os
import socket

import pytest

REDIS_URL = "redis://127.0.0.1:6379/0"


def require_redis() -> str:
    """The Redis URL, once the server answers on its port."""
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except OSError as exc:
        message = f"Redis at 127.0.0.1:6379 is unreachable ({exc}); run `make services`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return REDIS_URL
