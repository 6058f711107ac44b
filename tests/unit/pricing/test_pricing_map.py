"""Reading litellm's map: every price-key family, lookups, and what is left out."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import pytest

from gateway.pricing import (
    PriceBook,
    UnknownModelError,
    UnpricedModelError,
    cache_min_tokens,
    cost_of,
    find_key,
    model_info,
    price_from_entry,
)
from gateway.pricing.map_prices import parse_price_key
from gateway.usage import Usage

# A synthetic entry carrying each key family the bundled map uses.
ENTRY = {
    "litellm_provider": "openai",
    "input_cost_per_token": 1e-06,
    "output_cost_per_token": 4e-06,
    "cache_read_input_token_cost": 1e-07,
    "cache_creation_input_token_cost": 1.25e-06,
    "cache_creation_input_token_cost_above_1hr": 2e-06,
    "cache_creation_input_token_cost_above_12hr": 3e-06,
    "input_cost_per_token_above_272k_tokens": 2e-06,
    "output_cost_per_token_above_272k_tokens": 6e-06,
    "cache_creation_input_token_cost_above_12hr_above_272k_tokens": 5e-06,
    "input_cost_per_token_ultrafast": 6e-06,
    "output_cost_per_token_ultrafast": 3e-05,
    "input_cost_per_token_above_272k_tokens_flex": 1e-06,
    "input_cost_per_token_flex": 5e-07,
    "input_cost_per_token_decisions": 9.0,  # a different call type, not a tier
    "input_cost_per_audio_token": 9.0,  # not a text token price
    "output_cost_per_reasoning_token": "5e-06",
}


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("input_cost_per_token", ("standard", 0, "input")),
        ("cache_read_input_token_cost_above_200k_tokens", ("standard", 200_000, "cached_input")),
        ("output_cost_per_token_above_128_tokens", ("standard", 128, "output")),
        ("input_cost_per_token_batches", ("batch", 0, "input")),
        ("cache_creation_input_token_cost_above_1hr", ("standard", 0, "cache_write_1h")),
        (
            "cache_creation_input_token_cost_above_1hr_above_200k_tokens",
            ("standard", 200_000, "cache_write_1h"),
        ),
        (
            "cache_creation_input_token_cost_above_12hr_above_272k_tokens_priority",
            ("priority", 272_000, "cache_write_12h"),
        ),
        ("output_cost_per_token_above_200k_tokens_flex", ("flex", 200_000, "output")),
        ("input_cost_per_token_balanced", ("balanced", 0, "input")),
        ("input_cost_per_token_decisions", None),
        ("input_cost_per_token_cache_hit", None),
        ("input_cost_per_audio_token", None),
        ("output_cost_per_token_above_1hr", None),
    ],
)
def test_parse_price_key(key: str, parsed: tuple[str, int, str] | None) -> None:
    assert parse_price_key(key) == parsed


def test_every_family_is_read_exactly() -> None:
    price = price_from_entry("synthetic", ENTRY)
    base = price.standard[0]
    assert base.input == Decimal("0.000001")  # from the float 1e-06, exactly
    assert base.reasoning == Decimal("0.000005")
    assert (base.cache_write, base.cache_write_1h, base.cache_write_12h) == (
        Decimal("0.00000125"),
        Decimal("0.000002"),
        Decimal("0.000003"),
    )
    assert price.standard[272_000].input == Decimal("0.000002")
    assert price.standard[272_000].cache_write_12h == Decimal("0.000005")
    assert set(price.tiers) == {"ultrafast", "flex"}
    assert price.tiers["flex"].sheets[272_000].input == Decimal("0.000001")


def test_floats_become_the_decimal_that_was_written() -> None:
    price = price_from_entry("m", {"input_cost_per_token": 3e-06, "output_cost_per_token": 0.1})
    assert price.standard[0].input == Decimal("0.000003")
    as_float = 3e-06
    assert price.standard[0].input != Decimal(as_float)  # what float conversion would give
    assert price.standard[0].output == Decimal("0.1")


def test_ttl_and_tier_quotes() -> None:
    price = price_from_entry("synthetic", ENTRY)
    ultra = price.quote("ultrafast", 1_000).rates
    assert (ultra.input, ultra.output) == (Decimal("0.000006"), Decimal("0.00003"))
    # The tier publishes output but no reasoning price: its output covers reasoning.
    assert ultra.reasoning == Decimal("0.00003")
    assert ultra.cached_input == Decimal("0.0000001")  # standard's, none for the tier
    long_flex = price.quote("flex", 300_000)
    assert long_flex.long_context_above == 272_000
    assert long_flex.rates.input == Decimal("0.000001")  # flex at the step
    assert long_flex.rates.output == Decimal("0.000006")  # standard at the step
    usage = Usage(prompt_tokens=300_000, cache_write_tokens=1_000, completion_tokens=0)
    assert cost_of(price, usage, cache_ttl="12h").cache_write == Decimal("0.005")


def test_tiered_pricing_bands_are_steps() -> None:
    entry = {
        "litellm_provider": "dashscope",
        "tiered_pricing": [
            {
                "input_cost_per_token": 3e-07,
                "output_cost_per_token": 1.5e-06,
                "range": [0, 32000.0],
            },
            {
                "input_cost_per_token": 5e-07,
                "output_cost_per_token": 2.5e-06,
                "cache_read_input_token_cost": 1.2e-07,
                "range": [32000.0, 128000.0],
            },
        ],
    }
    price = price_from_entry("qwen", entry)
    assert price.quote(prompt_tokens=32_000).rates.input == Decimal("0.0000003")
    above = price.quote(prompt_tokens=32_001).rates
    assert (above.input, above.cached_input, above.output) == (
        Decimal("0.0000005"),
        Decimal("0.00000012"),
        Decimal("0.0000025"),
    )
    # Beyond the last band, the last band's prices apply.
    assert price.quote(prompt_tokens=500_000).long_context_above == 32_000


def test_entry_without_token_prices_is_unpriced() -> None:
    with pytest.raises(UnpricedModelError, match="no per-token input or output price"):
        price_from_entry("img", {"litellm_provider": "openai", "output_cost_per_image": 0.04})


def test_lookup_by_key_prefix_and_alias(book: PriceBook) -> None:
    model_map = book.model_map
    assert find_key(model_map, "zai/glm-5.3") == "zai/glm-5.3"
    assert find_key(model_map, "anthropic/claude-opus-5") == "claude-opus-5"
    assert find_key(model_map, "openai/gpt-5") == "gpt-5"
    assert find_key(model_map, "vertex_ai/gemini-2.5-pro") == "gemini-2.5-pro"
    assert find_key(model_map, "openai/claude-opus-5") is None  # wrong provider
    assert find_key(model_map, "bedrock/claude-opus-latest") == "global.anthropic.claude-opus-5-5"
    assert find_key(model_map, "sample_spec") is None
    assert book.price("openai/gpt-5").model == "openai/gpt-5"


def test_unknown_model_says_how_to_fix_it(book: PriceBook) -> None:
    with pytest.raises(UnknownModelError, match="add it under `prices:`"):
        book.price("vllm/my-llama")
    assert not book.knows("vllm/my-llama")
    assert book.knows("gpt-5")


def test_model_info_is_a_copy_of_the_raw_entry(book: PriceBook) -> None:
    info = model_info("anthropic/claude-opus-5", book.model_map)
    assert info["supports_fast_mode"] is True
    assert info["input_cost_per_token"] == 5e-06
    info["provider_specific_entry"]["fast"] = 100
    assert book.model_info("claude-opus-5")["provider_specific_entry"]["fast"] == 2.0


def test_cache_min_tokens(book: PriceBook) -> None:
    assert cache_min_tokens("claude-sonnet-4-5", book.model_map) == 1024
    assert cache_min_tokens("anthropic/claude-opus-5", book.model_map) == 512
    assert cache_min_tokens("gpt-5", book.model_map) is None
    assert cache_min_tokens("no-such-model", book.model_map) is None
    assert cache_min_tokens("m", {"m": {"prompt_cache_min_tokens": 2048.0}}) == 2048
    assert book.cache_min_tokens("gemini-2.5-pro") == 2048


def test_map_is_read_without_importing_litellm() -> None:
    script = (
        "import sys\n"
        "from gateway.pricing import PriceBook, cache_min_tokens\n"
        "assert PriceBook().price('gpt-5')\n"
        "assert cache_min_tokens('claude-sonnet-4-5') == 1024\n"
        "assert 'litellm' not in sys.modules, 'litellm was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
