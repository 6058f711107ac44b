"""The end-to-end fixtures (a gateway on a real port in front of the simulator), reused."""

from __future__ import annotations

from tests.e2e.conftest import make_gateway

__all__ = ["make_gateway"]
