"""CPU per call of the chat parse (`gateway.pipeline.parse.parse`), in-process.

Run: `python bench/parse_bench.py [--src CHECKOUT] [-n 20000]`. Times with
`time.process_time`, best of seven rounds, `parse` of bench/pipeline_cpu.py's small request
(one user message, `max_tokens`; 1,000 bodies that differ in their text, one context
reused) and of bench/agent_step.py's 1 MB fresh prompt (its 1,243 messages; each round
60 bodies, the newest two kept alive as requests in flight would be). `--src` imports the
gateway from another checkout, for an A/B in alternating pairs. Prints one JSON object:
`small_us`, `fresh_1mb_ms`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("-n", type=int, default=20000, help="small parses per round")
    args = parser.parse_args()
    use_checkout(args.src)
    from hotpath_load import write_history

    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.parse import parse

    small = [
        json.dumps(
            {
                "model": "bench-gpt",
                "messages": [{"role": "user", "content": f"Say hello (request {i})."}],
                "max_tokens": 16,
            }
        ).encode()
        for i in range(1000)
    ]
    ctx = RequestContext(raw_body=small[0], headers={})
    rounds = max(1, args.n // len(small))
    best = float("inf")
    for _ in range(7):
        started = time.process_time()
        for _ in range(rounds):
            for raw in small:
                ctx.raw_body = raw
                parse(ctx)
        best = min(best, (time.process_time() - started) / (rounds * len(small)))
    out: dict[str, Any] = {"small_us": round(best * 1e6, 3)}

    history = write_history(Path(tempfile.mkdtemp(prefix="parse-bench-")) / "h.json")
    loaded = json.loads(history.read_text())
    messages = json.dumps(loaded, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]

    def fresh(i: int) -> bytes:
        last = b'{"role":"user","content":"Next step %d: continue."}' % i
        msgs = messages.replace("§N§".encode(), str(i).encode()) + b"," + last
        return b'{"model":"bench-gpt","messages":[' + msgs + b'],"max_tokens":64}'

    best = float("inf")
    for r in range(7):
        bodies = [fresh(r * 60 + i) for i in range(60)]
        alive: list[RequestContext] = []
        started = time.process_time()
        for raw in bodies:
            one = RequestContext(raw_body=raw, headers={})
            parse(one)
            alive = [*alive[-1:], one]
        best = min(best, (time.process_time() - started) / len(bodies))
    out["fresh_1mb_ms"] = round(best * 1000, 3)
    import gateway

    out["gateway"] = str(Path(gateway.__file__).parent)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
