"""Keys while PostgreSQL is away: issued keys keep working, admin changes answer 503.

PostgreSQL is reached through a TCP proxy (the real server serves other tests); stopping
the proxy refuses connections, as a stopped server does.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import GatewayFactory
from tests.e2e.test_ledger_read_outage import LoopThread
from tests.ledger.ledger_proxy import TcpProxy
from tests.pg import PG_HOST, PG_PORT, fresh_pg_database, pg_url

pytestmark = pytest.mark.postgres
ADMIN = {"Authorization": "Bearer adm-outage-0123456789abcdef"}


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def database(loop: LoopThread) -> Iterator[str]:
    manager = fresh_pg_database("farebox_keys_outage")
    name = loop.run(manager.__aenter__())
    yield name
    loop.run(manager.__aexit__(None, None, None))


@pytest.fixture
def proxy(loop: LoopThread) -> Iterator[TcpProxy]:
    proxy = TcpProxy(PG_HOST, PG_PORT)
    loop.run(proxy.start())
    yield proxy
    loop.run(proxy.stop())


def test_issued_keys_work_through_an_outage_and_changes_are_a_503(
    make_gateway: GatewayFactory, loop: LoopThread, database: str, proxy: TcpProxy
) -> None:
    gateway = make_gateway(
        admin_key=ADMIN["Authorization"].removeprefix("Bearer "),
        database_url=pg_url(database, proxy.port),
        ledger_connect_timeout_s=1,
        ledger_read_timeout_s=2,
        keys_refresh_s=0.2,
    )
    url = gateway.server.url
    made = httpx.post(f"{url}/admin/keys", headers=ADMIN, json={"team": "research"}).json()
    key = {"Authorization": f"Bearer {made['key']}"}
    loop.run(proxy.stop())
    # The keys last read stay in force across several failed refreshes.
    for _ in range(5):
        assert httpx.get(f"{gateway.base_url}/models", headers=key, timeout=10).status_code == 200
    response = httpx.post(f"{url}/admin/keys", headers=ADMIN, json={}, timeout=30)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "ledger_unavailable"
    assert httpx.get(f"{url}/admin/keys", headers=ADMIN, timeout=30).status_code == 503
    loop.run(proxy.start())
    revoked = httpx.delete(f"{url}/admin/keys/{made['id']}", headers=ADMIN, timeout=30)
    assert revoked.status_code == 200
    assert httpx.get(f"{gateway.base_url}/models", headers=key, timeout=10).status_code == 401
