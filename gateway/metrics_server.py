"""`/metrics` on a port of its own, without a key, for a Prometheus that cannot send one.

Started in the lifespan when FAREBOX_METRICS_PORT is set (docs/security.md, "Metrics"):
a second uvicorn server in the same process and event loop, answering `GET /metrics`
and nothing else. The socket is bound here, so a port in use fails start-up with the
port's name rather than exiting from inside uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from types import TracebackType

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import Receive, Scope, Send

from gateway.api.metrics import observe_at_scrape
from gateway.metrics import render_workers
from gateway.services import Services


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the gateway's own server handles the process's signals


class MetricsServer:
    """Serve `/metrics` of `services` on host:port until the context exits.

    Without services (the parent of `farebox serve --workers N`): every worker's sums.
    """

    def __init__(self, services: Services | None, host: str, port: int) -> None:
        self.services = services
        self.host = host
        self.port = port
        self._task: asyncio.Task[None] | None = None
        # No log settings: uvicorn's loggers are the gateway server's too, leave them be.
        config = uvicorn.Config(
            self.app,
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
        )
        self._server = _Server(config)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """GET /metrics; 404 for any other path, 405 for any other method."""
        status, body, kind = 200, b"", CONTENT_TYPE_LATEST
        if scope["path"] != "/metrics":
            status, body, kind = 404, b"only /metrics is served on this port\n", "text/plain"
        elif scope["method"] not in ("GET", "HEAD"):
            status, body, kind = 405, b"GET /metrics\n", "text/plain"
        elif self.services is None:  # the supervisor of `--workers`: their sums
            body = render_workers()
        else:
            observe_at_scrape(self.services)
            body = self.services.metrics.render()
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __aenter__(self) -> MetricsServer:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"FAREBOX_METRICS_PORT: cannot listen on {self.host}:{self.port} "
                          f"({exc.strerror})") from exc  # fmt: skip
        self.port = sock.getsockname()[1]  # the one chosen, when 0 was asked for
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the metrics server stopped during start-up")
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
