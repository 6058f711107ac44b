"""The 1 MB fresh prompt's stages, as the pipeline runs them, for an instruction count.

Run: `python bench/fresh_share_stages.py N [--src CHECKOUT] [--mode fresh|agent]`.

`bench/agent_step.py --stages` with the prefix stage's keep: `parse_request` (given the
prefix checker's reuse), the history read, `PrefixChecker.check` with the body's bytes,
then, where the tree has it, `keep_messages` (what `pipeline/prefix._check` does for a
body without a task on a route that is not litellm's, so the next fresh prompt's parse
can share its repeated messages), and `remember`. Three unmeasured requests come first;
under callgrind the difference between two values of N is what N requests cost:

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python bench/fresh_share_stages.py 1 --src DIR     # then 6: (second - first) / 5

Without callgrind it prints the CPU ms per request of the N (`time.process_time`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int)
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("--mode", choices=("fresh", "agent"), default="fresh")
    args = parser.parse_args()
    use_checkout(args.src)
    from hotpath_load import write_history

    from gateway.pipeline import parse as parse_stage
    from gateway.pipeline import prefix as stage
    from gateway.pipeline.context import RequestContext
    from gateway.prefix import PrefixChecker, rule_for
    from gateway.state.memory import MemoryState

    history = write_history(Path(tempfile.mkdtemp(prefix="fresh-share-")) / "h.json")
    loaded = json.loads(history.read_text())
    messages = json.dumps(loaded, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]
    agent = args.mode == "agent"

    def body(i: int) -> bytes:
        last = json.dumps({"role": "user", "content": f"Next step {i}: continue."}).encode()
        msgs = messages.replace("§N§".encode(), b"0" if agent else str(i).encode())
        return b'{"model":"bench-gpt","messages":[' + msgs + b"," + last + b'],"max_tokens":64}'

    rule, checker, state = rule_for("openai"), PrefixChecker(), MemoryState()
    keep = getattr(parse_stage, "keep_messages", None)
    keys = ["task:t", "caller:anonymous:bench-gpt"] if agent else ["caller:anonymous:bench-gpt"]
    headers = {"x-task-id": "t"} if agent else {}
    loop = asyncio.new_event_loop()
    bodies = [body(i) for i in range(args.n + 3)]
    started = 0.0
    for index, raw in enumerate(bodies):
        if index == 3:
            started = time.process_time()
        ctx = RequestContext(raw_body=raw, headers=headers)
        loop.run_until_complete(parse_stage.parse_request(ctx, checker.reuse))
        stored = loop.run_until_complete(state.prefix_history(keys))
        records = [stage._record_of(item) for item in stored]
        assert ctx.request is not None
        extra: dict[str, Any] = {}
        if agent:
            extra = {"reuse_key": "task:t", "validated": ctx.request.messages, "keep_parsed": True}
        check = checker.check(ctx.body, rule, records, raw=raw, **extra)
        if keep is not None and not agent:
            keep(ctx, checker.reuse)
        outcome = stage.PrefixOutcome(check, "openai", keys)
        loop.run_until_complete(stage.remember(outcome, state))
        del ctx, records, check, outcome
    spent = time.process_time() - started
    print(json.dumps({"mode": args.mode, "n": args.n, "cpu_ms_per_req": spent * 1000 / args.n}))


if __name__ == "__main__":
    main()
