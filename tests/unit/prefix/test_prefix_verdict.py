"""The verdict after the response, and the money a miss cost."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.prefix import CacheStatus, verdict

INPUT = Decimal("0.00000125")  # $1.25 per million input tokens
CACHED = Decimal("0.000000125")  # $0.125 per million cached tokens


def test_nothing_expected_nothing_read_is_stable() -> None:
    result = verdict(0, 0, 900, INPUT, CACHED)
    assert result.status is CacheStatus.STABLE
    assert result.money_lost == Decimal(0)


def test_expected_read_is_a_hit() -> None:
    result = verdict(10_240, 10_240, 12_000, INPUT, CACHED)
    assert result.status is CacheStatus.HIT
    assert (result.missed_tokens, result.money_lost) == (0, Decimal(0))


def test_small_estimate_error_is_still_a_hit() -> None:
    assert verdict(10_240, 9_600, 12_000, INPUT, CACHED).status is CacheStatus.HIT


def test_miss_costs_missed_tokens_times_the_price_difference() -> None:
    result = verdict(100_000, 20_000, 120_000, INPUT, CACHED)
    assert result.status is CacheStatus.MISS
    assert result.missed_tokens == 80_000
    assert result.money_lost == Decimal("0.09000000")  # 80,000 x $0.000001125
    assert isinstance(result.money_lost, Decimal)


def test_full_miss_is_exact_in_decimal() -> None:
    result = verdict(2_000, 0, 2_000, Decimal("0.1"), Decimal("0.01"))
    assert result.status is CacheStatus.MISS
    assert result.money_lost == Decimal("180.00")


def test_more_than_expected_is_an_unexpected_hit_and_costs_nothing() -> None:
    result = verdict(0, 4_096, 5_000, INPUT, CACHED)
    assert result.status is CacheStatus.UNEXPECTED_HIT
    assert result.money_lost == Decimal(0)


def test_expected_is_capped_at_the_prompt() -> None:
    result = verdict(50_000, 0, 10_000, INPUT, CACHED)
    assert result.expected_cached == 10_000
    assert result.missed_tokens == 10_000


def test_cached_price_above_input_price_never_makes_a_negative_loss() -> None:
    assert verdict(5_000, 0, 5_000, CACHED, INPUT).money_lost == Decimal(0)


def test_float_prices_are_refused() -> None:
    with pytest.raises(TypeError, match="Decimal"):
        verdict(5_000, 0, 5_000, 1.25e-6, CACHED)  # type: ignore[arg-type]


def test_tolerance_is_configurable() -> None:
    strict = verdict(10_240, 9_600, 12_000, INPUT, CACHED, tolerance=Decimal("0"))
    assert strict.status is CacheStatus.MISS
    assert strict.missed_tokens == 640
