"""Records: validation at construction and an exact JSON round-trip (the spool format)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import orjson
import pytest
from ledger_helpers import record

from gateway.ledger.records import TOKEN_FIELDS, RequestRecord, TaskFinish
from gateway.ledger.spool import decode, encode
from gateway.usage import Usage


def test_request_record_round_trips_exactly_through_json() -> None:
    original = record(
        cost_input=Decimal("0.0000001234"),
        cost_total=Decimal("1E-10"),
        decode_tps=87.123456789,
        task_step="plan",
        step_kind="reasoning",
        caller="key_abc",
        estimated=True,
        expected_cached_tokens=512,
        prefix_status="hit",
        created_at=datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    )
    wire = orjson.dumps(original.to_json())
    restored = RequestRecord.from_json(orjson.loads(wire))
    assert restored == original
    # Same digits and exponent, not merely equal in value.
    assert restored.cost_input.as_tuple() == Decimal("0.0000001234").as_tuple()
    assert restored.cost_total.as_tuple() == Decimal("1E-10").as_tuple()
    assert decode(encode(original)) == original


def test_json_uses_strings_for_money_and_iso_for_time() -> None:
    data = record(cost_total=Decimal("0.10")).to_json()
    assert data["cost_total"] == "0.1000000000"
    assert data["created_at"].endswith("+00:00")


def test_task_finish_round_trips() -> None:
    finish = TaskFinish("t", "success", datetime(2025, 1, 1, tzinfo=UTC))
    assert decode(encode(finish)) == finish


def test_float_money_is_refused() -> None:
    with pytest.raises(TypeError, match="never float"):
        record(cost_total=0.1)


def test_money_is_rounded_once_to_ten_places_half_even() -> None:
    assert record(cost_total=Decimal("0.00000000005")).cost_total == Decimal(0)
    assert record(cost_total=Decimal("0.00000000015")).cost_total == Decimal("0.0000000002")
    assert record(cost_total=Decimal("1.23456789012")).cost_total == Decimal("1.2345678901")


def test_int_money_becomes_decimal() -> None:
    assert record(cost_total=2).cost_total == Decimal(2)


def test_naive_datetime_is_refused_and_other_zones_become_utc() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        record(created_at=datetime(2025, 1, 1))
    paris = timezone(timedelta(hours=1))
    assert record(created_at=datetime(2025, 1, 1, 1, tzinfo=paris)).created_at == datetime(
        2025, 1, 1, tzinfo=UTC
    )


@pytest.mark.parametrize("outcome", ["", "open", "x" * 65])
def test_invalid_outcomes_are_refused(outcome: str) -> None:
    with pytest.raises(ValueError, match="outcome"):
        TaskFinish("t", outcome)


def test_with_usage_copies_every_token_count() -> None:
    usage = Usage(100, 40, 10, 5, 30, 20, estimated=True)
    original = record()
    copied = original.with_usage(usage)
    assert [getattr(copied, name) for name in TOKEN_FIELDS] == [100, 40, 10, 5, 30, 20]
    assert copied.estimated and copied.id == original.id


def test_unknown_json_keys_from_another_version_are_ignored() -> None:
    data = record().to_json() | {"added_in_a_later_version": 1}
    assert RequestRecord.from_json(data).task_id == "task-1"
