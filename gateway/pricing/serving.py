"""Keep of litellm's map only what serving a configuration reads (`trim_for_serving`).

The parsed map holds ~4,900 models (5.7 MiB of RSS in a started gateway, 1.9-2.7 MiB
still held by the allocators once it is let go); a gateway reads the entries of its
configured routes and prices only. They are read here, as a request would read them
(each alias's price, model info and cache minimum, each route's capabilities as the
planner finds them), then the book keeps those and the map's keys (`ModelMap.trim`).
A name not read here is still answered as before: absent at no cost, present by
parsing the file again for its entry.

`farebox serve` does the reading in a forked child (`serving_digest`, before the app is
built) and installs what it kept (`catalog.install_digest`): the serving process never
parses the map, 5.7 MiB of RSS and 40-55 ms of its CPU at start.
"""

from __future__ import annotations

import contextlib
import pickle
from typing import TYPE_CHECKING

from gateway.pricing.catalog import ModelMap, install_digest
from gateway.pricing.errors import PricingError

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.pricing.book import PriceBook


def trim_for_serving(prices: PriceBook, config: GatewayConfig) -> None:
    """Read what serving `config` reads from the book's map, then let the rest go."""
    from gateway.policy.planner import route_capabilities  # the planner's own lookup

    for alias, route in config.models.items():
        route_capabilities(route, prices.model_map)
        key = config.price_key(alias)
        for read in (prices.price, prices.model_info, prices.cache_min_tokens):
            with contextlib.suppress(PricingError):  # unpriced: the request path says so
                read(key)
    prices.trim_map()


def serving_digest(config: GatewayConfig) -> bytes:
    """The map entries serving `config` reads and the map's keys, pickled (for a forked
    child to compute and `install_serving_digest` to install in the parent)."""
    from gateway.pricing.book import PriceBook

    book = PriceBook.from_sources(config.prices)
    trim_for_serving(book, config)
    model_map = book.model_map
    assert isinstance(model_map, ModelMap)
    return pickle.dumps(model_map.digest(), protocol=pickle.HIGHEST_PROTOCOL)


def install_serving_digest(payload: bytes) -> None:
    """Install what `serving_digest` returned (litellm's bundled map's digest)."""
    kept, keys = pickle.loads(payload)  # our own forked child's bytes
    install_digest(kept, keys)
