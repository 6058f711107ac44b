"""The ledger's tables are Core `Table`s; the ORM classes mapped onto them come on first use.

The declarative mapping (~50 ms of CPU at import) is built only where a class is asked
for, so code that reads and writes the tables (`models.REQUESTS`, ...) never pays it; the
classes, once asked for, are the same mapped classes over the same tables (their DDL
against the migrations: test_ledger_engine.py's `diff == []`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import inspect, select

from gateway.ledger import models

# gateway.ledger's package init imports the writer's modules, which read tables through
# the classes still (`RequestRow.__table__`): this imports models.py without them.
FRESH = """
import json, sys, types
import gateway
package = types.ModuleType("gateway.ledger")
package.__path__ = [gateway.__path__[0] + "/ledger"]
sys.modules["gateway.ledger"] = package
import gateway.ledger.models as m
tables = sorted(m.METADATA.tables)
mapped_before = "gateway.ledger.orm" in sys.modules
row = m.RequestRow
print(json.dumps([mapped_before, "gateway.ledger.orm" in sys.modules, tables, row.__name__]))
"""


def test_importing_the_tables_maps_no_orm_class() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, check=True, timeout=60
    )
    before, after, tables, name = json.loads(done.stdout)
    assert before is False  # the tables alone: no ORM class mapped
    assert after is True and name == "RequestRow"
    assert "requests" in tables and "tasks" in tables and "audit_log" in tables


def test_the_orm_classes_are_mapped_onto_the_tables() -> None:
    pairs = {
        "RequestRow": models.REQUESTS,
        "TaskRow": models.TASKS,
        "HourlyRollupRow": models.ROLLUP_HOURLY,
        "DailyRollupRow": models.ROLLUP_DAILY,
        "HourlyStepRollupRow": models.ROLLUP_STEPS_HOURLY,
        "DailyStepRollupRow": models.ROLLUP_STEPS_DAILY,
        "HourlyPrefixRollupRow": models.ROLLUP_PREFIX_HOURLY,
        "DailyPrefixRollupRow": models.ROLLUP_PREFIX_DAILY,
        "ApiKeyRow": models.API_KEYS,
        "AuditRow": models.AUDIT_LOG,
    }
    assert models.Base.metadata is models.METADATA
    assert set(models.METADATA.tables.values()) == set(pairs.values())
    for name, table in pairs.items():
        mapped = getattr(models, name)
        assert mapped.__table__ is table
        assert inspect(mapped).local_table is table
        assert [c.key for c in inspect(mapped).columns] == [c.name for c in table.columns]
    query = select(models.RequestRow).where(models.REQUESTS.c.team == "t")  # an ORM select
    assert "FROM requests" in str(query) and "requests.dropped_params" in str(query)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchRow"):
        models.NoSuchRow  # noqa: B018
