"""CPU per call of the pipeline's pure parts for one small request, in-process.

Run: `python bench/pipeline_parts.py [--src CHECKOUT] [-n 20000]`. Times, with
`time.process_time` (this process's CPU, so the neighbours on a shared box matter less than
for wall time), the best of five rounds of `n` calls each: the policy plan (`plan_route`),
the prefix check against one earlier request, the cache rule, pricing (`cost_of`), eight
money strings (what a reply's `usage.cost` and headers render) and a ledger row. The
request is bench/pipeline_cpu.py's (one user message, an alias renamed upstream).
`--src` imports the gateway from another checkout (an A/B of two trees). Prints one JSON
object of microseconds per call.

`--stages` times the pipeline's stages instead, on a real request's context: it builds the
app as bench/pipeline_inproc.py does (its lifespan, the perf floor's mock on core 0, this
process on core 1), sends it 50 of that bench's requests (`json.dumps`' rendering, as
loadgen sends them), keeps the last one's context, meter and reply, and calls each stage
on them again (`identify`, `apply_policy`, `_build_call`, the meter, pricing, the ledger
row, the metrics, `usage.cost`, the response headers, ...): best of five rounds of `n`.
`--config hot` sends bench/hotpath.py's configuration's request instead (a max_tokens
default, two rules, family openai: what bench/RESULTS.md measures); `--cprofile STAGE`
prints cProfile's top functions over `n` calls of that stage after the timings.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]

CONFIG = """models:
  bench-gpt:
    {provider: openai, model: mock-model, base_url: "http://127.0.0.1:1/v1", family: vllm}
prices:
  bench-gpt: {input: 1.0, output: 2.0}
