"""CPU per request of one 1 MB agent step (or fresh prompt) through Farebox, alone.

Run: `python bench/agent_step.py [--mode agent|fresh] [-n 150] [--src OTHER_CHECKOUT]
[--profile out.txt --rate 1000]`.

A thin front on `bench/pipeline_cpu.py` (same mock, loadgen, pinning and /proc CPU
accounting) that writes the 1 MB history of `bench/hotpath_load.py` and, for an agent step,
sends it with one task id (`--task-prefix bench-agent --tasks 1`), as `bench/hotpath.py`
does: so the prefix check runs against the task's previous request. Only Farebox is loaded
(`--with-minproxy` adds the floor).

`--check-stages N [--mode fresh|small]` runs the prefix check alone N times, for callgrind
(see `check_stages`).

`--inproc [--mode agent|fresh] [-n 100] [--src CHECKOUT]` sends the 1 MB request through
the real app in this process (its lifespan, every middleware, the mock upstream): CPU and
garbage collections per request (see `inproc`). `--stages N [--mode agent|fresh|split]`
runs the 1 MB stages N times for callgrind (see `stages`).

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

ROOT = Path(__file__).resolve().parents[1]

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
    keeps_parsed = "keep_parsed" in inspect.signature(PrefixChecker.check).parameters
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
        if fresh and reuses:  # as the pipeline: the bytes of its unedited messages
            extra = {"raw": raw}
        if keeps and not fresh and ctx.request is not None:
            extra["validated"] = ctx.request.messages
            if keeps_parsed:  # as the pipeline does on a route not through litellm
                extra["keep_parsed"] = True
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


def inproc(
    src: str | None, n: int, mode: str, rounds: int = 5, threshold: int = 0
) -> dict[str, Any]:
    """ms of CPU per 1 MB request through the real app in this process (no HTTP server).

    bench/pipeline_inproc.py's setup (the app and its lifespan, the perf floor's mock on
    core 0, this process on core 1, bench/hotpath.py's configuration), sending loadgen's
    1 MB agent step (one task id) or fresh prompt. Also counts the garbage collector's
    passes per request and the time they took (`gc.callbacks`). Median of `rounds`.
    `threshold` (`--gc-threshold N`): the collector's gen-0 threshold once the app is up.
    """
    import gc
    import os
    import socket
    import statistics
    import subprocess
    import time

    from checkout import use_checkout

    use_checkout(src)
    import pipeline_inproc
    from hotpath_targets import FAREBOX_CONFIG

    history = write_history(Path(tempfile.mkdtemp(prefix="agent-inproc-")) / "h.json")
    loaded = json.loads(history.read_text())
    messages = json.dumps(loaded, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]

    def body(i: int) -> bytes:
        last = json.dumps({"role": "user", "content": f"Next step {i}: continue."}).encode()
        mark = str(i).encode() if mode == "fresh" else b"0"
        msgs = messages.replace("§N§".encode(), mark) + b"," + last
        return b'{"model":"bench-gpt","messages":[' + msgs + b'],"max_tokens":64}'

    gc_times: list[float] = []
    gc_started = [0.0]
    by_gen: dict[int, list[float]] = {0: [], 1: [], 2: []}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            gc_times.append((time.thread_time() - gc_started[0]) * 1000)
            by_gen[info["generation"]].append(gc_times[-1])

    async def one(app: Any, state: dict[str, Any], raw: bytes, statuses: list[int]) -> None:
        scope = pipeline_inproc._scope(state, raw)
        if mode == "agent":
            scope["headers"] = [*scope["headers"], (b"x-task-id", b"bench-agent-0")]

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await app(scope, pipeline_inproc._receive(raw), send)

    async def run(port: int) -> dict[str, Any]:
        from gateway.app import create_app
        from gateway.settings import Settings

        data = Path(tempfile.mkdtemp(prefix="farebox-inproc-"))
        config = data / "config.yaml"
        base = f"http://127.0.0.1:{port}/v1"
        config.write_text(
            FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)
        )
        app = create_app(Settings(data_dir=data, config=config, log_level="warning"))
        cpu: list[float] = []
        passes: list[float] = []
        spent: list[float] = []
        async with app.router.lifespan_context(app) as given:
            if threshold:  # what a serving process's higher gen-0 threshold would save
                gc.set_threshold(threshold, *gc.get_threshold()[1:])
            state = dict(given or {})
            statuses: list[int] = []
            for i in range(20):
                await one(app, state, body(-i - 1), statuses)
            gc.callbacks.append(on_gc)
            for r in range(rounds):
                bodies = [body(r * n + i) for i in range(n)]
                gc_times.clear()
                started = time.process_time()
                for raw in bodies:
                    await one(app, state, raw, statuses)
                cpu.append((time.process_time() - started) * 1000 / n)
                passes.append(len(gc_times) / n)
                spent.append(sum(gc_times) / n)
            gc.callbacks.remove(on_gc)
            per_gen = {
                g: (len(t) / n / rounds, round(sum(t) / n / rounds, 3)) for g, t in by_gen.items()
            }
            if set(statuses) != {200}:
                raise RuntimeError(f"the gateway answered {sorted(set(statuses))}")
        import gateway

        return {
            "mode": mode,
            "gateway": str(Path(gateway.__file__).parent),
            "cpu_ms_per_req": round(statistics.median(cpu), 3),
            "cpu_rounds": [round(c, 3) for c in cpu],
            "gc_passes_per_req": round(statistics.median(passes), 2),
            "gc_ms_per_req": round(statistics.median(spent), 3),
            "gc_by_generation": per_gen,
            "gc_frozen": gc.get_freeze_count(),
            "gc_counts": [len(gc.get_objects(g)) for g in range(3)],
        }

    port = pipeline_inproc._free_port()
    floor = Path(os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor")
    mock = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            str(floor / "mock_upstream.py"),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        os.sched_setaffinity(0, {1})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        import uvloop

        return uvloop.run(run(port))
    finally:
        mock.terminate()


def stages(src: str | None, n: int, mode: str) -> None:
    """Run `n` requests' 1 MB stages in this process, for an instruction count.

    `agent` or `fresh`: `parse_request` (with the prefix checker's reuse), the history
    read, the prefix check (a task's, for `agent`) and `remember`, as `parts` times them;
    `split`: `split_request` of the fresh prompt alone. Three unmeasured requests come
    first. Under callgrind the difference between two values of `n` is what `n` requests
    cost, start-up and imports left out:

        valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/agent_step.py \
            --stages 0 --mode agent   # then --stages 10: (second - first) / 10
    """
    import asyncio
    import inspect

    from checkout import use_checkout

    use_checkout(src)
    from gateway.pipeline import prefix as stage
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.parse import parse_request
    from gateway.prefix import PrefixChecker, rule_for, split_request
    from gateway.state.memory import MemoryState

    history = write_history(Path(tempfile.mkdtemp(prefix="agent-stages-")) / "h.json")
    loaded = json.loads(history.read_text())
    messages = json.dumps(loaded, separators=(",", ":"), ensure_ascii=False).encode()[1:-1]

    def body(i: int) -> bytes:
        last = json.dumps({"role": "user", "content": f"Next step {i}: continue."}).encode()
        mark = str(i).encode() if mode != "agent" else b"0"
        msgs = messages.replace("§N§".encode(), mark) + b"," + last
        return b'{"model":"bench-gpt","messages":[' + msgs + b'],"max_tokens":64}'

    rule, checker, state = rule_for("openai"), PrefixChecker(), MemoryState()
    if mode == "split":
        parsed = json.loads(body(0))
        for _ in range(n + 3):
            split_request(parsed, rule)
        return
    loop = asyncio.new_event_loop()
    params = inspect.signature(PrefixChecker.check).parameters
    keys = (
        ["task:t", "caller:anonymous:bench-gpt"]
        if mode == "agent"
        else ["caller:anonymous:bench-gpt"]
    )
    for raw in [body(i) for i in range(n + 3)]:
        ctx = RequestContext(raw_body=raw, headers={"x-task-id": "t"} if mode == "agent" else {})
        loop.run_until_complete(parse_request(ctx, checker.reuse))
        records = [stage._record_of(d) for d in loop.run_until_complete(state.prefix_history(keys))]
        # As the pipeline: the body's bytes with its unedited messages (fresh: no task)
        extra: dict[str, Any] = {"raw": raw} if "raw" in params else {}
        if mode == "agent" and ctx.request is not None:
            extra = {"raw": raw, "reuse_key": "task:t", "validated": ctx.request.messages}
            if "keep_parsed" in params:
                extra["keep_parsed"] = True
        check = checker.check(ctx.body, rule, records, **extra)
        outcome = stage.PrefixOutcome(check, "openai", keys)
        loop.run_until_complete(stage.remember(outcome, state))
        del ctx, records, check, outcome


def check_stages(src: str | None, n: int, mode: str) -> None:
    """Run `n` prefix checks alone (no parse, no pipeline), for an instruction count.

    `fresh`: the 1 MB fresh prompt (`write_history`, its system prompt's mark changed each
    time); `small`: bench/pipeline_cpu.py's one-message request ("request i"). Each body is
    parsed (orjson) before the counted part, for as many as the larger run sends, and
    checked against the caller's last four records, then made ready for the store
    (`to_dict`), as `remember` does. Under callgrind, (I(n2) - I(n1)) / (n2 - n1) is what
    one check costs:

        valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/agent_step.py \
            --check-stages 1 --mode fresh   # then 6; small: 10, then 1010 (--src CHECKOUT)
    """
    from checkout import use_checkout

    use_checkout(src)
    import orjson

    from gateway.prefix import PrefixChecker, rule_for

    if mode == "fresh":
        history = write_history(Path(tempfile.mkdtemp(prefix="agent-check-")) / "h.json")
        raw = orjson.dumps(orjson.loads(history.read_bytes()))[1:-1]

        def body(i: int) -> bytes:
            last = b'{"role":"user","content":"Next step %d: continue."}' % i
            msgs = raw.replace("§N§".encode(), str(i).encode()) + b"," + last
            return b'{"model":"bench-gpt","messages":[' + msgs + b'],"max_tokens":64}'

        rule, total = rule_for("openai"), 15
    else:

        def body(i: int) -> bytes:
            content = b'"Say hello (request %d)."' % i
            return b'{"model":"bench-gpt","messages":[{"role":"user","content":%s}]}' % content

        rule, total = rule_for("vllm"), 2010
    bodies = [orjson.loads(body(i)) for i in range(max(total, n + 3))][: n + 3]
    checker, records = PrefixChecker(), []
    for parsed in bodies:
        check = checker.check(parsed, rule, records)
        check.record.to_dict()
        records = [*records, check.record][-4:]


def main() -> None:
    argv = sys.argv[1:]
    if "--check-stages" in argv:
        src = argv[argv.index("--src") + 1] if "--src" in argv else None
        mode = argv[argv.index("--mode") + 1] if "--mode" in argv else "fresh"
        check_stages(src, int(argv[argv.index("--check-stages") + 1]), mode)
        return
    if "--stages" in argv:
        src = argv[argv.index("--src") + 1] if "--src" in argv else None
        mode = argv[argv.index("--mode") + 1] if "--mode" in argv else "agent"
        stages(src, int(argv[argv.index("--stages") + 1]), mode)
        return
    if "--inproc" in argv:
        src = argv[argv.index("--src") + 1] if "--src" in argv else None
        n = int(argv[argv.index("-n") + 1]) if "-n" in argv else 100
        mode = argv[argv.index("--mode") + 1] if "--mode" in argv else "agent"
        at = argv.index("--gc-threshold") + 1 if "--gc-threshold" in argv else 0
        print(json.dumps(inproc(src, n, mode, threshold=int(argv[at]) if at else 0)))
        return
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
