"""A configuration snapshot is priced when it is built, so no request reads the price map."""

from __future__ import annotations

from gateway.config import GatewayConfig, load_config
from gateway.services import Snapshot
from gateway.settings import DEFAULT_CONFIG


def test_every_route_of_the_default_config_is_priced_at_build() -> None:
    config = load_config(DEFAULT_CONFIG)
    snapshot = Snapshot.build(config)
    keys = {config.price_key(alias) for alias in config.models}
    assert keys and keys <= snapshot.prices.priced


def test_an_unpriced_route_does_not_stop_the_build() -> None:
    config = GatewayConfig.model_validate(
        {
            "models": {
                "mine": {"model": "no-such-model-anywhere", "base_url": "http://127.0.0.1:9/v1"}
            }
        }
    )
    snapshot = Snapshot.build(config)
    assert not snapshot.prices.knows("no-such-model-anywhere")
    assert snapshot.config is config
