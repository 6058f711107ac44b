"""CPU per request of the shared-state calls the chat path makes, against a real Redis.

Run: `python bench/state_calls.py [--redis-url redis://127.0.0.1:6379/12] [--task] [-n 8000]
[-c 32] [--src DIR]`.

Each simulated request makes the calls a small chat request makes through `FallbackState`
(the gateway's shared state with Redis configured), in the pipeline's order: read the
prefix history (and, for a request of a task, its pinned effort first), rebuild the
records the prefix check compares with, remember this prompt's record, and (a task) add
its cost. `-c` requests run at once, as under load. Prints the process's CPU time per
request (utime+stime, `time.process_time`) and wall time per request. `--src` imports
`gateway` from another checkout (an A/B of two trees, run alternately); to compare with
and without hiredis, put a directory holding a `hiredis.py` that raises ImportError
first on PYTHONPATH. Every key lives under a namespace of the run's own, deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from decimal import Decimal
from typing import Any

from checkout import use_checkout

# A small request's prefix record, as the gateway stores it (bench/pipeline_cpu.py's body).
RECORD: dict[str, Any] = {
    "family": "openai",
    "model": "mock-gpt",
    "fingerprints": [f"{n:032x}" for n in range(6)],
    "segment_names": ["effort", "system", "tools", "tool_choice", "response_format", "m0"],
    "segment_digests": [f"{n + 10:032x}" for n in range(6)],
    "canonical_digests": [f"{n + 20:032x}" for n in range(6)],
    "cumulative_tokens": [1, 2, 3, 4, 5, 18],
    "stable_count": 5,
    "header_count": 5,
    "breakpoints": [],
    "settings": {},
    "reported_prompt_tokens": 18,
}


async def _request(state: Any, record_of: Any, keys: list[str], task: str | None) -> None:
    if task is not None:
        await state.task_value(task, "effort")
    history = await state.prefix_history(keys)
    for item in history:
        record_of(item)
    await state.remember_prefix(keys, RECORD, 600, 4)
    if task is not None:
        await state.add_task_cost(task, Decimal("0.000125"), 600)


async def _run(args: argparse.Namespace) -> None:
    from gateway.pipeline.prefix import _record_of
    from gateway.settings import RedisLimits
    from gateway.state.fallback import FallbackState

    namespace = f"bench-state-{uuid.uuid4().hex}"
    limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10)
    state = await FallbackState.connect(args.redis_url, namespace, limits)
    task = "t1" if args.task else None
    keys = [f"task:{task}"] if task else []
    keys.append("caller:anonymous:bench-chat")
    per_client = args.n // args.c
    try:
        for _ in range(20):  # connections opened, scripts loaded: not per-request costs
            await asyncio.gather(*(_request(state, _record_of, keys, task) for _ in range(args.c)))

        async def client() -> None:
            for _ in range(per_client):
                await _request(state, _record_of, keys, task)

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(args.c)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if state.degraded:
            raise SystemExit("Redis went away during the run: the numbers are not Redis's")
        sent = per_client * args.c
        print(
            f"{args.src or 'this checkout'}: task={bool(task)} c={args.c} n={sent} "
            f"cpu/req={cpu / sent * 1e6:.1f} us wall/req={wall / sent * 1e6:.1f} us"
        )
    finally:
        names = await state.redis.client.keys(f"{namespace}:*")
        if names:
            await state.redis.client.delete(*names)
        await state.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--task", action="store_true", help="requests of one task (X-Task-Id)")
    parser.add_argument("-n", type=int, default=8000)
    parser.add_argument("-c", type=int, default=32)
    parser.add_argument("--src", help="import gateway from this checkout")
    args = parser.parse_args()
    use_checkout(args.src)
    import uvloop

    uvloop.run(_run(args))


if __name__ == "__main__":
    main()