"""
BODY = {
    "model": "bench-gpt",
    "messages": [{"role": "user", "content": "Say hello (request 1)."}],
    "max_tokens": 16,
}
HEADERS = {"host": "127.0.0.1", "content-type": "application/json", "user-agent": "loadgen"}


def _best(call: Callable[[], Any], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(n):
            call()
        best = min(best, (time.process_time() - start) / n)
    return round(best * 1e6, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--stages", action="store_true", help="the stages of a real request")
    parser.add_argument("--config", choices=("plain", "hot"), default="plain")
    parser.add_argument("--cprofile", help="with --stages: profile this stage")
    args = parser.parse_args()
    use_checkout(args.src)
    if args.stages:
        print(json.dumps(_stages(args.n, args.config, args.cprofile)))
        return
    from decimal import Decimal

    import gateway
    from gateway.config import parse_config
    from gateway.ledger.records import RequestRecord, as_money
    from gateway.policy.facts import RequestFacts
    from gateway.policy.planner import plan_route
    from gateway.prefix.cache_rules import rule_from_model_info
    from gateway.prefix.checker import PrefixChecker
    from gateway.pricing import ModelPrice, PriceSheet, cost_of, load_model_map
    from gateway.pricing.money import money_str
    from gateway.usage import Usage

    config = parse_config(CONFIG)
    model_map = load_model_map()
    facts = RequestFacts.from_headers("bench-gpt", HEADERS)
    checker, rule = PrefixChecker(), rule_from_model_info("vllm", {})
    history = [checker.check(BODY, rule).record]
    sheet = PriceSheet(input=Decimal("0.000001"), output=Decimal("0.000002"))
    price = ModelPrice(model="bench-gpt", standard={0: sheet})
    usage = Usage(prompt_tokens=12, completion_tokens=9)
    money = as_money(Decimal("0.0000123"), "cost")
    row = {"request_id": "r", "task_id": "t", "team": "a", "project": "b", "model_alias": "m"}
    row |= {"cost_input": money, "cost_output": money, "cost_total": money, "prompt_tokens": 5}
    parts = {
        "plan_route": lambda: plan_route(config, model_map, facts, BODY),
        "prefix_check": lambda: checker.check(BODY, rule, history),
        "cache_rule": lambda: rule_from_model_info("vllm", {}),
        "cost_of": lambda: cost_of(price, usage, "standard"),
        "money_str_x8": lambda: [money_str(money) for _ in range(8)],
        "ledger_row": lambda: RequestRecord(**row),
    }
    result = {name: _best(call, args.n) for name, call in parts.items()}
    print(json.dumps({"gateway": gateway.__file__, "us_per_call": result}))


def _stages(n: int, config: str = "plain", profile: str | None = None) -> dict[str, Any]:
    """Microseconds per call of each stage, on the context of a real request (see above)."""
    import asyncio
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import pipeline_inproc as inproc

    floor = Path(
        os.environ.get("FAREBOX_PERF_FLOOR") or inproc.ROOT.parent / "shared" / "perf-floor"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    mock_cmd = [sys.executable, str(floor / "mock_upstream.py"), "--port", str(port)]
    mock = subprocess.Popen(["taskset", "-c", "0", *mock_cmd], stdout=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(0, {1})
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        return asyncio.run(_time_stages(inproc, port, n, config, profile))
    finally:
        mock.terminate()
        mock.wait(10)


async def _time_stages(
    inproc: Any, port: int, n: int, config_name: str, profile: str | None
) -> dict[str, Any]:
    from dataclasses import fields

    import gateway
    import gateway.pipeline.chat as chat
    from gateway.api.chat import request_headers
    from gateway.ledger.records import RoundedRecord
    from gateway.pipeline.context import BodyEdits, RequestContext
    from gateway.pipeline.finish import _judge_prefix, settle
    from gateway.pipeline.identify import identify
    from gateway.pipeline.measure import Meter
    from gateway.pipeline.policy import apply_policy, facts_of
    from gateway.pipeline.price import price_usage
    from gateway.pipeline.record import BookedCost, booked_cost, ledger_record, observe_metrics
    from gateway.pipeline.respond import cost_headers, with_cost

    async with inproc.last_request(port, config_name, False, "farebox-stages-") as last:
        _, state, kept = last
        ctx, meter, services = kept["ctx"], kept["meter"], kept["services"]
        payload, raw, reply_kwargs = kept["payload"], kept["raw"], kept["reply_kwargs"]
        config, prices = services.config, services.prices
        edits = ctx.edits

        def policy() -> Any:
            ctx.edits = BodyEdits(dict(edits.set_fields), set(edits.remove))
            return apply_policy(ctx, config, prices)

        booked = booked_cost(ctx)
        made = ledger_record(ctx, booked)
        row = {
            f.name: getattr(made, f.name)
            for f in fields(made)
            if f.name not in {"id", "created_at"}
        }
        scope = inproc._scope(state, raw)
        stages: dict[str, Any] = {
            "for_request": services.for_request,
            "request_headers": lambda: request_headers(scope),
            "context": lambda: RequestContext(raw_body=raw, headers={}, request_id="r"),
            "identify": lambda: identify(ctx),
            "facts_of": lambda: facts_of(ctx, ctx.alias),
            "apply_policy": policy,
            "edits_copy": edits.copy,
            "build_call": lambda: chat._build_call(ctx, services),
            "observe_reply": lambda: Meter().observe_reply(payload),
            "settle": lambda: settle(ctx, meter, None, False),
            "price_usage": lambda: price_usage(
                ctx, meter.usage, prices, config.price_key(ctx.alias)
            ),
            "booked_cost_of": lambda: BookedCost.of(ctx.cost),
            "judge_prefix": lambda: _judge_prefix(ctx, services),
            "ledger_record": lambda: ledger_record(ctx, booked),
            "record_init": lambda: RoundedRecord(**row),
            "observe_metrics": lambda: observe_metrics(services.metrics, ctx, booked),
            "with_cost": lambda: with_cost(payload, raw, ctx, **reply_kwargs),
            "reply_headers": lambda: chat._headers(ctx) | cost_headers(ctx),
        }
        result = {name: _best(call, n) for name, call in stages.items()}
        if profile is not None:
            _profile(stages[profile], n)
    return {"gateway": gateway.__file__, "config": config_name, "us_per_call": result}


def _profile(call: Callable[[], Any], n: int) -> None:
    """cProfile's top functions (internal time) over `n` calls, to stderr."""
    import cProfile
    import pstats
    import sys

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(n):
        call()
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
