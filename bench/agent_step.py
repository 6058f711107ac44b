"""CPU per request of one 1 MB agent step (or fresh prompt) through Farebox, alone.

Run: `python bench/agent_step.py [--mode agent|fresh] [-n 150] [--src OTHER_CHECKOUT]
[--profile out.txt --rate 1000]`.

A thin front on `bench/pipeline_cpu.py` (same mock, loadgen, pinning and /proc CPU
accounting) that writes the 1 MB history of `bench/hotpath_load.py` and, for an agent step,
sends it with one task id (`--task-prefix bench-agent --tasks 1`), as `bench/hotpath.py`
does: so the prefix check runs against the task's previous request. Only Farebox is loaded
(`--with-minproxy` adds the floor).

`--parts [--src CHECKOUT] [-n 200]` times instead, in this process with
`time.process_time` (all its threads: a hop to a worker thread counts), the two stages a
1 MB body is heavy in: `parse_request` and the prefix check of each step against the
previous one (a task's, so its repeated messages can be reused where the tree can), for
the agent step and the fresh prompt. Prints the median of 5 rounds, ms per request.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

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
            pipeline_cpu.subprocess.run = real_run  # type: ignore[assignment]
    return _load(args, url, n, warmup)


def parts(src: str | None, n: int) -> dict[str, float]:
    """ms of CPU per request of the parse and the prefix check, agent step and fresh."""
    import asyncio
    import inspect
    import statistics
    import time

    if src:  # the other checkout's gateway, not this venv's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
        sys.path.insert(0, src)
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.parse import parse_request
    from gateway.prefix import PrefixChecker, rule_for

    history = write_history(Path(tempfile.mkdtemp(prefix="agent-parts-")) / "h.json")
    messages = history.read_bytes()[1:-1]
    rule = rule_for("vllm")
    reuses = "reuse_key" in inspect.signature(PrefixChecker.check).parameters
    loop = asyncio.new_event_loop()

    def body(i: int, fresh: bool) -> bytes:
        mark = str(i).encode() if fresh else b"0"
        last = b'{"role":"user","content":"Next step %d: continue."}' % i
        return (
            b'{"model":"m","messages":['
            + messages.replace("§N§".encode(), mark)
            + b","
            + last
            + b'],"max_tokens":64}'
        )

    out: dict[str, float] = {"reuse": float(reuses)}
    for fresh in (False, True):
        bodies = [body(i, fresh) for i in range(n + 1)]
        rounds: dict[str, list[float]] = {"parse": [], "prefix": []}
        for _ in range(5):
            checker = PrefixChecker()
            ctxs = [RequestContext(raw_body=raw, headers={}) for raw in bodies]
            start = time.process_time()
            for ctx in ctxs:
                loop.run_until_complete(parse_request(ctx))
            rounds["parse"].append((time.process_time() - start) * 1000 / len(ctxs))
            record = checker.check(ctxs[0].body, rule).record
            extra = {"raw": ctxs[0].raw_body, "reuse_key": "task:t"} if reuses and not fresh else {}
            checker.check(ctxs[0].body, rule, **extra)  # type: ignore[arg-type]
            start = time.process_time()
            for ctx in ctxs[1:]:
                extra = {"raw": ctx.raw_body, "reuse_key": "task:t"} if reuses and not fresh else {}
                record = checker.check(ctx.body, rule, [record], **extra).record  # type: ignore[arg-type]
            rounds["prefix"].append((time.process_time() - start) * 1000 / n)
        kind = "fresh" if fresh else "agent"
        for stage, values in rounds.items():
            out[f"{kind}_{stage}_ms"] = round(statistics.median(values), 3)
    return out


def main() -> None:
    argv = sys.argv[1:]
    if "--parts" in argv:
        import json

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
