"""Benchmark the key cache's `lookup`: the part of a request's key check that finds the key.

Run: `python bench/key_lookup.py [--keys 2000]`. Stores that many keys in a SQLite ledger
in a temporary folder, loads them into a `KeyCache`, then times `lookup` (SHA-256 of the
secret and one dict read) for known secrets and for unknown ones (a flood of made-up
keys: the miss path, which may start one background refresh a second). Prints p50 and p99
in microseconds. No database query is made per lookup: `polls` is printed to show it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway.keys.cache import KeyCache
from gateway.keys.model import KeyAttributes
from gateway.keys.secrets import new_secret
from gateway.keys.store import KeyStore
from gateway.ledger import make_engine, migrate


def _percentiles(samples: list[int]) -> str:
    samples.sort()
    p50, p99 = samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
    return f"p50 {p50 / 1000:.2f} µs, p99 {p99 / 1000:.2f} µs"


def _time(cache: KeyCache, secrets: list[str]) -> list[int]:
    samples = []
    for secret in secrets:
        start = time.perf_counter_ns()
        cache.lookup(secret)
        samples.append(time.perf_counter_ns() - start)
    return samples


async def main(keys: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{folder}/ledger.db"
        await migrate(url)
        engine = make_engine(url)
        store = KeyStore(engine)
        secrets = [(await store.create(KeyAttributes(team=f"team-{i % 50}"))).secret
                   for i in range(keys)]  # fmt: skip
        cache = KeyCache(store, refresh_s=3600)
        await cache.refresh()
        polls = cache.polls
        known = _time(cache, secrets * rounds)
        unknown = _time(cache, [new_secret() for _ in range(keys * rounds)])
        await asyncio.sleep(0.1)  # the one refresh the misses started
        print(f"{len(cache)} keys, {len(known)} lookups each way")
        print(f"known key:   {_percentiles(known)}")
        print(f"unknown key: {_percentiles(unknown)}")
        print(f"database polls during the lookups: {cache.polls - polls}")
        await engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.keys, args.rounds))
