"""CPU of the prefix stage of one small request, as the chat pipeline runs it.

Run: `python bench/prefix_small.py [-n 5000] [--rounds 7] [--src CHECKOUT]
[--cprofile out.pstats]`.

Each request is bench/pipeline_inproc.py's one-message body ("Say hello (request i).",
`max_tokens` 16), parsed by orjson before the timed part, with the hot-path bench's rule
(family openai) and one caller's history in the in-process state. Timed per request:
`check_prefix` (history read, check, headers), `judge` against a reported usage and
`remember`, awaited on one event loop, as `handle_chat` and `finish` do, with the heap
frozen and the young-generation threshold set as `farebox serve` does. Prints the
best and median of the rounds, µs of `time.process_time` per request, as JSON.
`--src` imports the gateway from another checkout (an A/B of two trees).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkout import use_checkout


def _raw(i: int) -> bytes:
    body = {
        "model": "bench-gpt",
        "messages": [{"role": "user", "content": f"Say hello (request {i})."}],
        "max_tokens": 16,
    }
    return json.dumps(body).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--src", default=None)
    parser.add_argument("--cprofile", default=None)
    args = parser.parse_args()
    use_checkout(args.src)
    import orjson

    from gateway.config import ModelRoute
    from gateway.pipeline import prefix as stage
    from gateway.pipeline.context import Identity, RequestContext, TaskRef
    from gateway.prefix import PrefixChecker, rule_for
    from gateway.state.memory import MemoryState
    from gateway.usage import Usage

    route = ModelRoute(model="mock-model", base_url="http://127.0.0.1:1/v1", family="openai")
    rule = rule_for("openai")
    checker, state = PrefixChecker(), MemoryState()
    loop = asyncio.new_event_loop()
    price = Decimal("0.000002")

    def contexts(first: int, n: int) -> list[Any]:
        made = []
        for i in range(first, first + n):
            raw = _raw(i)
            ctx = RequestContext(
                raw_body=raw, headers={}, body=orjson.loads(raw), alias="bench-gpt"
            )
            ctx.route, ctx.task = route, TaskRef(task_id=f"req-{i}")
            ctx.identity = Identity(caller="key-1")
            ctx.status_code = 200
            made.append(ctx)
        return made

    async def one(ctx: Any) -> None:
        ctx.prefix = await stage.check_prefix(ctx, checker, state, rule, parsed=True)
        ctx.usage = Usage(prompt_tokens=20, completion_tokens=5)
        stage.judge(ctx.prefix, ctx, price, price / 10)
        await stage.remember(ctx.prefix, state)

    async def run(batch: list[Any]) -> float:
        started = time.process_time()
        for ctx in batch:
            await one(ctx)
        return (time.process_time() - started) / len(batch) * 1e6

    loop.run_until_complete(run(contexts(0, 200)))  # warm: caches, history
    # As `farebox serve`: the start-up heap frozen, young collections every 20,000 objects.
    from gateway import heap

    heap.freeze_imports()
    heap.freeze_heap()
    rounds = []
    for r in range(args.rounds):
        batch = contexts(1000 + r * args.n, args.n)
        rounds.append(loop.run_until_complete(run(batch)))
    if args.cprofile:
        import cProfile

        batch = contexts(10**7, args.n)
        profiler = cProfile.Profile()
        profiler.enable()
        loop.run_until_complete(run(batch))
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    out = {
        "src": args.src or "here",
        "us_per_req_rounds": [round(x, 2) for x in rounds],
        "best": round(min(rounds), 2),
        "median": round(statistics.median(rounds), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
