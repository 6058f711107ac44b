"""The long-lived objects of one gateway process, built by the lifespan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.config import GatewayConfig
from gateway.ledger import LedgerWriter
from gateway.metrics import Metrics
from gateway.pipeline.context import RequestContext
from gateway.policy.breaker import BreakerBoard
from gateway.prefix.checker import PrefixChecker
from gateway.pricing import PriceBook
from gateway.settings import Settings
from gateway.state import SharedState
from gateway.upstream.registry import Upstreams

Observer = Callable[[RequestContext], None]
"""Called with every finished request context (tests, extensions)."""


@dataclass(slots=True)
class Services:
    """Typed state shared by all requests; reached through `request.state.services`."""

    settings: Settings
    config: GatewayConfig
    upstreams: Upstreams
    prices: PriceBook
    metrics: Metrics
    ledger: LedgerWriter
    engine: AsyncEngine
    state: SharedState
    prefix_checker: PrefixChecker = field(default_factory=PrefixChecker)
    breakers: BreakerBoard = field(default_factory=BreakerBoard)
    observers: list[Observer] = field(default_factory=list)
    sim_base_url: str | None = None

    def notify(self, ctx: RequestContext) -> None:
        """Hand a finished request to every observer."""
        for observer in self.observers:
            observer(ctx)
