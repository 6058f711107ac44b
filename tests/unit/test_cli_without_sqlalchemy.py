"""A command that never opens the ledger database never imports SQLAlchemy.

`gateway.ledger`'s names come on first use (PEP 562), the report's rows are plain
dataclasses (`gateway.ledger.read_rows`), and `farebox report` imports the database's
modules only on the path that reads it: SQLAlchemy was ~0.6 s of every `farebox` start's
~1.2 s of CPU (bench/cli_start.py).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gateway.ledger

# Runs a command line as `python -m gateway` does; prints, after it, whether it loaded SQLAlchemy.
PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print(json.dumps("sqlalchemy" in sys.modules), file=sys.stderr))
sys.argv = ["farebox", *sys.argv[1:]]
runpy.run_module("gateway", run_name="__main__", alter_sys=True)
"""


def _farebox(*argv: str, tmp_path: Path) -> tuple[int, str, bool]:
    env = {**os.environ, "FAREBOX_DATA_DIR": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    *said, loaded = done.stderr.splitlines()
    return done.returncode, done.stdout + "\n".join(said), json.loads(loaded)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["keys", "--help"],
        ["policy", "--help"],
        ["cost", "--help"],
        ["report", "--help"],
    ],
)
def test_help_loads_no_sqlalchemy(argv: list[str], tmp_path: Path) -> None:
    code, said, loaded = _farebox(*argv, tmp_path=tmp_path)
    assert code == 0 and "Usage" in said
    assert loaded is False


def test_a_remote_report_loads_no_sqlalchemy(tmp_path: Path) -> None:
    argv = ["report", "--url", "http://127.0.0.1:9", "--api-key", "fbx-x", "--json"]
    code, said, loaded = _farebox(*argv, tmp_path=tmp_path)
    assert code == 2 and "cannot reach http://127.0.0.1:9" in said
    assert loaded is False


def test_a_local_report_still_reads_the_ledger_path(tmp_path: Path) -> None:
    # the database's path imports what it needs: a missing ledger is named, not a traceback
    code, said, loaded = _farebox("report", tmp_path=tmp_path)
    assert code == 2 and "no ledger at" in said and "Traceback" not in said
    assert loaded is True


def test_the_records_and_the_config_load_no_sqlalchemy() -> None:
    probe = (
        "import sys, gateway.ledger.records, gateway.config, gateway.tenants, "
        "gateway.ledger.read_rows; print('sqlalchemy' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "False"


def test_every_exported_name_is_its_home_modules_object() -> None:
    homes = {
        "engine": {"LedgerURLError", "async_url", "make_engine", "migrate"},
        "queries": {"export_csv", "get_task", "spend", "task_cost_stats"},
        "read_rows": {"SpendRow", "TaskCostStats", "TaskDetail", "TaskSummary"},
        "records": {"FinishedTask", "RequestRecord", "TaskFinish"},
        "store": {"close_idle_tasks"},
        "writer": {"LedgerWriter", "OnTaskFinished", "WriterConfig", "WriterStats"},
    }
    assert sorted(gateway.ledger.__all__) == sorted(set().union(*homes.values()))
    for module, names in homes.items():
        home = importlib.import_module(f"gateway.ledger.{module}")
        for name in names:
            assert getattr(gateway.ledger, name) is getattr(home, name), name
    # the queries module still names the rows it returns
    queries = importlib.import_module("gateway.ledger.queries")
    assert queries.SpendRow is gateway.ledger.SpendRow


def test_a_submodule_and_an_unknown_name() -> None:
    from gateway.ledger import store

    assert store is importlib.import_module("gateway.ledger.store")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = gateway.ledger.nothing_here
    with pytest.raises(ImportError):
        exec("from gateway.ledger import nothing_here", {})
    assert "LedgerWriter" in dir(gateway.ledger)
