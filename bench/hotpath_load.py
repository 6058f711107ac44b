"""One measured load run for bench/hotpath.py: perf-floor's loadgen.py against one target.

Around each run it reads the target's CPU ticks (its whole process tree), the mock's count
of accepted connections and the namespace's ActiveOpens, so a run yields CPU per request
(ticks over loadgen's `sent`, warm-up included) and upstream connections opened per request.
It reads the load tools' CPU the same way (loadgen's process and the mock's, and Redis's
own count from INFO), for the bound they put on a run that shares their cores.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from hotpath_procs import (
    TICK_S,
    active_opens,
    box_busy_ticks,
    cpu_ticks,
    get_json,
    main_thread_ticks,
    postgres_backend_ticks,
)


@dataclass(frozen=True)
class Scenario:
    """What loadgen sends: small JSON or SSE at a concurrency, or a 1 MB prompt."""

    key: str
    title: str
    stream: bool
    concurrency: int
    history: str | None = None  # "agent" (same history + one turn, task id) or "fresh"


SMALL_JSON_C1 = Scenario("json-c1", "small, whole reply, c=1", False, 1)
SMALL_SSE_C1 = Scenario("sse-c1", "small, streamed, c=1", True, 1)
SMALL_JSON_C64 = Scenario("json-c64", "small, whole reply, c=64", False, 64)
SMALL_SSE_C64 = Scenario("sse-c64", "small, streamed, c=64", True, 64)
AGENT_1MB = Scenario("agent-1mb", "1 MB agent step, c=1", False, 1, "agent")
FRESH_1MB = Scenario("fresh-1mb", "1 MB fresh prompt, c=1", False, 1, "fresh")
ALL = (SMALL_JSON_C1, SMALL_SSE_C1, SMALL_JSON_C64, SMALL_SSE_C64, AGENT_1MB, FRESH_1MB)
SMALL = (SMALL_JSON_C1, SMALL_SSE_C1, SMALL_JSON_C64, SMALL_SSE_C64)
THROUGHPUT = (SMALL_JSON_C64, SMALL_SSE_C64)


@dataclass(frozen=True)
class Budget:
    """How much one run may send and for how long (the mode's bound on the whole bench)."""

    seconds: float
    small_c1: int
    small_c64: int
    large: int
    warmup_c1: int = 20
    warmup_c64: int = 64  # one per connection: pools are already full from the pre-warm
    warmup_large: int = 3
    passes: int = 1  # each scenario this many times, in turns; medians are reported

    def requests(self, scenario: Scenario) -> tuple[int, int]:
        """(measured requests, warm-up requests) for `scenario`."""
        if scenario.history:
            return self.large, self.warmup_large
        if scenario.concurrency == 1:
            return self.small_c1, self.warmup_c1
        return self.small_c64, self.warmup_c64


@dataclass
class Run:
    """One scenario against one target: loadgen's summary plus what /proc and the mock say."""

    target: str
    scenario: str
    completed: int = 0
    sent: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    cpu_ms_per_request: float | None = None
    upstream_opens: int | None = None
    opens_per_request: float | None = None
    active_opens_delta: int = 0
    loadavg_1m: float = 0.0
    passes: int = 1
    # CPU the target spent after loadgen ended, until it went quiet (the ledger applying
    # the run's rows): counted in cpu_ms_per_request, per request sent
    trailing_cpu_ms_per_request: float | None = None
    # The load tools' CPU per request sent over the same interval: loadgen's process and
    # the mock's (from /proc), and Redis's (INFO cpu; the box's Redis, others may use it)
    load_cpu_ms_per_request: float | None = None
    redis_cpu_ms_per_request: float | None = None
    # The PostgreSQL backends serving the target's ledger database (its PostgreSQL rows
    # only): the server's CPU on the same cores, per request sent, trailing work included
    postgres_cpu_ms_per_request: float | None = None
    # The target's main threads (each process's event loop) alone, per request sent; and
    # what every other process on the box took while loadgen ran (the box's busy CPU less
    # the target's, the load tools' and Redis's), per request sent
    main_cpu_ms_per_request: float | None = None
    others_cpu_ms_per_request: float | None = None
    # Each pass's req/s, in the order run (passes of targets measured side by side are
    # in turns: pass i of one and pass i of another ran back to back)
    rps_passes: list[float] = field(default_factory=list)

    def report(self) -> dict[str, object]:
        return asdict(self)


def combine(runs: list[Run]) -> Run:
    """Several passes of one scenario as one: medians of the percentiles and rates (as the
    issue measured), CPU and connections summed over everything sent."""
    if len(runs) == 1:
        return runs[0]
    out = Run(runs[0].target, runs[0].scenario, passes=len(runs))
    out.rps_passes = [run.rps for run in runs]
    out.completed = sum(run.completed for run in runs)
    out.sent = sum(run.sent for run in runs)
    for run in runs:
        for name, count in run.errors.items():
            out.errors[name] = out.errors.get(name, 0) + count
    for name in ("rps", "p50_ms", "p99_ms", "ttft_p50_ms", "ttft_p99_ms", "loadavg_1m"):
        values = [getattr(run, name) for run in runs if getattr(run, name) is not None]
        setattr(out, name, round(statistics.median(values), 3) if values else None)
    cpu = [(run.cpu_ms_per_request, run.sent) for run in runs if run.cpu_ms_per_request is not None]
    if cpu and out.sent:
        out.cpu_ms_per_request = round(sum(ms * sent for ms, sent in cpu) / out.sent, 3)
    opens = [run.upstream_opens for run in runs if run.upstream_opens is not None]
    if opens and out.sent:
        out.upstream_opens = sum(opens)
        out.opens_per_request = round(out.upstream_opens / out.sent, 4)
    out.active_opens_delta = sum(run.active_opens_delta for run in runs)
    trailing = [
        (run.trailing_cpu_ms_per_request, run.sent)
        for run in runs
        if run.trailing_cpu_ms_per_request is not None
    ]
    if trailing and out.sent:
        total = sum(ms * sent for ms, sent in trailing)
        out.trailing_cpu_ms_per_request = round(total / out.sent, 3)
    for name in (
        "load_cpu_ms_per_request",
        "redis_cpu_ms_per_request",
        "postgres_cpu_ms_per_request",
        "main_cpu_ms_per_request",
        "others_cpu_ms_per_request",
    ):
        each = [(getattr(run, name), run.sent) for run in runs if getattr(run, name) is not None]
        sent = sum(count for _, count in each)
        if sent:  # over the passes that read it
            setattr(out, name, round(sum(ms * count for ms, count in each) / sent, 3))
    return out


class LoadWorker:
    """bench/hotpath_loadworker.py pinned to the load core: loadgen.py runs, one at a time."""

    def __init__(self, python: str, floor: Path, core: str) -> None:
        script = Path(__file__).resolve().parent / "hotpath_loadworker.py"
        env = {**os.environ, "FAREBOX_PERF_FLOOR": str(floor)}
        self.popen = subprocess.Popen(
            ["taskset", "-c", core, python, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def run(self, argv: list[str]) -> tuple[int, list[str]]:
        """loadgen.py's exit status and what it printed, for `argv`."""
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write(json.dumps(argv) + "\n")
        self.popen.stdin.flush()
        printed: list[str] = []
        for line in self.popen.stdout:
            if line.startswith("HOTPATH-DONE "):
                return int(line.split()[1]), printed
            printed.append(line.rstrip("\n"))
        raise RuntimeError(f"the load worker exited ({self.popen.wait()}): {printed[-5:]}")

    def close(self) -> None:
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()


@dataclass(frozen=True)
class LoadSetup:
    """Where loadgen lives, what runs it and the 1 MB history it sends."""

    floor: Path
    python: str
    history_file: Path
    core: str
    mock_url: str  # http://127.0.0.1:P, for the connection count
    worker: LoadWorker
    mock_pid: int | None = None  # the mock's process, for the load tools' CPU
    redis: tuple[str, int] | None = None  # (host, port) of the Redis the targets may use

    def load_seconds(self) -> tuple[float, float | None]:
        """CPU seconds so far of loadgen's process and the mock's; Redis's, if it answers."""
        ticks = cpu_ticks(self.worker.popen.pid)
        if self.mock_pid is not None:
            ticks += cpu_ticks(self.mock_pid)
        return ticks * TICK_S, redis_cpu_seconds(self.redis) if self.redis else None

    def shown(self, argv: list[str]) -> list[str]:
        """The equivalent stand-alone command line."""
        return ["taskset", "-c", self.core, self.python, str(self.floor / "loadgen.py"), *argv]

    def run(self, url: str, model: str, scenario: Scenario, budget: Budget) -> dict[str, object]:
        """One loadgen.py run of `scenario`: its summary."""
        with tempfile.TemporaryDirectory(prefix="hotpath-") as folder:
            out = Path(folder) / "run.json"
            status, printed = self.worker.run(loadgen_args(self, url, model, scenario, budget, out))
            if status != 0 or not out.exists():
                raise RuntimeError(f"loadgen failed ({scenario.key}): {printed[-5:]}")
            return json.loads(out.read_text().splitlines()[-1])

    def connections(self) -> int | None:
        """Connections the mock accepted, this request's own included."""
        try:
            return int(str(get_json(f"{self.mock_url}/bench/connections")["connections"]))
        except OSError:
            return None


class Load(Protocol):
    """What drives a measured run and what it costs: loadgen.py and perf-floor's mock
    (LoadSetup), or wrk and nginx (bench/native_load.py)."""

    def run(self, url: str, model: str, scenario: Scenario, budget: Budget) -> dict[str, object]:
        """One run; its summary in loadgen.py's shape. RuntimeError when it failed."""
        ...

    def load_seconds(self) -> tuple[float, float | None]:
        """CPU seconds so far of the load tools; Redis's, if it answers."""
        ...

    def connections(self) -> int | None:
        """Connections the upstream accepted so far, the asking one included."""
        ...


def loadgen_args(
    setup: LoadSetup, url: str, model: str, scenario: Scenario, budget: Budget, out: Path
) -> list[str]:
    """loadgen.py's arguments for one scenario."""
    measured, warmup = budget.requests(scenario)
    argv = ["--url", url, "--model", model, "-c", str(scenario.concurrency)]
    argv += ["-n", str(measured), "--warmup", str(warmup), "--max-seconds", str(budget.seconds)]
    argv += ["--label", scenario.key, "--json-out", str(out), "--timeout", "60"]
    if scenario.stream:
        argv += ["--stream", "--drain"]  # read to the end, as SDKs do: reusable connections
    if scenario.history:
        argv += ["--history-file", str(setup.history_file), "--history-mode", scenario.history]
        if scenario.history == "agent":
            argv += ["--task-prefix", "bench-agent", "--tasks", "1"]
    return argv


def measure(
    setup: Load,
    target: str,
    pid: int | None,
    url: str,
    model: str,
    scenario: Scenario,
    budget: Budget,
    database: str | None = None,
) -> Run:
    """One run of `setup`'s load; `pid` is the process tree under test (None: direct to
    the mock), `database` the PostgreSQL database of its ledger, if any (its backends' CPU
    is read)."""
    opens_before, snmp_before = setup.connections(), active_opens()
    ticks_before = cpu_ticks(pid) if pid else 0
    main_before, box_before = main_thread_ticks(pid) if pid else 0, box_busy_ticks()
    load_before = setup.load_seconds()
    backends_before = postgres_backend_ticks(database) if database else {}
    try:
        summary = setup.run(url, model, scenario, budget)
    except RuntimeError as exc:
        raise RuntimeError(f"{target}: {exc}") from None
    ticks_ended, box_ended = cpu_ticks(pid) if pid else 0, box_busy_ticks()
    load_ended = setup.load_seconds()
    ticks_after = settle(pid, ticks_ended) if pid else 0
    main_after = main_thread_ticks(pid) if pid else 0
    load_after = setup.load_seconds()
    backends_after = postgres_backend_ticks(database) if database else {}
    opens_after, snmp_after = setup.connections(), active_opens()
    run = _from_summary(target, scenario, summary)
    run.active_opens_delta = snmp_after - snmp_before
    run.loadavg_1m = os.getloadavg()[0]
    if pid and run.sent:
        run.cpu_ms_per_request = round((ticks_after - ticks_before) * TICK_S * 1000 / run.sent, 3)
        trailing = (ticks_after - ticks_ended) * TICK_S * 1000 / run.sent
        run.trailing_cpu_ms_per_request = round(trailing, 3)
        run.main_cpu_ms_per_request = round(
            (main_after - main_before) * TICK_S * 1000 / run.sent, 3
        )
    if run.sent:
        ours = (ticks_ended - ticks_before) * TICK_S + load_ended[0] - load_before[0]
        if load_ended[1] is not None and load_before[1] is not None:
            ours += load_ended[1] - load_before[1]
        others = (box_ended - box_before) * TICK_S - ours
        run.others_cpu_ms_per_request = round(max(others, 0.0) * 1000 / run.sent, 3)
    if run.sent:
        load = (load_after[0] - load_before[0]) * 1000 / run.sent
        run.load_cpu_ms_per_request = round(load, 3)
        if load_after[1] is not None and load_before[1] is not None:
            redis = (load_after[1] - load_before[1]) * 1000 / run.sent
            run.redis_cpu_ms_per_request = round(redis, 3)
    if database and run.sent:
        backends = _grown(backends_before, backends_after) * TICK_S * 1000 / run.sent
        run.postgres_cpu_ms_per_request = round(backends, 3)
    if pid and run.sent and opens_before is not None and opens_after is not None:
        run.upstream_opens = opens_after - opens_before - 1  # the count's own connection
        run.opens_per_request = round(run.upstream_opens / run.sent, 4)
    return run


def _grown(before: dict[int, int], after: dict[int, int]) -> int:
    """Ticks the processes in `after` spent since `before` (one started meanwhile: all of
    its ticks; one that ended meanwhile is not seen, and the pool keeps its connections)."""
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items())


def settle(pid: int, ticks: int, window_s: float = 0.3, limit_s: float = 20.0) -> int:
    """`pid`'s CPU ticks once it has gone quiet (at most one tick in `window_s`).

    A run leaves work behind it: at c=64 the ledger applies thousands of rows to SQLite
    for up to a few seconds after loadgen's last reply (200-800 ms of CPU measured here).
    Read at once, that CPU was booked to the next run: the 1 MB agent step, which follows
    the c=64 runs, showed 12-21 ms of CPU per request instead of 7-8. So each run waits
    for quiet and keeps the work it caused.
    """
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(window_s)
        now = cpu_ticks(pid)
        if now - ticks <= 1:
            return now
        ticks = now
    return ticks


def redis_cpu_seconds(address: tuple[str, int]) -> float | None:
    """used_cpu_user + used_cpu_sys of the Redis server at `address` (INFO cpu), or None."""
    try:
        with socket.create_connection(address, timeout=1) as conn:
            conn.sendall(b"INFO cpu\r\n")
            reply = b""
            while b"used_cpu_user:" not in reply or not reply.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return None
    fields = dict(
        line.split(":", 1) for line in reply.decode(errors="replace").splitlines() if ":" in line
    )
    try:
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])
    except (KeyError, ValueError):
        return None


