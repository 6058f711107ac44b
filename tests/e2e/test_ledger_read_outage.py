"""Ledger reads while PostgreSQL is away: a quick OpenAI-shaped 503, then prompt recovery.

PostgreSQL is reached through a TCP proxy (the real server serves other tests): stopping
the proxy refuses connections, as a stopped server does; a black hole in its place
accepts them and never answers, as a hung server or a dropped network does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import app as cli
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.ledger.ledger_proxy import TcpProxy
from tests.pg import PG_HOST, PG_PORT, fresh_pg_database, pg_url

pytestmark = pytest.mark.postgres
T = TypeVar("T")
READS = ("/v1/spend", "/v1/spend/tasks", "/v1/tasks/{task}", "/v1/gpu")


class LoopThread:
    """An event loop in a thread, for the proxy and the test database."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class BlackHole:
    """Accepts connections on a port and never answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._held.append(writer)

        self._server = await asyncio.start_server(hold, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in self._held:
            writer.transport.abort()


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def database(loop: LoopThread) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped after the test."""
    manager = fresh_pg_database("farebox_reads")
    name = loop.run(manager.__aenter__())
    yield name
    loop.run(manager.__aexit__(None, None, None))


@pytest.fixture
def proxy(loop: LoopThread) -> Iterator[TcpProxy]:
    proxy = TcpProxy(PG_HOST, PG_PORT)
    loop.run(proxy.start())
    yield proxy
    loop.run(proxy.stop())


def _gateway(make_gateway: GatewayFactory, database: str, proxy: TcpProxy) -> Gateway:
    return make_gateway(
        database_url=pg_url(database, proxy.port),
        ledger_connect_timeout_s=1,
        ledger_read_timeout_s=2,
    )


def _chat(gateway: Gateway, task: str) -> None:
    reply = gateway.sdk().chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Task-Id": task},
    )
    assert reply.choices[0].message.content


def _timed_get(gateway: Gateway, path: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.get(f"{gateway.server.url}{path}", timeout=60)
    return response, time.monotonic() - started


def _assert_unavailable(gateway: Gateway, task: str) -> float:
    """Every ledger read answers 503 in OpenAI's shape; return the slowest answer's time."""
    slowest = 0.0
    for path in READS:
        response, took = _timed_get(gateway, path.format(task=task))
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        error = response.json()["error"]
        assert error["code"] == "ledger_unavailable" and error["type"] == "server_error"
        assert "unreachable" in error["message"]
        slowest = max(slowest, took)
    return slowest


def _spend_requests(gateway: Gateway) -> tuple[int, float]:
    response, took = _timed_get(gateway, "/v1/spend")
    assert response.status_code == 200, response.text
    return sum(row["request_count"] for row in response.json()["data"]), took


def test_reads_answer_503_while_postgres_refuses_and_recover_at_once(
    make_gateway: GatewayFactory, loop: LoopThread, database: str, proxy: TcpProxy
) -> None:
    gateway = _gateway(make_gateway, database, proxy)
    _chat(gateway, "reads-refused")
    assert _spend_requests(gateway)[0] == 1

    loop.run(proxy.stop())
    _chat(gateway, "reads-refused")  # served, and spooled
    slowest = _assert_unavailable(gateway, "reads-refused")

    loop.run(proxy.start())
    count, took = _spend_requests(gateway)
    assert count == 2  # the request served during the outage is in the first read after it
    assert took < 3, f"first read after recovery took {took:.2f} s"
    print(f"refused: slowest 503 {slowest:.3f} s; first read after recovery {took:.3f} s")


def test_reads_answer_503_in_bounded_time_while_postgres_hangs(
    make_gateway: GatewayFactory, loop: LoopThread, database: str, proxy: TcpProxy
) -> None:
    gateway = _gateway(make_gateway, database, proxy)
    _chat(gateway, "reads-hung")
    loop.run(proxy.stop())
    hole = BlackHole(proxy.port)
    loop.run(hole.start())
    try:
        slowest = _assert_unavailable(gateway, "reads-hung")
        # Bounded by the 1 s connect timeout (once the writer's, once the read's), not 20 s.
        assert slowest < 10, f"a 503 took {slowest:.2f} s"
    finally:
        loop.run(hole.stop())
    loop.run(proxy.start())
    count, took = _spend_requests(gateway)
    assert count == 1
    assert took < 3, f"first read after recovery took {took:.2f} s"
    print(f"hung: slowest 503 {slowest:.3f} s; first read after recovery {took:.3f} s")


def test_report_says_the_ledger_is_unreachable_instead_of_hanging(
    loop: LoopThread, database: str, proxy: TcpProxy
) -> None:
    loop.run(proxy.stop())
    hole = BlackHole(proxy.port)
    loop.run(hole.start())
    try:
        url = pg_url(database, proxy.port)
        env = {"FAREBOX_LEDGER_CONNECT_TIMEOUT_S": "1"}
        result = CliRunner().invoke(cli, ["report", "--database-url", url], env=env)
    finally:
        loop.run(hole.stop())
    assert result.exit_code == 2
    assert "cannot read the ledger" in result.output
