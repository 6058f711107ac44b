"""`farebox serve --workers N`: N gateway processes forked on one listening socket.

The parent binds the port (gateway.preflight), migrates the ledger, then forks the
workers; each runs the whole app (its lifespan, its ledger writer, its key cache) on the
inherited socket, and the kernel hands each new connection to whichever worker accepts
it first. The parent serves nothing and runs no event loop (so forking a replacement is
as safe as the first fork). It owns what must exist once:

- the bundled simulator, when the configuration uses it: its socket is bound before the
  fork (its URL is handed to the workers) and served by a helper process, which also
  serves FAREBOX_METRICS_PORT;
- Prometheus multiprocess metrics: a temporary PROMETHEUS_MULTIPROC_DIR made before the
  fork and removed at exit; `/metrics` on any worker (and on the metrics port) sums all
  of them (gateway.metrics);
- the signals: SIGTERM and SIGINT are passed to every worker, which drains as one
  process does (gateway.drain), and the parent exits once all have (then the helper
  stops); SIGHUP (reload) is passed on too. A worker that dies is replaced, unless it
  died before its app had started; every child gets SIGTERM if the parent dies.

Per-process state (budgets, rate limits, task totals) would be per worker without Redis,
so more than one worker takes FAREBOX_REDIS_URL, or FAREBOX_PER_WORKER_STATE=true to
accept that (`workers_refusal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import mmap
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sized
from dataclasses import dataclass, field

from gateway.config import GatewayConfig
from gateway.services import Services
from gateway.settings import Settings

log = logging.getLogger("farebox")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
HELPER = -1  # the index of the helper process (simulator, metrics port) among the children
PR_SET_PDEATHSIG = 1
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
    """The parent: forks the workers and the helper, passes signals on, replaces the dead.

    It runs no event loop and no thread, so forking a replacement later is as safe as the
    first fork; the simulator and the metrics port are served by a helper process.
    """

    settings: Settings
    config: GatewayConfig
    listener: socket.socket
    on_ready: Callable[[Services], None] | None = None
    metrics_dir: str = ""
    sim_socket: socket.socket | None = None
    sim_url: str | None = None
    children: dict[int, int] = field(default_factory=dict)  # pid: index (HELPER: helper)
    ready: set[int] = field(default_factory=set)  # pids whose app finished starting
    ready_pipe: tuple[int, int] = (-1, -1)  # a worker writes its pid there once started
    loads: mmap.mmap | None = None  # each worker's open connections (gateway.accept_turns)
    stopping: bool = False
    failed: bool = False

    def run(self) -> int:
        """Serve until a signal stops every worker; the exit status."""
        self.metrics_dir = tempfile.mkdtemp(prefix="farebox-metrics-")
        os.environ[MULTIPROC_ENV] = self.metrics_dir
        for signum in FORWARDED:  # before the first fork: none may kill the parent alone
            signal.signal(signum, self._on_signal)
        self.ready_pipe = os.pipe()
        os.set_blocking(self.ready_pipe[0], False)
        from gateway.accept_turns import Loads

        self.loads = Loads.shared(self.settings.workers)
        try:
            if self.config.uses_simulator:
                from gateway.embedded_sim import bind_sim

                self.sim_socket = bind_sim(self.settings.host, self.settings.sim_port)
                port = self.sim_socket.getsockname()[1]
                self.sim_url = f"http://{self.settings.host}:{port}/v1"
            _share_before_fork()
            if self.sim_socket is not None or self.settings.metrics_port is not None:
                self._fork(HELPER)
            for index in range(self.settings.workers):
                self._fork(index)
            self._announce()
            while self._workers():
                self._read_ready()
                self._reap()
                time.sleep(0.1)
        finally:
            self._reap_all()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return 1 if self.failed else 0

    def _announce(self) -> None:
        state = "shared through Redis" if self.settings.redis_url else "PER WORKER (no Redis)"
        pids = ", ".join(str(pid) for pid in self._workers())
        print(
            f"  workers: {self.settings.workers} (pids {pids}; supervisor {os.getpid()}); "
            f"budgets and task state: {state}; metrics summed from {self.metrics_dir}",
            flush=True,
        )

    def _workers(self) -> list[int]:
        return [pid for pid, index in self.children.items() if index != HELPER]

    def _fork(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            status = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs its own
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the reloader takes it
                _die_with(parent)
                status = _helper(self) if index == HELPER else _worker(self, index)
            except BaseException:
                log.exception("farebox %s failed", "helper" if index == HELPER else "worker")
            finally:
                os._exit(status)
        self.children[pid] = index

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum != signal.SIGHUP:
            # SIGTERM for SIGINT too: a terminal's Ctrl-C reached the workers already,
            # and a second SIGINT makes uvicorn stop at once instead of draining.
            self.stopping, signum = True, signal.SIGTERM
        self._signal_workers(signum)

    def _signal_workers(self, signum: int) -> None:
        for pid in self._workers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _reap(self) -> None:
        """Collect children that exited; replace one that died while the others serve."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self._read_ready()  # a worker may have started and died since the last read
            index = self.children.pop(pid, HELPER)
            _mark_dead(pid)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:  # uvicorn re-raises the SIGTERM it drained on: clean too
                self.failed = self.failed or code not in (0, -signal.SIGTERM)
                continue
            name = "helper" if index == HELPER else f"worker {index}"
            log.error("farebox %s (pid %d) exited with %d", name, pid, code)
            if pid not in self.ready and index != HELPER:
                self.failed = self.stopping = True  # failed to start: stop, do not loop
                self._signal_workers(signal.SIGTERM)
            else:
                self._fork(index)

    def _read_ready(self) -> None:
        with contextlib.suppress(BlockingIOError):
            data = os.read(self.ready_pipe[0], 4096)
            self.ready.update(int(pid) for pid in data.split())

    def _reap_all(self) -> None:
        """Stop the helper once the workers are done, and leave no child behind."""
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.children.pop(pid, None)


