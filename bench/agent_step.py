"""CPU per request of one 1 MB agent step (or fresh prompt) through Farebox, alone.

Run: `python bench/agent_step.py [--mode agent|fresh] [-n 150] [--src OTHER_CHECKOUT]
[--profile out.txt --rate 1000]`.

A thin front on `bench/pipeline_cpu.py` (same mock, loadgen, pinning and /proc CPU
accounting) that writes the 1 MB history of `bench/hotpath_load.py` and, for an agent step,
sends it with one task id (`--task-prefix bench-agent --tasks 1`), as `bench/hotpath.py`
does: so the prefix check runs against the task's previous request. Only Farebox is loaded
(`--with-minproxy` adds the floor).

`--parts [--src CHECKOUT] [-n 200]` times instead, in this process with
`time.process_time` (all its threads: a hop to a worker thread counts), the stages a 1 MB
body is heavy in (see `parts`): the parse, the history read, the prefix check of each
step against the previous ones (a task's, so its repeated messages can be reused where
the tree can) and remembering it, for the agent step and the fresh prompt. Prints the
median of 5 rounds, ms per request.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_cpu
from hotpath_load import write_history

_load = pipeline_cpu._load


def _load_with_task(args, url, n, warmup):  # type: ignore[no-untyped-def]
    """loadgen with one task id for an agent step (the hot path's agent scenario)."""
    if args.history_file and args.history_mode == "agent" and "--task-prefix" not in sys.argv:
        real_run = pipeline_cpu.subprocess.run

        def run(cmd, **kw):  # type: ignore[no-untyped-def]
            return real_run([*cmd, "--task-prefix", "bench-agent", "--tasks", "1"], **kw)

        pipeline_cpu.subprocess.run = run  # type: ignore[assignment]
        try:
            return _load(args, url, n, warmup)
        finally:
            pipeline_cpu.subprocess.run = real_run
    return _load(args, url, n, warmup)


def parts(src: str | None, n: int) -> dict[str, float]:
    """ms of CPU per request of the stages a 1 MB body is heavy in, agent step and fresh.

    As the chat pipeline runs them, in this process: `parse_request` (given the prefix
    checker's reuse where the tree takes it), the history read (the in-process state and
    `_record_of`), the prefix check (the task's, reusing and keeping what it can) and
    `remember`; `free` is dropping the request's objects. Each request is one step of
    one task (agent) or a new prompt (fresh).
    """
    import asyncio
    import inspect
    import statistics
    import time

    if src:  # the other checkout's gateway, not this venv's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, src)
    from gateway.pipeline import prefix as stage
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.parse import parse_request
    from gateway.prefix import PrefixChecker, rule_for
    from gateway.state.memory import MemoryState

    history = write_history(Path(tempfile.mkdtemp(prefix="agent-parts-")) / "h.json")
    # As loadgen sends it: compact, UTF-8 (the file escapes the system prompt's mark)
    loaded = json.loads(history.read_text())
    messages = json.dumps(loaded, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]
    rule = rule_for("openai")
    reuses = "reuse_key" in inspect.signature(PrefixChecker.check).parameters
    keeps = "validated" in inspect.signature(PrefixChecker.check).parameters
    parse_reuses = "reuse" in inspect.signature(parse_request).parameters
    loop = asyncio.new_event_loop()

    def body(i: int, fresh: bool) -> bytes:
        mark = str(i).encode() if fresh else b"0"
        last = b'{"role":"user","content":"Next step %d: continue."}' % i
        return (
            b'{"model":"bench-gpt","messages":['
            + messages.replace("§N§".encode(), mark)
            + b","
            + last
            + b'],"max_tokens":64}'
        )

    def step(checker: Any, state: Any, raw: bytes, fresh: bool, times: dict[str, float]) -> None:
        keys = ["caller:anonymous:bench-gpt"] if fresh else ["task:t", "caller:anonymous:bench-gpt"]
        ctx = RequestContext(raw_body=raw, headers={} if fresh else {"x-task-id": "t"})
        marks = [time.process_time()]
        extra: dict[str, Any] = {"reuse": checker.reuse} if parse_reuses and not fresh else {}
        loop.run_until_complete(parse_request(ctx, **extra))
        marks.append(time.process_time())
        records = [stage._record_of(d) for d in loop.run_until_complete(state.prefix_history(keys))]
        marks.append(time.process_time())
        extra = {"raw": raw, "reuse_key": "task:t"} if reuses and not fresh else {}
        if keeps and not fresh and ctx.request is not None:
            extra["validated"] = ctx.request.messages
        check = checker.check(ctx.body, rule, records, **extra)
        marks.append(time.process_time())
        outcome = stage.PrefixOutcome(check, "openai", keys)
        loop.run_until_complete(stage.remember(outcome, state))
        marks.append(time.process_time())
        del ctx, records, check, outcome
        marks.append(time.process_time())
        for name, (a, b) in zip(times, itertools.pairwise(marks), strict=True):
            times[name] += b - a

    out: dict[str, float] = {"reuse": float(reuses), "parse_reuse": float(parse_reuses)}
    names = ("parse", "history", "check", "remember", "free")
    for fresh in (False, True):
        rounds: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(5):
            checker, state = PrefixChecker(), MemoryState()
            bodies = [body(i, fresh) for i in range(n + 3)]
            times = dict.fromkeys(names, 0.0)
            for i, raw in enumerate(bodies):
                if i == 3:  # the first steps are first sights: not what a step costs
                    times = dict.fromkeys(names, 0.0)
                step(checker, state, raw, fresh, times)
            for name in names:
                rounds[name].append(times[name] * 1000 / n)
        kind = "fresh" if fresh else "agent"
        for name, values in rounds.items():
            out[f"{kind}_{name}_ms"] = round(statistics.median(values), 3)
        out[f"{kind}_total_ms"] = round(sum(out[f"{kind}_{name}_ms"] for name in names), 3)
    return out


def main() -> None:
    argv = sys.argv[1:]
    if "--parts" in argv:
        src = argv[argv.index("--src") + 1] if "--src" in argv else None
        n = int(argv[argv.index("-n") + 1]) if "-n" in argv else 100
        print(json.dumps(parts(src, n)))
        return
    mode = "agent"
    if "--mode" in argv:
        at = argv.index("--mode")
        mode = argv[at + 1]
        del argv[at : at + 2]
    only = [] if "--with-minproxy" in argv else ["--only", "farebox"]
    argv = [a for a in argv if a != "--with-minproxy"]
    history = write_history(Path(tempfile.mkdtemp(prefix="agent-step-")) / "history-1mb.json")
    defaults = ["-c", "1", "-n", "150", "--warm", "30"]
    sys.argv = [sys.argv[0], *defaults, *only, "--history-file", str(history)]
    sys.argv += ["--history-mode", mode, *argv]
    pipeline_cpu._load = _load_with_task
    pipeline_cpu.main()


if __name__ == "__main__":
    main()
