"""A serving gateway keeps of litellm's map only what its configuration reads, and answers
every lookup as the whole map does (gateway.pricing.serving, catalog.ModelMap)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.forked import ForkedStepError, fetch_forked
from gateway.pricing import PriceBook, PricingError, catalog
from gateway.pricing.serving import install_serving_digest, serving_digest, trim_for_serving

CONFIG = """\
models:
  opus:
    provider: anthropic
    model: claude-opus-5
    base_url: http://127.0.0.1:9
  gpt:
    provider: openai
    model: gpt-5
    base_url: http://127.0.0.1:9/v1
  local:
    provider: openai
    model: my-local-llama
    base_url: http://127.0.0.1:9/v1
prices:
  local:
    input: 0.1
    output: 0.2
"""

# Configured, found through a provider prefix or an alias, and not in the map at all.
NAMES = [
    "gpt-5",
    "anthropic/claude-opus-5",
    "claude-opus-5",
    "openai/gpt-5",
    "zai/glm-5.3",
    "bedrock/claude-opus-latest",
    "openai/claude-opus-5",
    "gemini-2.5-pro",
    "no-such-model",
    "local",
]


@pytest.fixture
def config() -> GatewayConfig:
    return parse_config(CONFIG)


@pytest.fixture(autouse=True)
def no_digest(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(catalog, "_DIGESTS", {})
    yield


def _answers(book: PriceBook, name: str) -> tuple[Any, ...]:
    def outcome(read: Any) -> Any:
        try:
            return read(name)
        except PricingError as exc:
            return type(exc).__name__

    return (
        catalog.find_key(book.model_map, name),
        name in book.model_map,
        outcome(book.price),
        outcome(book.model_info),
        outcome(book.cache_min_tokens),
    )


def test_a_trimmed_map_keeps_what_serving_reads_and_answers_as_the_whole(
    config: GatewayConfig,
) -> None:
    whole, trimmed = PriceBook.from_sources(config.prices), PriceBook.from_sources(config.prices)
    trim_for_serving(trimmed, config)
    model_map = trimmed.model_map
    assert isinstance(model_map, catalog.ModelMap) and model_map.trimmed
    kept, keys = model_map.digest()
    assert set(kept) == {"gpt-5", "claude-opus-5"}  # the routes' entries, nothing else
    assert keys == set(whole.model_map) and len(model_map) == len(whole.model_map)
    for name in NAMES:
        assert _answers(trimmed, name) == _answers(whole, name), name


def test_a_digest_read_in_a_forked_child_prices_as_the_whole_map(config: GatewayConfig) -> None:
    payload = fetch_forked(lambda: serving_digest(config))
    install_serving_digest(payload)
    served = PriceBook.from_sources(config.prices)
    model_map = served.model_map
    assert isinstance(model_map, catalog.ModelMap) and model_map.trimmed  # nothing parsed
    assert set(model_map.digest()[0]) == {"gpt-5", "claude-opus-5"}
    whole = PriceBook(config.prices, model_map=catalog.load_model_map())
    for alias in config.models:
        key = config.price_key(alias)
        assert served.price(key) == whole.price(key), alias
    for name in NAMES:  # outside the digest too: the file is read again for the entry
        assert _answers(served, name) == _answers(whole, name), name


def test_a_failed_forked_step_says_why() -> None:
    def fail() -> bytes:
        raise ValueError("no map here")

    with pytest.raises(ForkedStepError, match="ValueError: no map here"):
        fetch_forked(fail)
    assert fetch_forked(lambda: b"kept") == b"kept"
