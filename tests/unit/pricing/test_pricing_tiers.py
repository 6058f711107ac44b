"""Which tier a request is billed on: the upstream's echo wins over the request."""

from __future__ import annotations

import pytest

from gateway.pricing import served_tier


@pytest.mark.parametrize(
    ("requested", "echoed", "speed", "billed"),
    [
        (None, None, None, "standard"),
        ("flex", None, None, "flex"),  # nothing echoed (vLLM): trust the request
        ("fast", "priority", None, "priority"),  # OpenAI serves fast as priority
        ("flex", "default", None, "standard"),  # flex capacity ran out
        ("priority", "auto", None, "standard"),
        ("auto", None, None, "standard"),
        (None, "scale", None, "priority"),
        ("batch", "batch", None, "batch"),
        ("flex", "FLEX", None, "flex"),
        ("flex", "something-new", None, "flex"),  # an unknown echo is ignored
        ("nonsense", None, None, "standard"),
        ("fast", "standard", "fast", "fast"),  # Anthropic reports fast mode in usage.speed
        (None, "standard", "standard", "standard"),
    ],
)
def test_served_tier(
    requested: str | None, echoed: str | None, speed: str | None, billed: str
) -> None:
    assert served_tier(requested, echoed, speed) == billed
