"""The long-lived objects of one gateway process, built by the lifespan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import GatewayConfig
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from gateway.upstream.registry import Upstreams

Observer = Callable[[RequestContext], None]
"""Called with every finished request context (metrics, ledger, tests)."""


@dataclass(slots=True)
class Services:
    """Typed state shared by all requests; reached through `request.state.services`."""

    settings: Settings
    config: GatewayConfig
    upstreams: Upstreams
    observers: list[Observer] = field(default_factory=list)
    sim_base_url: str | None = None
    config_loaded: bool = True

    def notify(self, ctx: RequestContext) -> None:
        """Hand a finished request to every observer."""
        for observer in self.observers:
            observer(ctx)
