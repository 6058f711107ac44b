"""Free a large request's parsed data after its response, beside the loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import Response

from gateway.pipeline.offload import RELEASE_BYTES

Free = Callable[[Any], Awaitable[None]]


def release_after(response: Response, size: int, free: Free, ctx: Any) -> None:
    """Run `free(ctx)` after `response`'s last byte and its own background (a whole reply's
    booking), for a body over `RELEASE_BYTES`. A smaller body's parse is freed with the
    request, where `release` would leave it anyway: no task (nor closure) for nothing."""
    if size > RELEASE_BYTES:
        response.background = _Release(free, ctx, response.background)


class _Release(BackgroundTask):
    """`BackgroundTask(free, ctx)` without Starlette's check that `free` is async, after
    the response's own background when it has one."""

    def __init__(self, free: Free, ctx: Any, before: BackgroundTask | None) -> None:
        self.free, self.ctx = free, ctx  # no super().__init__: see above
        self.before = before

    async def __call__(self) -> None:
        try:
            if self.before is not None:
                await self.before()
        finally:
            await self.free(self.ctx)
