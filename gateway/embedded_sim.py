"""Run the bundled simulator inside the gateway process, on a port of its own.

`farebox serve` with a configuration that says `base_url: sim` (the embedded default
does) needs a backend with no set-up at all; a real HTTP port keeps the path the same
as for any vLLM server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn


class _NoSignalServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the gateway it runs inside."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(slots=True)
class EmbeddedSim:
    """A running simulator: its base URL and how to stop it."""

    base_url: str
    server: uvicorn.Server
    task: asyncio.Task[None]

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


def bind_sim(host: str, port: int = 0) -> socket.socket:
    """The simulator's socket, bound (port 0 picks a free one); `serve_sim` serves it.

    Apart so that `farebox serve --workers N` binds it once, before forking, and hands
    its URL to every worker.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening from here, so a connection made before the serving process is up (a
    # worker's first call while the helper still imports the simulator) waits in the
    # backlog instead of being refused.
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


async def start_embedded_sim(host: str, port: int = 0) -> EmbeddedSim:
    """Start the simulator with its default models; port 0 picks a free one."""
    return await serve_sim(bind_sim(host, port))


async def serve_sim(sock: socket.socket) -> EmbeddedSim:
    """Serve the simulator with its default models on `sock` (from `bind_sim`), timed by
    the profile `FAREBOX_SIM_PROFILE` names (`instant` when unset)."""
    from gateway.sim.app import create_sim_app
    from gateway.sim.config import PROFILE_ENV, profile_config

    # `make run` asks for realistic timing; tests and benches keep the instant default.
    app = create_sim_app(profile_config(os.environ.get(PROFILE_ENV)))
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = _NoSignalServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # re-raises the start-up failure
        await asyncio.sleep(0.01)
    host, bound_port = sock.getsockname()[:2]
    return EmbeddedSim(f"http://{host}:{bound_port}/v1", server, task)
