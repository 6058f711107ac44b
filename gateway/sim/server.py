"""Run the simulator under uvicorn: in the foreground, or on a spare port in a thread."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from gateway.sim.state import SimState


def _uvicorn_config(app: Starlette, host: str, port: int, log_level: str) -> uvicorn.Config:
    # The app has no lifespan, so skip the protocol rather than log that it is unsupported.
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="off", timeout_graceful_shutdown=1
    )


async def serve_sim(
    config: SimConfig, host: str = "127.0.0.1", port: int = 8001, *, log_level: str = "info"
) -> None:
    """Serve the simulator until the process is told to stop."""
    server = uvicorn.Server(_uvicorn_config(create_sim_app(config), host, port, log_level))
    await server.serve()


def run_sim(
    config: SimConfig, host: str = "127.0.0.1", port: int = 8001, *, log_level: str = "info"
) -> None:
    """Serve the simulator in the foreground (blocking), as `farebox sim` does."""
    uvicorn.Server(_uvicorn_config(create_sim_app(config), host, port, log_level)).run()


class SimServer:
    """A simulator on a real, spare port in a background thread, for tests and demos.

    Use it as a context manager; ``base_url`` is the root and ``openai_base_url``
    the ``/v1`` URL to hand to an OpenAI client.
    """

    def __init__(
        self, config: SimConfig | None = None, host: str = "127.0.0.1", log_level: str = "warning"
    ) -> None:
        self.app = create_sim_app(config)
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self.port: int = self._socket.getsockname()[1]
        self._server = uvicorn.Server(_uvicorn_config(self.app, host, self.port, log_level))
        self._thread = threading.Thread(
            target=self._run, name=f"farebox-sim-{self.port}", daemon=True
        )

    @property
    def base_url(self) -> str:
        """Return http://host:port."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Return the /v1 URL for OpenAI and Anthropic clients."""
        return f"{self.base_url}/v1"

    @property
    def state(self) -> SimState:
        """Return the live state, for assertions that skip the HTTP control routes."""
        state: SimState = self.app.state.sim
        return state

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self, timeout: float = 10.0) -> SimServer:
        """Start serving and wait until the port accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"simulator did not start on {self.base_url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
