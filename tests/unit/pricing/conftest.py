"""Fixtures of the pricing tests: the real bundled price map, read once."""

from __future__ import annotations

import pytest

from gateway.pricing import PriceBook


@pytest.fixture(scope="session")
def book() -> PriceBook:
    """Return a price book over litellm's bundled map, without overrides."""
    return PriceBook()
