"""A stream's latency histograms observed through one bundle and one bucket search per
pair (`record._latency_series`, `metrics.observe_alike`) give the exposition
prometheus_client's own `observe` gives; a stream's tier is settled once when the usage
chunk priced it (`finish.price_now`), again only if what it was settled from changed."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gateway.config import parse_config
from gateway.metrics import LATENCY_BUCKETS, Metrics, observe, observe_alike
from gateway.pipeline import finish
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.identify import identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.parse import parse
from gateway.pipeline.record import BookedCost, observe_metrics
from gateway.pricing import ModelPrice, PriceSheet, cost_of
from gateway.usage import Usage

VALUES = [0.0, 0.001, 0.05, 0.0500001, 0.3, 7.9, 120, 121.5, 1e9, -0.5, math.nan]


def _histograms() -> tuple[CollectorRegistry, Histogram, Histogram]:
    registry = CollectorRegistry()
    by_model = Histogram("a_seconds", "a", ["model"], buckets=LATENCY_BUCKETS, registry=registry)
    by_backend = Histogram(
        "b_seconds", "b", ["backend", "tier"], buckets=LATENCY_BUCKETS, registry=registry
    )
    return registry, by_model, by_backend


def _exposition(registry: CollectorRegistry) -> list[bytes]:
    """The registry's text without `_created` lines (each child's own creation time)."""
    return [line for line in generate_latest(registry).splitlines() if b"_created" not in line]


def test_observe_alike_is_observe_for_each_child() -> None:
    alike, a1, b1 = _histograms()
    plain, a2, b2 = _histograms()
    pair = (a1.labels("m"), b1.labels("http://h/v1", "standard"))
    for value in VALUES:
        observe_alike(pair, value)
        a2.labels("m").observe(value)
        b2.labels("http://h/v1", "standard").observe(value)
    assert _exposition(alike) == _exposition(plain)


def test_observe_alike_with_values_prometheus_keeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value class without a plain float (a worker's file) goes through `observe`."""
    import gateway.metrics as metrics_module

    monkeypatch.setattr(metrics_module, "_PLAIN", type(None))
    alike, a1, b1 = _histograms()
    plain, a2, b2 = _histograms()
    for value in VALUES[:-1]:
        observe_alike((a1.labels("m"), b1.labels("x", "y")), value)
        observe(a2.labels("m"), value)
        observe(b2.labels("x", "y"), value)
    assert _exposition(alike) == _exposition(plain)


def _streamed() -> tuple[RequestContext, BookedCost]:
    config = parse_config("models:\n  m:\n    model: up\n    base_url: http://h/v1\n")
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}'
    ctx = RequestContext(raw_body=body, headers={}, request_id="req-1")
    parse(ctx)
    identify(ctx)
    decide(ctx, config)
    ctx.usage = Usage(prompt_tokens=20, completion_tokens=16)
    sheet = PriceSheet(input=Decimal(1), output=Decimal(2))
    ctx.cost = cost_of(ModelPrice(model="m", standard={0: sheet}), ctx.usage)
    ctx.status_code, ctx.tier_served = 200, "standard"
    timings = ctx.timings
    timings.upstream_sent = timings.received + 0.001
    timings.first_token = timings.upstream_sent + 0.002
    timings.first_answer_token = timings.upstream_sent + 0.0731
    timings.last_token = timings.first_token + 0.25
    timings.finished = timings.last_token + 0.0001
    return ctx, BookedCost.of(ctx.cost)


def _latency_lines(metrics: Metrics) -> list[bytes]:
    names = (b"first_token", b"first_answer_token", b"decode_tokens")
    lines = _exposition(metrics.registry)
    return [line for line in lines if any(name in line for name in names)]


