"""`metrics.add` and `metrics.observe` leave the exposition text `inc` and `observe` leave."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

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
