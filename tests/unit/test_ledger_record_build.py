"""A request's ledger row built on the hot path is the row the checking constructor builds.

- `ledger_record` with costs from `BookedCost.of` builds through `RoundedRecord`, which does
  not round the costs again: the result is a frozen `RequestRecord`, equal field by field
  to `RequestRecord(...)` of the same values and to the row built from an unrounded
  `BookedCost` of the same amounts, with the same spool line (the same digits).
- Costs that did not come from `BookedCost.of` are still rounded by `RequestRecord`.
- `new_row_id`: version 4 UUIDs, unique across threads and forked processes.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import parse_config
from gateway.ledger.records import RequestRecord, RoundedRecord, new_row_id
from gateway.ledger.spool import decode, encode
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.identify import identify
from gateway.pipeline.parse import parse
from gateway.pipeline.record import BookedCost, ledger_record
from gateway.pricing import COMPONENTS, ModelPrice, PriceSheet, cost_of
from gateway.usage import Usage

CONFIG = parse_config("models:\n  m:\n    model: up\n    base_url: http://u:p@h/v1?k=1\n")
BODY = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'


def _ctx(usage: Usage, input_price: str, output_price: str) -> RequestContext:
    ctx = RequestContext(raw_body=BODY, headers={"x-farebox-team": "t1"}, request_id="req-1")
    parse(ctx)
    identify(ctx)
    decide(ctx, CONFIG)
    sheet = PriceSheet(input=Decimal(input_price), output=Decimal(output_price))
    ctx.usage = usage
    ctx.cost = cost_of(ModelPrice(model="m", standard={0: sheet}), usage)
    ctx.status_code, ctx.tier_served = 200, "standard"
    return ctx


def _values(record: RequestRecord) -> dict[str, object]:
    return {spec.name: getattr(record, spec.name) for spec in dataclasses.fields(record)}


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.integers(0, 10**9),
    completion=st.integers(0, 10**7),
    cached=st.integers(0, 1000),
    input_price=st.sampled_from(["0", "0.000001", "0.0000033", "1.25e-7", "3", "123456.789"]),
    output_price=st.sampled_from(["0", "0.000002", "0.00001501", "7", "9999999"]),
)
def test_a_row_from_booked_costs_is_the_checked_row(
    prompt: int, completion: int, cached: int, input_price: str, output_price: str
) -> None:
    usage = Usage(prompt_tokens=prompt + cached, cached_tokens=cached, completion_tokens=completion)
    ctx = _ctx(usage, input_price, output_price)
    booked = BookedCost.of(ctx.cost)
    assert booked.rounded
    row = ledger_record(ctx, booked, attempt=1)
    assert type(row) is RequestRecord
    # The checking constructor, given the same values, rounds nothing differently.
    checked = RequestRecord(**_values(row))  # type: ignore[arg-type]
    assert checked == row and encode(checked) == encode(row)
    # The same amounts in a BookedCost not built by `of` go through the checks.
    unrounded = BookedCost(dict(booked.components))
    assert not unrounded.rounded
    other = ledger_record(ctx, unrounded, attempt=1)
    same = dataclasses.replace(other, id=row.id, created_at=row.created_at)
    assert same == row and encode(same) == encode(row)
    assert row.cost_total == sum(booked.components.values()) == booked.total
    assert decode(encode(row)) == row
    assert row.backend == "http://h/v1" and row.team == "t1" and row.attempt == 1


def test_ledger_record_sets_every_field_of_the_row() -> None:
    """`ledger_record` fills an open row a store per field: none may be left unset."""
    ctx = _ctx(Usage(prompt_tokens=5, completion_tokens=2), "0.000001", "0.000002")
    for booked in (BookedCost.of(ctx.cost), BookedCost(dict(BookedCost.of(ctx.cost).components))):
        row = ledger_record(ctx, booked)
        unset = [spec.name for spec in dataclasses.fields(row) if not hasattr(row, spec.name)]
        assert unset == [] and type(row) is RequestRecord
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.team = "other"  # type: ignore[misc]


def test_a_row_without_a_price_books_zero_to_ten_places() -> None:
    ctx = _ctx(Usage(prompt_tokens=5, completion_tokens=2), "0", "0")
    ctx.cost = None
    row = ledger_record(ctx, BookedCost.of(None))
    for name in ("cost_input", "cost_cached", "cost_output", "cost_total"):
        assert str(getattr(row, name)) == "0E-10"
    assert encode(row) == encode(RequestRecord(**_values(row)))  # type: ignore[arg-type]


def test_costs_not_from_booked_cost_of_are_still_rounded() -> None:
    ctx = _ctx(Usage(prompt_tokens=5, completion_tokens=2), "0.000001", "0.000002")
    amounts = dict.fromkeys(COMPONENTS, Decimal(0))
    amounts |= {"input": Decimal("0.1"), "output": Decimal("0.123456789012345")}
    row = ledger_record(ctx, BookedCost(amounts))
    assert str(row.cost_input) == "0.1000000000"
    assert row.cost_output == Decimal("0.1234567890")
    assert row.cost_total == Decimal("0.2234567890")  # the sum, then rounded: half-even


def test_a_rounded_record_is_a_frozen_request_record() -> None:
    lost = Decimal("0.00000000015")  # rounded half-even, as RequestRecord rounds it
    at = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    row = RoundedRecord("r", "t", "team", "p", "m", prefix_lost_usd=lost, created_at=at)
    assert type(row) is RequestRecord and isinstance(row, RequestRecord)
    assert row.created_at == at and row.created_at.tzinfo is UTC
    assert str(row.prefix_lost_usd) == "2E-10" and str(row.cost_total) == "0E-10"
    assert row == RequestRecord("r", "t", "team", "p", "m", prefix_lost_usd=lost,
                                created_at=at, id=row.id)  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.team = "other"  # type: ignore[misc]
    assert dataclasses.replace(row, team="x").team == "x"
    with pytest.raises(ValueError, match="timezone-aware"):
        RoundedRecord("r", "t", "team", "p", "m", created_at=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="out of range"):
        RoundedRecord("r", "t", "team", "p", "m", prefix_lost_usd=Decimal("1e12"))


def test_row_ids_are_unique_version_4_uuids_across_threads() -> None:
    drawn: list[list[str]] = [[] for _ in range(8)]

    def draw(into: list[str]) -> None:
        into.extend(new_row_id() for _ in range(20_000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [row_id for into in drawn for row_id in into]
    assert len(set(ids)) == len(ids) == 160_000
    for row_id in ids[::997]:
        parsed = uuid.UUID(row_id)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == row_id


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_worker_draws_other_ids_than_its_parent() -> None:
    before = new_row_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker forked from the same imported module
        os.close(read)
        os.write(write, "\n".join(new_row_id() for _ in range(1000)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split("\n")
    os.waitpid(pid, 0)
    parent = [new_row_id() for _ in range(1000)]
    assert len(child) == 1000 and not set(child) & {before, *parent}
    # Each process's ids share its own prefix, and the two prefixes differ.
    assert child[0][:24] != parent[0][:24] and parent[0][:24] == before[:24]
    for row_id in (child[0], child[-1]):
        assert uuid.UUID(row_id).version == 4