def test_a_streams_latencies_are_what_prometheus_observe_gives() -> None:
    ctx, booked = _streamed()
    fast, slow = Metrics(), Metrics()
    for _ in range(3):
        observe_metrics(fast, ctx, booked)
    timings = ctx.timings
    assert timings.upstream_sent is not None and timings.first_token is not None
    assert timings.first_answer_token is not None
    ttft = (timings.first_token - timings.upstream_sent) * 1000.0 / 1000
    ttfat = (timings.first_answer_token - timings.upstream_sent) * 1000.0 / 1000
    speed = 15 / (timings.last_token - timings.first_token)  # type: ignore[operator]
    for _ in range(3):
        slow.ttft.labels(model="m").observe(ttft)
        slow.backend_ttft.labels("http://h/v1", "standard").observe(ttft)
        slow.ttfat.labels(model="m").observe(ttfat)
        slow.backend_ttfat.labels("http://h/v1", "standard").observe(ttfat)
        slow.decode_speed.labels(model="m").observe(speed)
    lines = _latency_lines(fast)
    assert lines == _latency_lines(slow)
    assert any(b'_count{model="m"} 3.0' in line for line in lines)


def test_a_whole_reply_shows_no_latency_series() -> None:
    ctx, booked = _streamed()
    timings = ctx.timings
    timings.first_token = timings.first_answer_token = timings.last_token = None
    metrics = Metrics()
    observe_metrics(metrics, ctx, booked)
    assert not [line for line in _latency_lines(metrics) if b"{" in line]


def _counts(metrics: Metrics) -> list[bytes]:
    return sorted(line for line in _latency_lines(metrics) if b"_count{" in line)


def test_a_stream_not_sent_upstream_observes_its_decode_speed_only() -> None:
    ctx, booked = _streamed()
    ctx.timings.upstream_sent = None
    metrics = Metrics()
    observe_metrics(metrics, ctx, booked)
    assert _counts(metrics) == [b'farebox_decode_tokens_per_second_count{model="m"} 1.0']


def test_a_stream_that_only_thought_shows_no_first_answer_series() -> None:
    ctx, booked = _streamed()
    ctx.timings.first_answer_token = None
    metrics = Metrics()
    observe_metrics(metrics, ctx, booked)
    assert _counts(metrics) == [
        b'farebox_backend_time_to_first_token_seconds_count{backend="http://h/v1",'
        b'tier="standard"} 1.0',
        b'farebox_decode_tokens_per_second_count{model="m"} 1.0',
        b'farebox_time_to_first_token_seconds_count{model="m"} 1.0',
    ]
    ctx.timings.first_answer_token = ctx.timings.first_token  # then one that answered
    observe_metrics(metrics, ctx, booked)
    assert b'farebox_time_to_first_answer_token_seconds_count{model="m"} 1.0' in _counts(metrics)


def test_the_tier_is_settled_once_unless_what_it_read_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse_config(
        "models:\n  m:\n    provider: openai\n    model: up\n"
        "    base_url: https://api.openai.com/v1\n"
    )
    ctx, _ = _streamed()
    ctx.route = config.models["m"]  # the tier the upstream names is the one billed
    ctx.tier_served = None
    settled: list[str | None] = []
    real = finish.settle_tier

    def counting(ctx: RequestContext, meter: Meter) -> None:
        settled.append(meter.service_tier)
        real(ctx, meter)

    monkeypatch.setattr(finish, "settle_tier", counting)
    meter = Meter(service_tier="default")
    finish.settle_tier(ctx, meter)  # what `price_now` does first
    meter.tier_read = finish._tier_inputs(ctx, meter)
    finish.settle(ctx, meter, None, False)
    assert settled == ["default"] and ctx.tier_served == "standard" and ctx.tier_confirmed

    meter.service_tier = "priority"  # a chunk after the usage named another tier
    finish.settle(ctx, meter, None, False)
    assert settled == ["default", "priority"] and ctx.tier_served == "priority"

    other = RequestContext(raw_body=ctx.raw_body, headers={}, route=ctx.route)
    finish.settle(other, meter, None, False)  # another attempt's context: settled for it
    assert settled[-1] == "priority" and len(settled) == 3 and other.tier_served == "priority"
    assert Meter().tier_read is None
