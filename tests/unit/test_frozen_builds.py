"""Objects built without a frozen dataclass's `__init__` are the ones it builds.

- `mutable_twin(cls)` returns a `cls`, equal to `cls(...)` of the same arguments, as
  frozen, with the same defaults; it refuses a class that checks fields in `__post_init__`.
- `BookedCost.of` gives what the dataclass gives for each component rounded as `as_money`
  (`_bounded`) rounds it, with the total their sum, digits and exponent alike: for zeros
  of any exponent and sign, tiny, large and capped amounts, and no cost at all.
- `cost_of` and `usage_from_openai`'s usual path give their classes' own objects.
- `settle_served` answers what building its `ServedTier` gave, for every input kind.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.frozen import mutable_twin
from gateway.ledger.records import MONEY_LIMIT
from gateway.pipeline.record import COMPONENT_CEILING, BookedCost, _bounded
from gateway.pricing import COMPONENTS, CostBreakdown, ModelPrice, PriceSheet, cost_of
from gateway.pricing.tiers import TIERS, ServedTier, _known, settle_served
from gateway.usage import Usage, _read_openai, usage_from_openai


@dataclasses.dataclass(frozen=True, slots=True)
class _Point:
    x: int
    y: int = 2
    tags: list[str] = dataclasses.field(default_factory=list)
    z: int = dataclasses.field(default=0, compare=False)


def test_a_twin_builds_the_frozen_class_itself() -> None:
    build = mutable_twin(_Point)
    made = build(1, tags=["a"])
    assert type(made) is _Point and made == _Point(1, tags=["a"])
    assert (made.y, made.z) == (2, 0)
    assert build(3).tags is not build(3).tags  # a fresh default each time
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.x = 5  # type: ignore[misc]
    assert repr(made) == repr(_Point(1, tags=["a"]))


def test_a_twin_refuses_a_class_that_checks_its_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("negative")

    with pytest.raises(TypeError, match="__post_init__"):
        mutable_twin(Checked)

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        x: int

    with pytest.raises(TypeError, match="slotted"):
        mutable_twin(Unslotted)


def _as_dataclass_built(cost: CostBreakdown | None) -> BookedCost:
    """What `BookedCost.of` gave before it was built through its slots."""
    if cost is None:
        return BookedCost({name: _bounded(Decimal(0), name) for name in COMPONENTS}, rounded=True)
    bounded = {name: _bounded(getattr(cost, name), name) for name in COMPONENTS}
    return BookedCost(bounded, rounded=True)


def _same_digits(a: BookedCost, b: BookedCost) -> bool:
    pairs = [(a.total, b.total), *zip(a.components.values(), b.components.values(), strict=True)]
    return (
        a == b
        and a.rounded is b.rounded
        and list(a.components) == list(b.components)
        and all(x.as_tuple() == y.as_tuple() for x, y in pairs)
    )


_AMOUNTS = st.one_of(
    st.sampled_from(
        [
            Decimal(0),
            Decimal("-0"),
            Decimal("0E-20"),
            Decimal("-0E-30"),
            Decimal("0E+3"),
            Decimal("0.00000000005"),
            Decimal("0.00000000015"),
            Decimal("-0.00000000005"),
            Decimal("0.000024"),
            Decimal("1E-40"),
            COMPONENT_CEILING,
            -COMPONENT_CEILING,
            COMPONENT_CEILING + 1,
            MONEY_LIMIT * 3,
        ]
    ),
    st.decimals(min_value=-20_000_000, max_value=20_000_000, places=14, allow_nan=False),
)


_NOTHING_COST = CostBreakdown(
    model="m",
    tier="standard",
    priced_as="standard",
    multiplier=Decimal(1),
    tier_fallback=False,
    long_context_above=0,
    input=Decimal(0),
    cached=Decimal(0),
    cache_write=Decimal(0),
    output=Decimal(0),
    reasoning=Decimal(0),
)


@given(st.lists(_AMOUNTS, min_size=5, max_size=5))
def test_booked_cost_of_is_the_dataclass_built_one(amounts: list[Decimal]) -> None:
    given: dict[str, Any] = dict(zip(COMPONENTS, amounts, strict=True))
    cost = dataclasses.replace(_NOTHING_COST, **given)
    booked = BookedCost.of(cost)
    assert type(booked) is BookedCost
    assert _same_digits(booked, _as_dataclass_built(cost))


def test_booked_cost_of_nothing_is_zero() -> None:
    booked = BookedCost.of(None)
    assert _same_digits(booked, _as_dataclass_built(None))
    assert booked.components is not BookedCost.of(None).components  # each its own dict


def test_cost_of_and_the_usual_usage_are_their_classes() -> None:
    sheet = PriceSheet(input=Decimal("0.000002"), output=Decimal("0.00001"))
    usage = usage_from_openai({"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21})
    assert type(usage) is Usage and usage == _read_openai(
        {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
    )
    assert usage == Usage(prompt_tokens=12, completion_tokens=9)
    cost = cost_of(ModelPrice(model="m", standard={0: sheet}), usage)
    assert type(cost) is CostBreakdown
    assert cost == CostBreakdown(
        model="m",
        tier="standard",
        priced_as="standard",
        multiplier=cost.multiplier,
        tier_fallback=False,
        long_context_above=0,
        input=Decimal("0.000024"),
        cached=cost.cached,
        cache_write=cost.cache_write,
        output=Decimal("0.00009"),
        reasoning=cost.reasoning,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        cost.input = Decimal(0)  # type: ignore[misc]


_WORDS = [None, "", "standard", "default", "auto", "priority", "FAST", " flex ", "scale", "nope"]


@pytest.mark.parametrize("self_hosted", [False, True])
@pytest.mark.parametrize("speed", [None, "", "fast", " Standard ", "slow"])
def test_settle_served_answers_as_built(self_hosted: bool, speed: str | None) -> None:
    for requested in _WORDS:
        for echoed in _WORDS:
            got = settle_served(requested, echoed, speed, self_hosted=self_hosted)
            if self_hosted:
                want = ServedTier(_known(requested) or "standard", True)
            elif speed and speed.strip().lower() in ("fast", "standard"):
                fast = speed.strip().lower() == "fast"
                want = ServedTier("fast" if fast else (_known(echoed) or "standard"), True)
            elif _known(echoed):
                want = ServedTier(_known(echoed) or "standard", True)
            else:
                want = ServedTier(_known(requested) or "standard", False)
            assert got == want and got.tier in TIERS
