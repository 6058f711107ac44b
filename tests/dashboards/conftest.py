"""One gateway on a PostgreSQL ledger, one Prometheus scraping it, shared by the module."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.dashboards import panels
from tests.dashboards.prometheus import Prometheus, require_tools, running_prometheus
from tests.dashboards.workload import CONFIG, run_round
from tests.pg import PG_ADMIN_DB, PG_HOST, PG_PORT, PG_USER, pg_url, require_postgres
from tests.servers import ServerThread


@dataclass
class Live:
    """The gateway, its ledger database and the Prometheus that scraped its workload."""

    gateway: ServerThread
    database: str
    prometheus: Prometheus


async def _admin(sql: str) -> None:
    try:
        admin = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=5
        )
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        require_postgres(f"{type(exc).__name__}: {exc}")
        raise
    try:
        await admin.execute(sql)
    finally:
        await admin.close()


@pytest.fixture(scope="module")
def ledger_database() -> Iterator[str]:
    """A PostgreSQL database of the module's own (the gateway migrates it), dropped after."""
    name = f"farebox_dash_{int(time.time() * 1000) % 10**9}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield name
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _requests_total(gateway: ServerThread) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    families = text_string_to_metric_families(text)
    family = next(f for f in families if f.name == "farebox_requests")
    return sum(s.value for s in family.samples if s.name == "farebox_requests_total")


def _scraped(prometheus: Prometheus, gateway: ServerThread) -> None:
    """Wait until Prometheus holds a sample taken after the gateway's last upstream call."""
    total = _requests_total(gateway)
    prometheus.wait_for(
        "sum(farebox_requests_total)", lambda r: bool(r) and float(r[0]["value"][1]) == total
    )


async def fetch(database: str, sql: str) -> list[dict[str, object]]:
    """Run one query on the ledger database; rows as dicts."""
    connection = await asyncpg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, database=database, timeout=5
    )
    try:
        return [dict(row) for row in await connection.fetch(sql)]
    finally:
        await connection.close()


def _booked(database: str, calls: float, timeout: float = 15) -> None:
    """Wait until the ledger writer has flushed a row for each upstream call."""
    deadline = time.monotonic() + timeout
    while True:
        (row,) = asyncio.run(fetch(database, "SELECT count(*) AS n FROM requests"))
        if row["n"] == calls:
            return
        assert time.monotonic() < deadline, f"{row['n']} of {calls} ledger rows after {timeout} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def live(
    sim_server: ServerThread, ledger_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    require_tools()
    sim = SimControl(sim_server.url)
    sim.reset()
    sim.http.post("/sim/config", json={"decode_ms_per_token": 2}).raise_for_status()
    directory = tmp_path_factory.mktemp("dashboards")
    config = directory / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    settings = Settings(
        config=config, data_dir=directory / "data", database_url=pg_url(ledger_database)
    )
    gateway = ServerThread(create_app(settings), settings).start()
    target = f"127.0.0.1:{gateway.port}"
    try:
        with running_prometheus(directory, target, [panels.RULES]) as prometheus:
            prometheus.wait_for('up{job="farebox"}', lambda r: bool(r) and r[0]["value"][1] == "1")
            # Two rounds with a scrape between: a series first seen after it rose shows
            # no increase, so every counter must rise again once Prometheus knows it.
            for round_no in (1, 2):
                run_round(f"{gateway.url}/v1", sim, round_no)
                _scraped(prometheus, gateway)
            _booked(ledger_database, _requests_total(gateway))
            yield Live(gateway, ledger_database, prometheus)
    finally:
        gateway.stop()
        sim.reset()
        sim.close()
