"""The local Redis for tests: fail under CI when it is missing, skip elsewhere; what it ran."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

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


async def commands_sent(
    client: aioredis.Redis, namespace: str, action: Callable[[], Awaitable[object]]
) -> list[str]:
    """The commands naming `namespace` that Redis ran while `action` ran, in order (MONITOR),
    without a script's own calls inside it."""
    marker = f"ECHO {namespace}:done"
    seen: list[str] = []
    async with client.monitor() as monitor:

        async def watch() -> None:
            while True:
                command = await monitor.next_command()
                if command["client_type"] != "lua":
                    seen.append(command["command"])

        watching = asyncio.create_task(watch())
        await asyncio.sleep(0.1)  # MONITOR is on before the action
        await action()
        # A marker of our own after it: the monitor shows commands in the order Redis ran
        # them, so once it shows the marker it has shown the action's.
        await client.echo(f"{namespace}:done")
        for _ in range(250):
            if marker in seen:
                break
            await asyncio.sleep(0.02)
        watching.cancel()
    assert marker in seen, "MONITOR never showed the marker"
    return [command for command in seen if namespace in command and command != marker]
