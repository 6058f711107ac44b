"""The block-hash prefix cache and Anthropic's breakpoint cache, as pure logic."""

from __future__ import annotations

from gateway.sim.anthropic_cache import Breakpoint, BreakpointCache
from gateway.sim.prefix_cache import PrefixCache, TokenChain, chain_keys, root_key

ROOT = root_key("test")


def lookup(cache: PrefixCache, prompt: list[int]) -> int:
    return cache.lookup_and_insert(chain_keys(ROOT, prompt, cache.block_size), len(prompt))


def test_chain_keys_cover_full_blocks_only() -> None:
    assert len(chain_keys(ROOT, list(range(35)), 16)) == 2
    assert chain_keys(ROOT, list(range(15)), 16) == []


def test_a_changed_token_changes_its_block_and_every_later_one() -> None:
    base = chain_keys(ROOT, list(range(64)), 16)
    edited = chain_keys(ROOT, [*range(20), 999, *range(21, 64)], 16)
    assert base[0] == edited[0]
    assert all(a != b for a, b in zip(base[1:], edited[1:], strict=True))


def test_roots_separate_models() -> None:
    tokens = list(range(32))
    assert chain_keys(root_key("a"), tokens, 16) != chain_keys(root_key("b"), tokens, 16)


def test_cached_tokens_grow_with_a_repeated_prefix() -> None:
    cache = PrefixCache(block_size=16, capacity_blocks=100)
    prompt = list(range(40))
    assert lookup(cache, prompt) == 0
    assert lookup(cache, [*prompt, *range(100, 140)]) == 32
    assert lookup(cache, [*prompt, *range(100, 140), 7]) == 80


def test_never_the_whole_prompt() -> None:
    cache = PrefixCache(block_size=16, capacity_blocks=100)
    prompt = list(range(48))
    lookup(cache, prompt)
    # Three full blocks are cached, but the last token must be recomputed.
    assert lookup(cache, prompt) == 32
    assert lookup(cache, [*prompt, 1]) == 48


def test_a_new_first_block_misses_everything() -> None:
    cache = PrefixCache(block_size=16, capacity_blocks=100)
    prompt = list(range(64))
    lookup(cache, prompt)
    assert lookup(cache, [999, *prompt[1:]]) == 0


def test_lru_evicts_tails_before_shared_heads() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=4)
    lookup(cache, list(range(16)))  # four blocks fill the cache
    lookup(cache, [*range(8), 50, 51, 52, 53, 60])  # shares two blocks, adds one
    assert len(cache) == 4
    # The first prompt's last block went first; its head is still there.
    assert lookup(cache, [*range(16), 1]) == 12


def test_key_at_names_the_exact_prefix() -> None:
    chain = TokenChain.build(ROOT, list(range(32)), 16)
    assert chain.key_at(16) != chain.keys[0]
    assert chain.key_at(20) == TokenChain.build(ROOT, list(range(20)), 16).key_at(20)
    assert chain.key_at(20) != chain.key_at(21)


def test_extended_chain_matches_a_fresh_one() -> None:
    chain = TokenChain.build(ROOT, list(range(40)), 16).extended(range(40, 70))
    assert chain.keys == chain_keys(ROOT, list(range(70)), 16)


def chain(tokens: list[int]) -> TokenChain:
    return TokenChain.build(ROOT, tokens, 16)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_breakpoint_write_then_read() -> None:
    cache = BreakpointCache()
    tokens = list(range(100))
    boundaries = [60, 90, 100]
    first = cache.apply(chain(tokens), boundaries, [Breakpoint(0)], min_tokens=0)
    assert (first.read, first.write_5m, first.write_1h) == (0, 60, 0)
    second = cache.apply(chain(tokens), boundaries, [Breakpoint(0), Breakpoint(2)], 0)
    assert (second.read, second.write_5m) == (60, 40)
    third = cache.apply(chain(tokens), boundaries, [Breakpoint(2)], 0)
    assert (third.read, third.written) == (100, 0)


def test_breakpoint_lookback_reads_an_earlier_boundary() -> None:
    cache = BreakpointCache()
    cache.apply(chain(list(range(50))), [30, 50], [Breakpoint(1)], 0)
    # A longer prompt with its breakpoint later still finds the 50-token prefix.
    usage = cache.apply(chain(list(range(80))), [30, 50, 80], [Breakpoint(2)], 0)
    assert (usage.read, usage.write_5m) == (50, 30)


def test_ttl_split_and_expiry() -> None:
    clock = FakeClock()
    cache = BreakpointCache(clock=clock)
    tokens = list(range(100))
    usage = cache.apply(chain(tokens), [40, 100], [Breakpoint(0, "1h"), Breakpoint(1, "5m")], 0)
    assert (usage.write_1h, usage.write_5m) == (40, 60)
    clock.now += 301  # the 5m entry has expired, the 1h one has not
    usage = cache.apply(chain(tokens), [40, 100], [Breakpoint(1, "5m")], 0)
    assert (usage.read, usage.write_5m) == (40, 60)


def test_short_prefixes_are_not_written() -> None:
    cache = BreakpointCache()
    tokens = list(range(100))
    usage = cache.apply(chain(tokens), [100], [Breakpoint(0)], min_tokens=1024)
    assert usage.written == 0
    assert cache.apply(chain(tokens), [100], [Breakpoint(0)], min_tokens=1024).read == 0
