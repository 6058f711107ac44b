"""`metrics.add` and `metrics.observe` leave the exposition text `inc` and `observe` leave."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

from gateway import metrics
from gateway.metrics import LATENCY_BUCKETS, add, observe

AMOUNTS = [0.0, 0.05, 0.050001, 0.1, 0.3, 1, 1.5, 59.9, 60, 119.99, 120, 121, 1e9, math.inf, -0.5]


def _pair() -> tuple[CollectorRegistry, Counter, Histogram]:
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["model"], registry=registry)
    histogram = Histogram("h", "h", ["model"], buckets=LATENCY_BUCKETS, registry=registry)
    return registry, counter, histogram


def test_same_exposition_as_prometheus_client() -> None:
    reference, ref_counter, ref_histogram = _pair()
    fast, fast_counter, fast_histogram = _pair()
    for amount in AMOUNTS:
        ref_histogram.labels("m").observe(amount)
        observe(fast_histogram.labels("m"), amount)
        if amount >= 0:
            ref_counter.labels("m").inc(amount)
            add(fast_counter.labels("m"), amount)
    observe(fast_histogram.labels("m"), math.nan)
    ref_histogram.labels("m").observe(math.nan)
    assert _exposed(fast) == _exposed(reference)
    assert 'h_bucket{le="0.05",model="m"} 3.0' in _exposed(fast)  # -0.5, 0, 0.05


def _exposed(registry: CollectorRegistry) -> list[str]:
    """The exposition's lines but the `_created` times (the two registries' own)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_a_negative_count_is_refused_as_inc_refuses_it() -> None:
    _, counter, _ = _pair()
    with pytest.raises(ValueError):
        add(counter.labels("m"), -1)


def test_in_process_values_are_added_to_without_their_lock() -> None:
    """prometheus_client's in-process value is still a float beside a lock: the fast path
    is taken (if a new version changes that shape, `add` falls back to `inc`: look here)."""
    _, counter, histogram = _pair()
    child = counter.labels("m")
    assert type(child._value) is metrics._PLAIN
    add(child, 2.5)
    add(child, 0)
    observe(histogram.labels("m"), 0.3)
    assert child._value.get() == 2.5
    assert histogram.labels("m")._sum.get() == 0.3
    assert not child._value._lock.locked()


def test_worker_values_still_go_through_inc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `--workers` each value lives in the worker's file: `add` and `observe` write
    it through `inc`, and the supervisor's sum of the files shows them."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
    try:
        _, counter, histogram = _pair()
        assert type(counter.labels("m")._value) is not metrics._PLAIN
        add(counter.labels("m"), 3)
        add(counter.labels("m"), 0.5)
        observe(histogram.labels("m"), 0.3)
        observe(histogram.labels("m"), 200)
        summed = CollectorRegistry()
        MultiProcessCollector(summed)
        text = generate_latest(summed).decode()
    finally:
        values.close_all_multiprocess_files()
    assert 'c_total{model="m"} 3.5' in text
    assert 'h_sum{model="m"} 200.3' in text
    assert 'h_bucket{le="0.5",model="m"} 1.0' in text
    assert 'h_bucket{le="+Inf",model="m"} 2.0' in text
