"""The SQLite flush's rows built inline are the rows the generic encoders build.

- `sqlite_money` (`amount * 1E+10`) is `int(amount.scaleb(10))` for every amount the
  ledger books, zeros of any exponent and None included.
- `batch._sqlite_request_row` (money and flags inline) gives the tuple that
  `store._sqlite_request_encoders` gives, flags as bools, None, 0 and 1; any other flag
  value still meets SQLAlchemy's processor and its error.
- `batch._task_row_of_request` (a one-record task's row from its request row) gives the
  tuple `batch._single_task_row` builds from the record, tasked and untasked.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.ledger import batch, store
from gateway.ledger.driver import prepare, sqlite_money
from gateway.ledger.engine import make_engine
from gateway.ledger.records import MONEY_LIMIT, MONEY_QUANTUM, RequestRecord

DIALECT = make_engine("sqlite+aiosqlite:///:memory:").dialect
AMOUNTS = st.decimals(
    min_value=-MONEY_LIMIT + MONEY_QUANTUM,
    max_value=MONEY_LIMIT - MONEY_QUANTUM,
    allow_nan=False,
    allow_infinity=False,
    places=10,
)


@settings(max_examples=500, deadline=None)
@given(amount=AMOUNTS)
def test_sqlite_money_is_scaleb(amount: Decimal) -> None:
    quantized = amount.quantize(MONEY_QUANTUM)
    assert sqlite_money(quantized) == int(quantized.scaleb(10))


@pytest.mark.parametrize("text", ["0", "0E-10", "-0E-10", "0.0000000001", "99999999.9999999999"])
def test_sqlite_money_edges(text: str) -> None:
    assert sqlite_money(Decimal(text)) == int(Decimal(text).scaleb(10))
    assert sqlite_money(None) is None


def _record(**values: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "request_id": "req-0123456789abcdef0123456789abcdef",
        "task_id": "task-0123456789abcdef0123456789abcdef",
        "team": "t",
        "project": "p",
        "model_alias": "m",
        "created_at": datetime(2026, 12, 2, 1, 2, 3, 456789, tzinfo=UTC),
    }
    return RequestRecord(**(base | values))


def _generic_row(record: RequestRecord) -> tuple[Any, ...]:
    values = list(store._request_values(record))
    for position, encode in store._sqlite_request_encoders(DIALECT):
        values[position] = encode(values[position])
    return tuple(values)


FLAGS = st.sampled_from([True, False, None, 0, 1])


@settings(max_examples=300, deadline=None)
@given(
    costs=st.lists(AMOUNTS, min_size=7, max_size=7),
    lost=st.none() | AMOUNTS,
    streamed=FLAGS,
    suspect=FLAGS,
    confirmed=FLAGS,
    tps=st.none() | st.floats(allow_nan=False),
)
def test_request_row_inline_equals_encoders(
    costs: list[Decimal], lost: Decimal | None, streamed: Any, suspect: Any, confirmed: Any,
    tps: float | None,
) -> None:  # fmt: skip
    record = _record(
        cost_input=costs[0], cost_cached=costs[1], cost_cache_write=costs[2],
        cost_output=costs[3], cost_reasoning=costs[4], cost_total=costs[5],
        prefix_lost_usd=lost, streamed=streamed, usage_suspect=suspect,
        tier_confirmed=confirmed, decode_tps=tps,
    )  # fmt: skip
    row = batch._sqlite_request_row(DIALECT)(record, batch.TimeText()[record.created_at])
    assert row == _generic_row(record)
    assert [type(value) for value in row] == [type(value) for value in _generic_row(record)]


@pytest.mark.parametrize("flag", [2, "yes"])
def test_request_row_refuses_what_the_processor_refuses(flag: Any) -> None:
    record = _record(streamed=flag)
    with pytest.raises((TypeError, ValueError)) as generic:
        _generic_row(record)
    with pytest.raises(generic.type):
        batch._sqlite_request_row(DIALECT)(record, "2026-12-02 01:02:03.456789")


@pytest.mark.parametrize("untasked", [True, False])
@pytest.mark.parametrize("ttft", [None, 0, 17])
def test_task_row_of_request_equals_single_task_row(untasked: bool, ttft: int | None) -> None:
    record = _record(
        cost_input=Decimal("0.0000120000"), cost_output=Decimal("0.00016"),
        cost_total=Decimal("0.000172"), prompt_tokens=6, completion_tokens=16,
        cached_tokens=3, reasoning_tokens=2, ttft_ms=ttft,
    )  # fmt: skip
    if not untasked:
        record = dataclasses.replace(record, task_id="my-agent-run")
    times = batch.TimeText()
    prepared = prepare(DIALECT, store._task_upsert("sqlite"), batch.TASK_KEYS)
    make = batch._task_row_of_request(prepared)
    assert make is not None
    request_row = batch._sqlite_request_row(DIALECT)(record, times[record.created_at])
    expected = batch._single_task_row(DIALECT, prepared, times)(record)
    assert make(request_row, untasked) == expected
    assert [type(value) for value in make(request_row, untasked)] == [
        type(value) for value in expected
    ]
