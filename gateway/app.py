"""Build the ASGI app: `create_app(settings)`; nothing is built at import time."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp

from gateway import __version__
from gateway.api import chat
from gateway.api.routers import include_routers
from gateway.audit import AuditLog
from gateway.auth.middleware import AuthMiddleware
from gateway.body_guard import BodyGuard
from gateway.busy_poll import BusyPoll
from gateway.config import GatewayConfig, load_config
from gateway.drain import InFlight, InFlightMiddleware
from gateway.embedded_sim import start_embedded_sim
from gateway.errors import FareboxError, error_body
from gateway.front import LANES, Front, Gateway, answer_of
from gateway.front import unexpected_error as front_unexpected_error
from gateway.heap import freeze_heap
from gateway.json_body import JsonBodyMiddleware
from gateway.keys.cache import KeyCache
from gateway.keys.store import KeyStore
from gateway.ledger import LedgerWriter, WriterConfig, migrate
from gateway.ledger.maintenance import LedgerMaintenance
from gateway.ledger.reads import bounded_engine
from gateway.loopwatch import LoopWatch
from gateway.metrics import Metrics
from gateway.metrics_server import MetricsServer
from gateway.otel import open_tracing
from gateway.pipeline.offload import share_the_lock
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.detectors import HOT_PATH_SCAN_BUDGET
from gateway.reloader import ConfigReloader
from gateway.request_id import RequestIdMiddleware
from gateway.route_hint import missing_v1_hint
from gateway.schemas.body import invalid_field
from gateway.services import Observer, Services, Snapshot
from gateway.settings import Settings
from gateway.state import open_state
from gateway.tenants import open_limiter
from gateway.upstream.registry import Upstreams
from gateway.warmup import warm_up

log = logging.getLogger("farebox")
# FastAPI's own OpenTelemetry asks the global providers on every request (~15% of the
# CPU in front of a chat route); Farebox's spans are its own (gateway/otel).
_OFF = {"tracing": False, "metrics": False, "logs": False}
NO_FASTAPI_TELEMETRY: dict[str, Any] = (
    {"telemetry": _OFF} if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {}
)


def create_app(
    settings: Settings | None = None,
    config: GatewayConfig | None = None,
    observers: list[Observer] | None = None,
    on_ready: Callable[[Services], None] | None = None,
    sim_url: str | None = None,
    defer_routes: bool = False,
    migrated: bool = False,
) -> Gateway:
    """The gateway app; the config is read from `settings` unless given.

    `sim_url`: a simulator already running (`farebox serve --workers`), used instead of
    starting one when the config needs it. `defer_routes`: the routers no chat request
    needs are imported on the first request FastAPI routes (gateway.api.routers), as
    `farebox serve` wants; an app whose routes are read before any request keeps them all.
    `migrated`: the ledger is at head already (`farebox serve` migrated it in its
    preflight), so the lifespan does not check it again.
    """
    settings = settings or Settings()
    # Reload reads the file the configuration came from; an in-memory one has none.
    source = settings.config_path() if config is None or settings.config else None
    config = config if config is not None else load_config(settings.config_path())
    tracing = open_tracing(settings)  # None unless FAREBOX_OTLP_ENDPOINT: no OTel SDK loaded
    if tracing is not None:
        observers = [*(observers or []), tracing.observe]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            services = await _build_services(
                stack, settings, config, observers or [], sim_url, migrated
            )
            app.state.services = services  # for tests and the CLI banner
            services.metrics.in_flight.set_function(lambda: len(app.state.in_flight))
            # Before the heap is frozen: its objects live as long. Deferred routers: no
            # chat request needs anyio's backend, the first routed request loads it.
            await warm_up(app, anyio_backend=not defer_routes)
            # In the background: the port opens now, /readyz says `warming` until it is done.
            services.upstreams.warm(services.config.models.values())
            if not services.upstreams.warming:
                freeze_heap()  # else once litellm is loaded (its objects live as long)
            share_the_lock()  # a worker thread lets the loop run within 1 ms, not 5
            watch = LoopWatch(services.metrics.loop_lag.observe)
            app.state.loop_watch = await stack.enter_async_context(watch)  # and for benches
            if settings.busy_poll_us:
                poll = BusyPoll(settings.busy_poll_us / 1e6, app.state.in_flight.requests)
                app.state.busy_poll = await stack.enter_async_context(poll)
            reloader = ConfigReloader(services, source, settings.reload_poll_s)
            await _watch(stack, reloader)
            if settings.metrics_port is not None:  # for a Prometheus that cannot send a key
                metrics = MetricsServer(services, settings.metrics_host, settings.metrics_port)
                app.state.metrics_server = await stack.enter_async_context(metrics)
            if on_ready is not None:
                on_ready(services)
            yield {"services": services, "reloader": reloader}

    app = Gateway(title="Farebox", version=__version__, lifespan=lifespan, **NO_FASTAPI_TELEMETRY)
    include_routers(app, defer=defer_routes)  # first: the innermost middleware, if any
    _install_error_handlers(app)
    app.add_middleware(JsonBodyMiddleware)  # every body is JSON, content-type or not
    # The fronts call the guard's `read` and the auth's `admit` below, never these as
    # ASGI apps; called as apps, they would serve chat (`ChatEndpoint`).
    endpoint = chat.ChatEndpoint()
    guard = BodyGuard(
        endpoint,
        prompt_limit=settings.max_body_bytes,
        api_limit=settings.max_api_body_bytes,
        timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(
        BodyGuard,
        prompt_limit=guard.prompt_limit,
        api_limit=guard.api_limit,
        timeout_s=guard.timeout_s,
    )
    # Before the body is read: a caller without a valid key never gets to send one.
    app.add_middleware(AuthMiddleware, admin_key=settings.admin_key)
    # Outermost: a shutdown past its grace period cuts requests here (see gateway.drain).
    app.state.in_flight = InFlight()
    app.add_middleware(InFlightMiddleware, in_flight=app.state.in_flight)
    # Outermost of all: every answer below, errors included, carries `x-request-id`.
    app.add_middleware(RequestIdMiddleware)
    # The model routes skip the stack above: the same middlewares' work, in one layer.
    auth = AuthMiddleware(guard, admin_key=settings.admin_key)
    if tracing is not None:  # outside the request id: the span covers the whole answer
        app.add_middleware(type(tracing).middleware(), tracing=tracing)
    # One answer per module (a lazy one imports once): both of its paths share it.
    answers = {module: answer_of(module, defer_routes) for module in dict.fromkeys(LANES.values())}
    for path, module in LANES.items():
        front: ASGIApp = Front(app.state.in_flight, auth, guard, answers[module])
        if tracing is not None:
            front = type(tracing).middleware()(front, tracing=tracing)
        app.lanes[path] = front
    return app


async def _build_services(
    stack: AsyncExitStack,
    settings: Settings,
    config: GatewayConfig,
    observers: list[Observer],
    sim_url: str | None = None,
    migrated: bool = False,
) -> Services:
    sim_base_url = sim_url if config.uses_simulator else None
    if config.uses_simulator and sim_base_url is None:
        sim = await start_embedded_sim(settings.host, settings.sim_port)
        stack.push_async_callback(sim.stop)
        sim_base_url = sim.base_url
    upstreams = Upstreams(None, sim_base_url, settings.timeouts)  # litellm's httpx: on use
    stack.push_async_callback(upstreams.aclose)
    metrics = Metrics()
    engine, ledger = await _open_ledger(stack, settings, config, metrics, migrated)
    # Redis need not answer yet: shared state starts per-process and picks it up later.
    state = await open_state(settings.redis_url, limits=settings.redis_limits, observer=metrics)
    stack.push_async_callback(state.aclose)
    limiter = open_limiter(
        settings.redis_url, limits=settings.redis_limits, hold_s=settings.budget_hold_s
    )
    stack.push_async_callback(limiter.aclose)
    snapshot = await asyncio.to_thread(Snapshot.build, config)
    keys = KeyCache(KeyStore(engine), settings.keys_refresh_s)
    await stack.enter_async_context(keys)  # loaded now, then polled until shutdown
    return Services(
        settings=settings,
        snapshot=snapshot,
        upstreams=upstreams,
        metrics=metrics,
        ledger=ledger,
        engine=engine,
        state=state,
        keys=keys,
        audit=AuditLog(engine),
        observers=list(observers),
        sim_base_url=sim_base_url,
        prefix_checker=_prefix_checker(settings),
        limiter=limiter,
    )


def _prefix_checker(settings: Settings) -> PrefixChecker:
    budget = settings.prefix_scan_budget
    return PrefixChecker(scan_budget=HOT_PATH_SCAN_BUDGET if budget is None else budget)


async def _open_ledger(
    stack: AsyncExitStack,
    settings: Settings,
    config: GatewayConfig,
    metrics: Metrics,
    migrated: bool = False,
) -> tuple[AsyncEngine, LedgerWriter]:
    """Migrate the ledger database (unless `migrated`), start its writer; return the engine
    for reads, the writer."""
    url = settings.ledger_url()
    if not migrated:  # serve's preflight did (1-3 ms on SQLite, a connection on PostgreSQL)
        await migrate(url)
    connect_s = settings.ledger_connect_timeout_s
    engine = bounded_engine(url, connect_s)
    stack.push_async_callback(engine.dispose)
    # Reads get a pool of their own with a statement timeout, so a hung database makes
    # /v1/spend answer 503 in bounded time and never starves the writer of connections.
    reads = bounded_engine(url, connect_s, settings.ledger_read_timeout_s)
    stack.push_async_callback(reads.dispose)
    writer_config = WriterConfig(
        spool_dir=settings.data_dir / "spool",
        flush_interval=settings.ledger_flush_interval,
        idle_timeout=config.tasks.idle_timeout_s,
    )
    writer = LedgerWriter(engine, writer_config, on_task_finished=metrics.observe_task)
    await writer.start()
    stack.push_async_callback(writer.close)  # flushes every pending row on shutdown
    upkeep = LedgerMaintenance(engine, settings.ledger_retention_days)  # partitions, retention
    await upkeep.start()
    stack.push_async_callback(upkeep.close)
    return reads, writer


async def _watch(stack: AsyncExitStack, reloader: ConfigReloader) -> None:
    """Reload on file change and on SIGHUP until shutdown."""
    reloader.install_sighup()
    task = asyncio.create_task(reloader.watch())

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)


def _install_error_handlers(app: FastAPI) -> None:
    """One error shape for everything: OpenAI's."""

    async def farebox_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, FareboxError)
        headers = getattr(exc, "headers", None) or None
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        hint = None
        if exc.status_code == 404:
            hint = missing_v1_hint(app.routes, request.scope, str(request.base_url))
        message += f"; {hint}" if hint else ""
        return JSONResponse(error_body(message, kind), status_code=exc.status_code)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        error = invalid_field(exc.errors(), fastapi=True)  # the message never quotes the input
        return JSONResponse(error.body(), status_code=400)

    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette answers this one outside every middleware: the id is set here.
        return front_unexpected_error(request.scope, exc)

    app.add_exception_handler(FareboxError, farebox_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected_error)