def _from_summary(target: str, scenario: Scenario, summary: dict[str, object]) -> Run:
    lat = _dict(summary["lat_ms"])
    run = Run(target, scenario.key)
    run.completed = int(str(summary["completed"]))
    run.sent = int(str(summary["sent"]))
    run.errors = {str(k): int(str(v)) for k, v in _dict(summary.get("errors") or {}).items()}
    run.rps = float(str(summary["rps"]))
    run.p50_ms, run.p99_ms = float(str(lat["p50"])), float(str(lat["p99"]))
    if scenario.stream and "ttft_content_ms" in summary:  # wrk measures none
        ttft = _dict(summary["ttft_content_ms"])
        run.ttft_p50_ms, run.ttft_p99_ms = float(str(ttft["p50"])), float(str(ttft["p99"]))
    return run


def _dict(value: object) -> dict[str, object]:
    assert isinstance(value, dict)
    return value


def probe_ready(setup: LoadSetup, url: str, model: str, launched: float, pid: int) -> float:
    """Seconds from launch to the first chat request answered 200 (loadgen --probe-ready)."""
    argv = ["--probe-ready", "--url", url, "--model", model, "--t0", repr(launched)]
    status, printed = setup.worker.run([*argv, "--pid", str(pid), "--max-seconds", "120"])
    ready = json.loads(printed[-1]).get("ready_s") if printed else None
    if status != 0 or ready is None:
        raise RuntimeError(f"{url} served no request: {printed[-3:]}")
    return float(ready)


def write_history(path: Path, size: int = 1_000_000) -> Path:
    """A coding agent's history of about `size` bytes (1 MB: under aiohttp's 1 MiB body limit,
    which minproxy.py keeps): system, then user/assistant/tool turns.

    The system prompt carries loadgen's `§N§` mark, so a fresh prompt differs from its first
    bytes on (nothing cacheable) while an agent step repeats the same history.
    """
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Session §N§. Follow the plan."}
    ]
    turn, used = 0, 0
    while used < size:
        code = "".join(
            f"def step_{turn}_{line}(x):\n    return x * {line} + {turn}  # keep\n"
            for line in range(40)
        )
        call_id = f"call_{turn}"
        messages += [
            {"role": "user", "content": f"Turn {turn}: read module {turn} and fix the bug."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {turn}}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": code},
        ]
        used += len(json.dumps(messages[-3:])) + 3
        turn += 1
    path.write_text(json.dumps(messages))
    return path
