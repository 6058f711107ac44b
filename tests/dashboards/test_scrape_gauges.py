"""The gauges sampled at scrape time: each breaker's state, and GPU prices across reloads."""

from __future__ import annotations

from decimal import Decimal

from gateway.metrics import Metrics
from gateway.policy.breaker import BreakerBoard
from gateway.policy.schema import BreakerSettings


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_breaker_states_follow_the_breakers() -> None:
    now = [0.0]
    board = BreakerBoard(clock=lambda: now[0])
    settings = BreakerSettings(failures=2, window_s=60, cooldown_s=10)
    board.get("up:a", settings).record_success()
    failing = board.get("up:b", settings)
    metrics = Metrics()
    name = "farebox_circuit_breaker_state"
    for _ in range(2):
        failing.record_failure()
    metrics.observe_breakers(board.states())
    assert _value(metrics, name, upstream="up:a", state="closed") == 1
    assert _value(metrics, name, upstream="up:a", state="open") == 0
    assert _value(metrics, name, upstream="up:b", state="open") == 1
    assert _value(metrics, name, upstream="up:b", state="closed") == 0
    now[0] = 11.0  # the cool-down is over: one probe may go
    metrics.observe_breakers(board.states())
    assert _value(metrics, name, upstream="up:b", state="half_open") == 1
    assert _value(metrics, name, upstream="up:b", state="open") == 0
    failing.record_success()
    metrics.observe_breakers(board.states())
    assert _value(metrics, name, upstream="up:b", state="closed") == 1


def test_gpu_prices_drop_a_model_the_reload_removed() -> None:
    metrics = Metrics()
    name = "farebox_gpu_cost_per_hour_usd"
    metrics.observe_gpu_prices({"llama": Decimal("7.20"), "qwen": Decimal("3.60")})
    assert _value(metrics, name, model="llama") == 7.2
    metrics.observe_gpu_prices({"qwen": Decimal("1.80")})
    assert _value(metrics, name, model="llama") is None
    assert _value(metrics, name, model="qwen") == 1.8
