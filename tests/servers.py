"""Real servers on real ports: in a thread with its own event loop, or `farebox serve`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from gateway.server import server_config
from gateway.settings import Settings


class _QuietServer(uvicorn.Server):
    """uvicorn's server without its signal handlers, and stopped at once by `stop_now`.

    uvicorn looks at `should_exit` every 0.1 s and sleeps 0.1 s more once it has asked its
    connections to close; the suite stops hundreds of servers, each of which idled its
    worker ~0.18 s that way. Here the wait for `should_exit` wakes on `stop_now`, and the
    shutdown's pause is taken only while connections are still open.
    """

    _stopping: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        stopping = asyncio.Event()
        self._stopping = (asyncio.get_running_loop(), stopping)
        counter = 0
        while not await self.on_tick(counter):  # the Date header, limits, should_exit
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), 0.1)

    def stop_now(self) -> None:
        """Ask it to exit (from any thread): the main loop wakes now, not at its next tick."""
        self.should_exit = True
        if self._stopping is not None:
            loop, stopping = self._stopping
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
                loop.call_soon_threadsafe(stopping.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections:
            await super().shutdown(sockets)  # asks them to close, pauses, waits for them
            return
        for server in self.servers:  # uvicorn's shutdown less its pause: nothing to close
            server.close()
        for sock in sockets or []:
            sock.close()
        if not self.force_exit:
            await self.lifespan.shutdown()


class ServerThread:
    """Run an ASGI app with uvicorn on 127.0.0.1 and a free port until `stop()`."""

    def __init__(self, app: Any, settings: Settings | None = None, **overrides: Any):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        if settings is None:
            config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
            self.loop_factory = None
        else:  # the configuration `farebox serve` runs, limits and loop (uvloop) and all
            config = server_config(app, settings, log_level="warning", **overrides)
            self.loop_factory = config.get_loop_factory()
        self.server = _QuietServer(config)
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=self.loop_factory) as runner:
            runner.run(self.server.serve(sockets=[self.sock]))

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.stop_now()
        self.thread.join(timeout=30)


@contextlib.contextmanager
def running(app: Any, settings: Settings | None = None) -> Iterator[ServerThread]:
    """A started server for the duration of the block (`farebox serve`'s with `settings`)."""
    server = ServerThread(app, settings).start()
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(
    port: int,
    process: subprocess.Popen[Any],
    timeout: float = 120,
    headers: dict[str, str] | None = None,
) -> None:
    """Wait until a `farebox serve` subprocess answers /readyz with 200; fail if it exits.

    120 s: a gateway whose default config loads litellm took 35 s to be ready on a box at
    load 15 (60 s was missed twice there); a ready one answers in well under a second.

    `headers`: the key a gateway with FAREBOX_ADMIN_KEY wants on /readyz.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"farebox serve exited: {output}")
        try:
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", headers=headers, timeout=1)
            if ready.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("farebox serve did not become ready")


def sim_only_config(into: Path) -> Path:
    """The embedded default configuration without its litellm route, written to `into`.

    For `farebox serve` tests whose subject is not litellm: the default's `sim-claude`
    route loads litellm at start (4-6 s of CPU a process, ~200 MB) before /readyz says 200.
    """
    from gateway.settings import DEFAULT_CONFIG
    from gateway.yaml_text import load

    config = load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    models = config["models"]
    config["models"] = {a: r for a, r in models.items() if r.get("provider") != "anthropic"}
    config["prices"] = {a: p for a, p in config["prices"].items() if a in config["models"]}
    into.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return into
