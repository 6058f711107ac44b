"""The request path's scan work is bounded by what it costs, and nothing it keeps grows unbounded."""

from __future__ import annotations

import random

import orjson

from gateway.prefix import rule_for, segments, split_request
from gateway.prefix.detectors import (
    HOT_PATH_SCAN_BUDGET,
    MATCH_COST_BYTES,
    MAX_TRIES_PER_SCAN,
    WINDOW_BYTES,
    ScanBudget,
    ScanCache,
    scan_bytes,
    scan_request,
)
from gateway.prefix.patterns import Hit
from tests.unit.prefix.test_prefix_locate import needs_native


def _number_table(size: int, seed: int = 7) -> str:
    """Two-digit numbers the locator flags ("12 21": a day, then maybe a year) and the regex rejects."""
    rng = random.Random(seed)
    return " ".join(str(rng.randint(10, 29)) for _ in range(size // 3))


def _request(content: str) -> segments.RequestSegments:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": content}, {"role": "user", "content": "q"}],
    }
    return split_request(orjson.loads(orjson.dumps(body)), rule_for("openai"))


@needs_native
def test_rejected_candidates_use_up_the_budget() -> None:
    # 2 MiB of candidates the regex rejects: once free, so the whole table was scanned on
    # the event loop (683 ms); now the first window or two spend the request's budget.
    request = _request(_number_table(2 * 1024 * 1024))
    cache = ScanCache()
    scan_request(_request("hello"), cache)  # the header segments, shared by both requests
    known = len(cache)
    budget = ScanBudget(HOT_PATH_SCAN_BUDGET)
    findings, unscanned = scan_request(request, cache, budget)
    assert budget.exhausted and findings == [] and unscanned == ["messages[0]"]
    assert len(cache) - known == 1  # one 32 KiB window of the 64: its tries spent the budget
    scan_request(request, cache, ScanBudget(HOT_PATH_SCAN_BUDGET))  # the next request goes on
    assert len(cache) - known == 2


@needs_native
def test_one_scan_stops_after_its_most_tries_on_the_request_path() -> None:
    table = _number_table(WINDOW_BYTES // 2)
    data = orjson.dumps(f"{table} created 2026-03-12T14:03:07Z")
    assert len(data) < WINDOW_BYTES
    budget = ScanBudget(1 << 40)
    findings, _ = scan_request(
        _request(f"{table} created 2026-03-12T14:03:07Z"), ScanCache(), budget
    )
    assert findings == []  # the timestamp lies past the most tries: the rest is data
    spent = (1 << 40) - (budget.remaining or 0)
    assert 0 < spent - MAX_TRIES_PER_SCAN * MATCH_COST_BYTES < WINDOW_BYTES  # the tries, the bytes
    # Without a limit (lint, the offline tools) everything is read.
    assert [h.kind for h in scan_bytes(data)] == ["timestamp"]


def test_message_names_kept_for_the_process_are_bounded() -> None:
    count = segments._NAMES_KEPT + 1000
    body = {"model": "m", "messages": [{"role": "user", "content": str(i)} for i in range(count)]}
    request = split_request(body, rule_for("openai"))
    names = request.names()[request.header_count :]
    assert names == [f"messages[{i}]" for i in range(count)]
    assert len(segments._NAMES) == segments._NAMES_KEPT


def test_scan_cache_is_bounded_in_hits_held() -> None:
    cache = ScanCache(max_entries=1000, max_hits=250)
    hits = tuple(Hit(i, i + 1, "date") for i in range(100))
    for key in range(10):
        cache.put(bytes([key]), hits)
    assert len(cache) == 2  # 200 hits held; a third entry would pass 250
    assert cache.get(bytes([9])) == hits and cache.get(bytes([0])) is None
    cache.put(bytes([9]), ())  # replacing an entry gives its hits back
    cache.put(b"a", hits)
    assert len(cache) == 3
