"""Pure helpers of the read side: nearest-rank percentiles and CSV export."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from gateway.ledger import SpendRow, TaskCostStats, export_csv
from gateway.ledger.queries import percentile

D = Decimal


def test_percentile_is_nearest_rank() -> None:
    values = [D(k) for k in range(1, 21)]
    assert [percentile(values, p) for p in (1, 5, 50, 95, 100)] == [D(1), D(1), D(10), D(19), D(20)]
    assert percentile([D("0.3")], 95) == D("0.3")


def test_export_csv_writes_plain_decimals_and_empty_cells() -> None:
    row = SpendRow(None, 1, 10, 0, 0, 0, 5, 0, D("1E-10"), D(0), D(0), D(0), D(0), D("1E-10"))
    text = export_csv([row])
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert parsed == [
        {
            "group": "", "request_count": "1", "prompt_tokens": "10", "cached_tokens": "0",
            "cache_write_tokens": "0", "cache_write_1h_tokens": "0", "completion_tokens": "5",
            "reasoning_tokens": "0", "cost_input": "0.0000000001", "cost_cached": "0",
            "cost_cache_write": "0", "cost_output": "0", "cost_reasoning": "0",
            "cost_total": "0.0000000001",
        }
    ]  # fmt: skip


def test_export_csv_of_no_rows_keeps_the_header() -> None:
    assert export_csv([], SpendRow).startswith("group,request_count,prompt_tokens,")
    assert export_csv([]) == ""


def test_export_csv_of_task_cost_stats() -> None:
    stats = TaskCostStats("t", 2, D("3"), D("1"), D("2"), D("2"), D("0.5"), D(0), D("0.25"))
    assert export_csv([stats]).splitlines() == [
        "group,finished_tasks,cost_total,cost_p50,cost_p95,cost_max,output_share,"
        "reasoning_share,cache_write_share",
        "t,2,3,1,2,2,0.5,0,0.25",
    ]
