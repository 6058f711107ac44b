"""What a `farebox serve` process on a SQLite ledger has imported after serving.

asyncpg (2.5-3 MiB) and SQLAlchemy's PostgreSQL dialect (with all its drivers' modules,
2 MiB) serve only a PostgreSQL ledger: a gateway on SQLite that has answered a chat
request, a ledger read and a failed key lookup never loads them. The process is a real
`farebox serve`; a `sitecustomize` on its path writes its `sys.modules` on SIGUSR2.
The PostgreSQL side (the ledger's engine loads the dialect, and a read of a stopped
database is still a 503) is tests/api's and tests/ledger's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.serve_probe import probed_serve
from tests.servers import ServerThread, running

DUMP_ON_SIGNAL = """\
import os, signal, sys

def _dump(*_, path=os.environ["SERVE_MODULES_OUT"]):
    catalog = sys.modules.get("gateway.pricing.catalog")
    parsed = catalog._read_map.cache_info().misses if catalog is not None else -1
    with open(path + ".part", "w", encoding="utf-8") as out:
        out.write("\\n".join([f"map-parses:{parsed}", *sorted(sys.modules)]))
    os.replace(path + ".part", path)

signal.signal(signal.SIGUSR2, _dump)
"""


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def _modules_after_serving(tmp_path: Path, sim_url: str) -> tuple[set[str], list[int]]:
    with probed_serve(tmp_path, sim_url, DUMP_ON_SIGNAL, "SERVE_MODULES_OUT") as serve:
        statuses = [
            serve.chat(),
            httpx.get(f"{serve.base}/v1/spend", timeout=30).status_code,  # a ledger read
            httpx.get(f"{serve.base}/v1/tasks/no-such-task", timeout=30).status_code,
        ]
        return set(serve.dump().split()), statuses


def test_serving_never_imports_rich_nor_parses_the_price_map(
    tmp_path: Path, sim: ServerThread
) -> None:
    """The banner is written as rich would write it off a terminal, without rich (2.7 MiB);
    litellm's map is read by a forked child, which hands over the entries served (5.6 MiB)."""
    modules, statuses = _modules_after_serving(tmp_path, sim.url)
    assert statuses == [200, 200, 404]
    assert "gateway.app" in modules
    assert not {m for m in modules if m == "rich" or m.startswith("rich.")}
    assert "map-parses:0" in modules  # the child parsed it; this process never did
    banner = (tmp_path / "stdout.txt").read_text(encoding="utf-8").splitlines()
    assert banner[0].startswith("Farebox ") and " serving on http://127.0.0.1:" in banner[0]
    assert "OPEN MODE: no FAREBOX_ADMIN_KEY" in banner[2]  # the markup's tags left out
    assert "  models: chat" in banner


def test_a_sqlite_gateway_never_imports_asyncpg_or_the_postgresql_dialect(
    tmp_path: Path, sim: ServerThread
) -> None:
    modules, statuses = _modules_after_serving(tmp_path, sim.url)
    assert statuses == [200, 200, 404]
    assert "gateway.app" in modules and "aiosqlite" in modules  # it served, on SQLite
    assert "sqlalchemy.dialects.sqlite" in modules
    assert not {m for m in modules if m == "asyncpg" or m.startswith("asyncpg.")}
    assert not {m for m in modules if m.startswith("sqlalchemy.dialects.postgresql")}
