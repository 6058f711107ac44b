"""The long-lived objects of one gateway process, built by the lifespan.

The configuration and its prices change together on reload, as one `Snapshot` swapped in
one assignment; a request pins the snapshot in force when it starts (`for_request`) and
reads only that one until its last byte is booked.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.audit import AuditLog
from gateway.config import GatewayConfig
from gateway.keys.cache import KeyCache
from gateway.ledger import LedgerWriter
from gateway.metrics import Metrics
from gateway.pipeline.context import RequestContext
from gateway.policy.breaker import BreakerBoard
from gateway.prefix.checker import PrefixChecker
from gateway.pricing import PriceBook, PricingError
from gateway.pricing.serving import trim_for_serving
from gateway.settings import Settings
from gateway.state import SharedState
from gateway.tenants import Limiter, MemoryLimiter
from gateway.upstream.registry import Upstreams

log = logging.getLogger("farebox.config")

Observer = Callable[[RequestContext], None]
"""Called with every finished request context (tests, extensions)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One version of the reloadable configuration: routes and policy, and their prices."""

    config: GatewayConfig
    prices: PriceBook

    @classmethod
    def build(cls, config: GatewayConfig) -> Snapshot:
        """Price the configuration now, every route included, so no request pays for it.

        Reading litellm's map and pricing a model from it takes tens of milliseconds: done
        here (at start-up, in a thread, or at reload), never on a request's event loop.
        Of the map, the book then keeps only the entries serving `config` reads, and every
        key (`gateway.pricing.serving`: 5.6 MiB less held; lookups answer as before).
        """
        for warning in config.family_warnings():
            log.warning(warning)  # a guessed family decides which fields are sent: say so
        prices = PriceBook.from_sources(config.prices)
        for alias in config.models:
            # An unpriced route is fine (it costs 0); the request path logs it once.
            with contextlib.suppress(PricingError):
                prices.price(config.price_key(alias))
        trim_for_serving(prices, config)
        return cls(config, prices)


@dataclass(slots=True)
class Services:
    """Typed state shared by all requests; reached through `request.state.services`."""

    settings: Settings
    snapshot: Snapshot
    upstreams: Upstreams
    metrics: Metrics
    ledger: LedgerWriter
    engine: AsyncEngine  # for ledger reads (bounded timeouts); the writer has its own
    state: SharedState
    keys: KeyCache  # virtual keys by secret hash: `keys.lookup(secret)`, no I/O
    audit: AuditLog
    prefix_checker: PrefixChecker = field(default_factory=PrefixChecker)
    breakers: BreakerBoard = field(default_factory=BreakerBoard)
    limiter: Limiter = field(default_factory=MemoryLimiter)  # budgets and rate limits
    observers: list[Observer] = field(default_factory=list)
    sim_base_url: str | None = None
    # The copy `for_request` last made, reused while its snapshot is the one in force
    _pinned: Services | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def config(self) -> GatewayConfig:
        """The configuration in force (a request reads its pinned snapshot's)."""
        return self.snapshot.config

    @property
    def prices(self) -> PriceBook:
        """The prices in force, of the same version as `config`."""
        return self.snapshot.prices

    def for_request(self) -> Services:
        """These services pinned to the snapshot in force now, for one request.

        The copy shares every client, store and writer; only its snapshot never changes,
        so a reload mid-request cannot mix two configurations in one request. One copy
        serves every request of a snapshot (a copy per request was ~1% of a small
        request's CPU): nothing assigns to a request's services, and a reload makes the
        next request pin a new one.
        """
        pinned = self._pinned
        if pinned is None or pinned.snapshot is not self.snapshot:
            pinned = self._pinned = replace(self, snapshot=self.snapshot)
        return pinned

    def notify(self, ctx: RequestContext) -> None:
        """Hand a finished request to every observer."""
        for observer in self.observers:
            observer(ctx)
