"""What `observe_metrics` costs per finished request: a streamed reply's counts and latencies.

Run: `python bench/metrics_observe.py [--src CHECKOUT] [--rounds 30] [--calls 2000]`.

Builds one request context as the pipeline leaves it after a streamed reply (parsed,
identified, routed; usage of 20 prompt and 16 completion tokens, its cost, the times to
first token, first answer token and last token), then times `rounds` blocks of `calls`
`observe_metrics` calls on a fresh `Metrics` (after one call that makes its children).
Prints the best and median block in microseconds per call. For an exact count on a
shared box, run it under callgrind twice, `--rounds 0` and `--rounds 5`, and divide the
difference of the two totals by `5 x calls` (instructions per call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from decimal import Decimal

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    use_checkout(args.src)
    from gateway.config import parse_config
    from gateway.metrics import Metrics
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.decide import decide
    from gateway.pipeline.identify import identify
    from gateway.pipeline.parse import parse
    from gateway.pipeline.record import BookedCost, observe_metrics
    from gateway.pricing import ModelPrice, PriceSheet, cost_of
    from gateway.usage import Usage

    config = parse_config("models:\n  m:\n    model: up\n    base_url: http://h/v1\n")
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    ctx = RequestContext(raw_body=body, headers={}, request_id="req-1")
    parse(ctx)
    identify(ctx)
    decide(ctx, config)
    ctx.usage = Usage(prompt_tokens=20, completion_tokens=16)
    sheet = PriceSheet(input=Decimal(1), output=Decimal(2))
    ctx.cost = cost_of(ModelPrice(model="m", standard={0: sheet}), ctx.usage)
    ctx.status_code, ctx.tier_served = 200, "standard"
    timings = ctx.timings
    timings.upstream_sent = timings.received + 0.001
    timings.first_token = timings.first_answer_token = timings.upstream_sent + 0.002
    timings.last_token = timings.first_token + 0.01
    timings.finished = timings.last_token + 0.0001
    booked = BookedCost.of(ctx.cost)
    metrics = Metrics()
    observe_metrics(metrics, ctx, booked)
    blocks = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        for _ in range(args.calls):
            observe_metrics(metrics, ctx, booked)
        blocks.append((time.perf_counter() - started) / args.calls * 1e6)
    summary: dict[str, object] = {"src": args.src, "rounds": args.rounds, "calls": args.calls}
    if blocks:
        summary |= {
            "best_us": round(min(blocks), 2),
            "median_us": round(statistics.median(blocks), 2),
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
