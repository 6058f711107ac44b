"""Self-hosted models priced from GPU time: planned from throughput, effective per hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gateway.pricing import (
    GpuCost,
    GpuHourMeter,
    PriceBook,
    cost_of,
    parse_price_overrides,
    planned_price,
)
from gateway.usage import Usage

# 2 GPUs at 3.60 USD an hour: 7.20 USD an hour, 0.002 USD a second.
GPU = GpuCost(
    cost_per_hour=Decimal("3.60"),
    gpus=2,
    prefill_tokens_per_second=Decimal(20_000),
    decode_tokens_per_second=Decimal(2_000),
    cached_input_fraction=Decimal("0.1"),
)
TEN = datetime(2025, 1, 1, 10, 0, tzinfo=UTC)


def test_planned_prices_from_throughput() -> None:
    rates = planned_price("llama", GPU).quote().rates
    assert rates.input == Decimal("0.0000001")  # 0.002 / 20,000 = $0.10 per 1M
    assert rates.output == Decimal("0.000001")  # 0.002 / 2,000 = $1 per 1M
    assert rates.cached_input == Decimal("0.00000001")  # 10% of input
    assert rates.cache_write == rates.input
    assert rates.reasoning == rates.output


def test_planned_prices_round_to_femto_dollars() -> None:
    gpu = GpuCost(
        cost_per_hour=Decimal("2.50"),
        prefill_tokens_per_second=Decimal(20_000),
        decode_tokens_per_second=Decimal(1_500),
    )
    rates = planned_price("m", gpu).quote().rates
    assert rates.input == Decimal("0.000000034722222")  # 2.5 / 72,000,000
    assert rates.output == Decimal("0.000000462962963")  # 2.5 / 5,400,000
    assert rates.cached_input == Decimal(0)  # a prefix-cache hit is free by default


def test_gpu_entry_in_the_price_config() -> None:
    overrides = parse_price_overrides(
        {
            "llama": {
                "gpu": {
                    "cost_per_hour": 3.60,
                    "gpus": 2,
                    "prefill_tokens_per_second": 20000,
                    "decode_tokens_per_second": 2000,
                },
                "output": 2,  # an explicit price beats the planned one
            }
        }
    )
    price = PriceBook.from_sources(overrides, model_map={}).price("llama")
    cost = cost_of(price, Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000))
    assert (cost.input, cost.output) == (Decimal("0.1"), Decimal("2"))


def test_effective_cost_of_a_busy_and_an_idle_hour() -> None:
    meter = GpuHourMeter(GPU)
    meter.record(TEN + timedelta(minutes=5), 3_000_000, 300_000)
    meter.record((TEN + timedelta(minutes=59)).timestamp(), 600_000, 60_000)
    busy = meter.effective(TEN + timedelta(minutes=30))
    assert (busy.start, busy.hours, busy.gpu_cost) == (TEN, 1, Decimal("7.20"))
    assert (busy.input_tokens, busy.output_tokens) == (3_600_000, 360_000)
    assert busy.planned_cost == Decimal("0.72")  # 3.6M x 1e-7 + 0.36M x 1e-6
    assert busy.utilisation == Decimal("0.1")
    assert busy.per_million_tokens == Decimal("1.818182")  # 7.20 / 3.96M tokens
    assert busy.input_per_million == Decimal("1")  # planned $0.10, at 10% utilisation
    assert busy.output_per_million == Decimal("10")

    idle = meter.effective(TEN + timedelta(hours=1))
    assert (idle.gpu_cost, idle.tokens, idle.utilisation) == (Decimal("7.20"), 0, Decimal(0))
    assert idle.per_million_tokens is None and idle.input_per_million is None

    both = meter.effective_span(TEN, TEN + timedelta(hours=1, minutes=30))
    assert (both.hours, both.gpu_cost, both.tokens) == (2, Decimal("14.40"), 3_960_000)
    assert both.per_million_tokens == Decimal("3.636364")  # the idle hour doubles the cost
    assert both.utilisation == Decimal("0.05")
    assert both.input_per_million == Decimal("2")


def test_meter_forgets_old_hours() -> None:
    meter = GpuHourMeter(GPU, retain_hours=2)
    for hour in range(4):
        meter.record(TEN + timedelta(hours=hour), 1, 1)
    assert meter.effective(TEN).tokens == 0
    assert meter.effective(TEN + timedelta(hours=3)).tokens == 2


def test_meter_refuses_bad_input() -> None:
    meter = GpuHourMeter(GPU)
    with pytest.raises(ValueError, match="timezone-aware"):
        meter.record(datetime(2025, 1, 1), 1, 1)
    with pytest.raises(ValueError, match="negative"):
        meter.record(TEN, -1, 0)
    with pytest.raises(ValueError, match="before start"):
        meter.effective_span(TEN, TEN - timedelta(hours=1))
