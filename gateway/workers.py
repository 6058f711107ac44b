"""`farebox serve --workers N`: N gateway processes forked on one listening socket.

The parent binds the port (gateway.preflight), migrates the ledger, then forks the
workers; each runs the whole app (its lifespan, its ledger writer, its key cache) on the
inherited socket, and the kernel hands each new connection to whichever worker accepts
it first. The parent serves nothing of the API. It owns what must exist once:

- the bundled simulator, when the configuration uses it: its socket is bound before the
  fork (its URL is handed to the workers) and served by the parent after it;
- Prometheus multiprocess metrics: a temporary PROMETHEUS_MULTIPROC_DIR made before the
  fork and removed at exit; `/metrics` on any worker (and FAREBOX_METRICS_PORT, served
  by the parent) sums all of them (gateway.metrics);
- the signals: SIGTERM and SIGINT are passed to every worker, which drains as one
  process does (gateway.drain), and the parent exits once all have; SIGHUP (reload) is
  passed on too. A worker that dies is replaced, unless it died during start-up.

Per-process state (budgets, rate limits, task totals) would be per worker without Redis,
so more than one worker takes FAREBOX_REDIS_URL, or FAREBOX_PER_WORKER_STATE=true to
accept that (`workers_refusal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass, field

from gateway.config import GatewayConfig
from gateway.services import Services
from gateway.settings import Settings

log = logging.getLogger("farebox")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
START_UP_S = 10.0  # a worker that dies sooner failed to start: do not fork it in a loop
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GAUGE_REFRESH_S = 1.0  # ledger backlog, breakers, requests in flight of each worker


def workers_refusal(settings: Settings) -> str | None:
    """Why `settings.workers` processes may not start, or None when they may."""
    if settings.workers <= 1 or settings.redis_url or settings.per_worker_state:
        return None
    return (
        f"refusing to start {settings.workers} workers without FAREBOX_REDIS_URL: budgets, "
        "rate limits and task totals would be counted in each worker apart (each could spend "
        "a whole budget). Set FAREBOX_REDIS_URL, or pass --per-worker-state "
        "(FAREBOX_PER_WORKER_STATE=true) to accept per-worker state."
    )


@dataclass
class Supervisor:
    """The parent: forks the workers, passes signals on, replaces dead ones, cleans up."""

    settings: Settings
    config: GatewayConfig
    listener: socket.socket
    on_ready: Callable[[Services], None] | None = None
    metrics_dir: str = ""
    sim_socket: socket.socket | None = None
    sim_url: str | None = None
    children: dict[int, tuple[int, float]] = field(default_factory=dict)  # pid: index, start
    stopping: bool = False
    failed: bool = False

    def run(self) -> int:
        """Serve until a signal stops every worker; the exit status."""
        self.metrics_dir = tempfile.mkdtemp(prefix="farebox-metrics-")
        os.environ[MULTIPROC_ENV] = self.metrics_dir
        try:
            if self.config.uses_simulator:
                from gateway.embedded_sim import bind_sim

                self.sim_socket = bind_sim(self.settings.host, self.settings.sim_port)
                port = self.sim_socket.getsockname()[1]
                self.sim_url = f"http://{self.settings.host}:{port}/v1"
            for index in range(self.settings.workers):
                self._fork(index)
            self._announce()
            from gateway.server import LOOP

            loop_factory = None
            if LOOP == "uvloop":
                import uvloop

                loop_factory = uvloop.new_event_loop
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(self._supervise())
        finally:
            self._reap_all()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return 1 if self.failed else 0

    def _announce(self) -> None:
        state = "shared through Redis" if self.settings.redis_url else "PER WORKER (no Redis)"
        pids = ", ".join(str(pid) for pid in self.children)
        print(
            f"  workers: {self.settings.workers} (pids {pids}; supervisor {os.getpid()}); "
            f"budgets and task state: {state}; metrics summed from {self.metrics_dir}",
            flush=True,
        )

    def _fork(self, index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's code
            status = 1
            try:
                status = _worker(self, index)
            except BaseException:
                log.exception("worker %d failed", index)
            finally:
                os._exit(status)
        self.children[pid] = (index, time.monotonic())

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in FORWARDED:
            loop.add_signal_handler(signum, self._forward, signum)
        async with contextlib.AsyncExitStack() as stack:
            if self.sim_socket is not None:
                from gateway.embedded_sim import serve_sim

                sim = await serve_sim(self.sim_socket)
                stack.push_async_callback(sim.stop)  # after every worker has drained
            if self.settings.metrics_port is not None:
                from gateway.metrics_server import MetricsServer

                port = self.settings.metrics_port
                await stack.enter_async_context(
                    MetricsServer(None, self.settings.metrics_host, port)
                )
            while self.children:
                self._reap()
                await asyncio.sleep(0.1)

    def _forward(self, signum: int) -> None:
        if signum != signal.SIGHUP:
            # SIGTERM for SIGINT too: a terminal's Ctrl-C reached the workers already,
            # and a second SIGINT makes uvicorn stop at once instead of draining.
            self.stopping, signum = True, signal.SIGTERM
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _reap(self) -> None:
        """Collect workers that exited; replace one that died while the others serve."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            index, started = self.children.pop(pid, (-1, 0.0))
            _mark_dead(pid)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:  # uvicorn re-raises the SIGTERM it drained on: clean too
                self.failed = self.failed or code not in (0, -signal.SIGTERM)
                continue
            log.error("worker %d (pid %d) exited with %d", index, pid, code)
            if time.monotonic() - started < START_UP_S or index < 0:
                self.failed = True  # failed to start: stop the rest rather than loop
                self._forward(signal.SIGTERM)
            else:
                self._fork(index)

    def _reap_all(self) -> None:
        """Leave no worker behind, whatever stopped the parent."""
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.pop(pid, None)


def _mark_dead(pid: int) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # its live gauges leave the sums


def _worker(parent: Supervisor, index: int) -> int:
    """One worker: the whole gateway on the inherited socket, until SIGTERM drains it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs its own
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the reloader takes it
    if parent.sim_socket is not None:
        parent.sim_socket.close()  # the parent serves it
    from prometheus_client import values

    # prometheus_client chose its value class at import (in the parent, before the
    # directory existed): values made from now on live in this worker's files.
    values.ValueClass = values.MultiProcessValue()
    from gateway.app import create_app
    from gateway.drain import DrainingServer
    from gateway.server import server_config

    # The metrics port is the parent's (one port, every worker's sums).
    settings = parent.settings.model_copy(update={"metrics_port": None})
    banner = parent.on_ready if index == 0 else None  # one banner

    def on_ready(services: Services) -> None:
        _refresh_gauges(services, application.state.in_flight)
        if banner is not None:
            banner(services)

    application = create_app(settings, parent.config, on_ready=on_ready, sim_url=parent.sim_url)
    config = server_config(application, settings)
    server = DrainingServer(config, application.state.in_flight, settings.shutdown_grace_s)
    server.run(sockets=[parent.listener])
    return 0 if server.started else 3


def _refresh_gauges(services: Services, in_flight: Sized) -> None:
    """Keep this worker's scrape-time gauges fresh: a scrape reaches only one worker."""
    from gateway.api.metrics import observe_at_scrape

    loop = asyncio.get_running_loop()

    def tick() -> None:
        observe_at_scrape(services)
        services.metrics.in_flight.set(len(in_flight))
        loop.call_later(GAUGE_REFRESH_S, tick)

    tick()
