"""The tier settled for billing, and whether the upstream confirmed it."""

from __future__ import annotations

import pytest

from gateway.pricing import ServedTier, settle_served


@pytest.mark.parametrize(
    ("requested", "echoed", "speed", "self_hosted", "settled"),
    [
        ("flex", "flex", None, False, ServedTier("flex", True)),  # OpenAI's echo
        ("priority", "default", None, False, ServedTier("standard", True)),  # not granted
        ("flex", None, None, False, ServedTier("flex", False)),  # nothing said: as asked
        (None, None, None, False, ServedTier("standard", False)),
        ("fast", "standard", "fast", False, ServedTier("fast", True)),  # Anthropic usage.speed
        ("fast", "standard", "standard", False, ServedTier("standard", True)),  # not served
        ("standard", "priority", "standard", False, ServedTier("priority", True)),
        ("batch", "priority", None, True, ServedTier("batch", True)),  # the pool's tier
        (None, None, None, True, ServedTier("standard", True)),
        ("flex", "something-new", None, False, ServedTier("flex", False)),
    ],
)
def test_settle_served(
    requested: str | None,
    echoed: str | None,
    speed: str | None,
    self_hosted: bool,
    settled: ServedTier,
) -> None:
    assert settle_served(requested, echoed, speed, self_hosted=self_hosted) == settled