def _share_before_fork() -> None:
    """Import what every worker runs and freeze it out of the collector, before the forks.

    The workers then share the parent's pages of modules, classes and the price map
    instead of each importing its own copy; frozen, the collector never writes to those
    objects' headers, which would copy each page it touches into the worker (CPython's
    advice for pre-fork servers: gc.freeze() just before fork).
    """
    import gateway.app
    import gateway.drain
    import gateway.server  # noqa: F401

    gc.collect()
    gc.freeze()


def _die_with(parent: int) -> None:
    """Have the kernel SIGTERM this child if the supervisor dies (even by SIGKILL)."""
    if sys.platform == "linux":
        import ctypes  # here: a single-process `farebox serve` never forks a worker (4 ms)

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


def _helper(parent: Supervisor) -> int:
    """The helper: the bundled simulator and FAREBOX_METRICS_PORT, until SIGTERM."""
    parent.listener.close()  # the workers serve it
    from gateway.server import LOOP

    loop_factory = None
    if LOOP == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_serve_helper(parent))
    return 0


async def _serve_helper(parent: Supervisor) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: None)  # a reload is the workers'
    async with contextlib.AsyncExitStack() as stack:
        if parent.sim_socket is not None:
            from gateway.embedded_sim import serve_sim

            sim = await serve_sim(parent.sim_socket)
            stack.push_async_callback(sim.stop)
        if parent.settings.metrics_port is not None:
            from gateway.metrics_server import MetricsServer

            host, port = parent.settings.metrics_host, parent.settings.metrics_port
            await stack.enter_async_context(MetricsServer(None, host, port))
        await stop.wait()


def _mark_dead(pid: int) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # its live gauges leave the sums


def _worker(parent: Supervisor, index: int) -> int:
    """One worker: the whole gateway on the inherited socket, until SIGTERM drains it."""
    if parent.sim_socket is not None:
        parent.sim_socket.close()  # the helper serves it
    from prometheus_client import values

    from gateway.metric_files import file_values

    # prometheus_client chose its value class at import (in the parent, before the
    # directory existed): values made from now on live in this worker's files, written
    # by gateway.metric_files (the same bytes for less, and the pid read without a
    # system call).
    values.ValueClass = file_values()
    from gateway.accept_turns import Loads
    from gateway.app import create_app
    from gateway.drain import DrainingServer
    from gateway.server import server_config

    # The metrics port is the helper's (one port, every worker's sums).
    settings = parent.settings.model_copy(update={"metrics_port": None})
    banner = parent.on_ready if index == 0 else None  # one banner

    def on_ready(services: Services) -> None:
        os.write(parent.ready_pipe[1], f"{os.getpid()} ".encode())  # started: replace if dead
        _refresh_gauges(services, application.state.in_flight)
        if banner is not None:
            banner(services)

    application = create_app(settings, parent.config, on_ready=on_ready, sim_url=parent.sim_url)
    config = server_config(application, settings)
    # The connections each worker holds: the one holding fewest accepts the next.
    loads = Loads(parent.loads, index) if parent.loads is not None else None
    server = DrainingServer(config, application.state.in_flight, settings.shutdown_grace_s, loads)
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
