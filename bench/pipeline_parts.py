"""CPU per call of the pipeline's pure parts for one small request, in-process.

Run: `python bench/pipeline_parts.py [--src CHECKOUT] [-n 20000]`. Times, with
`time.process_time` (this process's CPU, so the neighbours on a shared box matter less than
for wall time), the best of five rounds of `n` calls each: the policy plan (`plan_route`),
the prefix check against one earlier request, the cache rule, pricing (`cost_of`), eight
money strings (what a reply's `usage.cost` and headers render) and a ledger row. The
request is bench/pipeline_cpu.py's (one user message, an alias renamed upstream).
`--src` imports the gateway from another checkout (an A/B of two trees). Prints one JSON
object of microseconds per call.
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
    args = parser.parse_args()
    use_checkout(args.src)
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


if __name__ == "__main__":
    main()
