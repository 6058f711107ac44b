"""Issue 12's targets, each judged against one bench/hotpath.py run.

Every goal reads runs measured side by side in the same invocation: added latency is a
gateway percentile minus the direct-to-mock percentile of the same scenario; ratios are
to minproxy.py (the floor) or to LiteLLM's proxy from the same run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hotpath_load import Run

FB, PG, W2 = "farebox-sqlite", "farebox-pg-redis", "farebox-2-workers"
W1 = "farebox-1-worker"
# Said where an added latency came out below zero, and kept on a met row.
NOISE = (
    "; the gateway's percentile fell below the direct run's: "
    "this run's noise exceeds what the gateway adds"
)


@dataclass
class Results:
    """What one invocation measured, keyed by target name then scenario key."""

    runs: dict[str, dict[str, Run]] = field(default_factory=dict)
    ready_s: dict[str, float | None] = field(default_factory=dict)
    rss_mib: dict[str, float] = field(default_factory=dict)  # largest single process
    rss_total_mib: dict[str, float] = field(default_factory=dict)
    pss_uss_mib: dict[str, tuple[float, float]] = field(default_factory=dict)  # largest
    skipped: dict[str, str] = field(default_factory=dict)  # target -> why it did not run
    import_s: float | None = None  # `import gateway.app` on the gateway core
    import_uncompiled: tuple[int, int] | None = None  # (without bytecode, of) its modules
    profile_top: str = ""  # the profile's largest parts, when --profile ran
    log_errors: dict[str, str] = field(default_factory=dict)  # target -> its log's errors
    workers_load: str = "loadgen and mock"  # what drove the 1-vs-2 workers comparison

    def run(self, target: str, scenario: str) -> Run | None:
        return self.runs.get(target, {}).get(scenario)


@dataclass
class Goal:
    """One target of the issue: the value measured, the verdict and what bounds it."""

    name: str
    goal: str
    measured: str = "not measured"
    verdict: str = "not measured"
    bound: str = ""

    def report(self) -> dict[str, str]:
        return asdict(self)


def _judge(goal: Goal, value: float | None, limit: float, unit: str, at_most: bool) -> Goal:
    """Fill `goal` from `value` against `limit` (an upper bound when `at_most`)."""
    if value is None:
        return goal
    goal.measured = f"{value:,.3g} {unit}".strip() if abs(value) < 100 else f"{value:,.0f} {unit}"
    met = value < limit if at_most else value >= limit
    gap = value - limit if at_most else limit - value
    gap_text = f"{gap:,.3g}" if abs(gap) < 100 else f"{gap:,.0f}"
    goal.verdict = "met" if met else f"missed by {gap_text} {unit}".rstrip()
    return goal


def _added(r: Results, target: str, scenario: str, field_name: str) -> float | None:
    ours, direct = r.run(target, scenario), r.run("direct", scenario)
    if ours is None or direct is None:
        return None
    a, b = getattr(ours, field_name), getattr(direct, field_name)
    return None if a is None or b is None else round(a - b, 3)


def _attr(r: Results, target: str, scenario: str, name: str) -> float | None:
    run = r.run(target, scenario)
    value = getattr(run, name) if run else None
    return None if value is None else float(value)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _cpu_bound(r: Results, target: str, scenario: str) -> str:
    """The one-core ceiling implied by CPU per request, against the rate measured."""
    run = r.run(target, scenario)
    if run is None or not run.cpu_ms_per_request:
        return ""
    cores = 2 if target == W2 else 1  # two workers may use both cores
    ceiling = cores * 1000 / run.cpu_ms_per_request
    where = "two cores" if cores == 2 else "one core"
    text = (
        f"{run.cpu_ms_per_request} ms CPU/request caps {where} at {ceiling:,.0f} req/s; "
        f"measured {run.rps:,.0f} req/s with load average {run.loadavg_1m:.1f} on the box"
    )
    if run.postgres_cpu_ms_per_request is not None:
        text += (
            f"; the ledger's PostgreSQL backends took {run.postgres_cpu_ms_per_request} ms "
            "per request on the same cores"
        )
    return text


def workers_bound(r: Results, scenario: str) -> str:
    """The ratio 2 workers can reach on this box's 2 cores, from the CPU per request measured.

    One worker is bounded by its event loop, one thread: m1 ms of main-thread CPU per
    request caps it at 1000/m1 req/s (its other threads, the ledger's SQLite writes, run
    beside it on the other core, so its whole-process CPU g1 may exceed one core's worth;
    bench/hotpath.py's 22:24 run: 0.602 ms, yet 1,808 req/s, not 1000/0.602 = 1,661), and
    by the 2 cores it shares with the load (2000/(g1 + l + r), 1000/l) where those are less.
    Two workers share both cores with the load tools (`r.workers_load`: wrk and nginx, or
    loadgen and the mock; pinned to core 0, l ms per request; and Redis, r): together at
    most 2000/(g2 + l + r), and never more
    than core 0 lets the load tools drive (1000/l). So the attainable ratio is about
    2 m1/(g2 + l + r), well under 2 when l is close to g. What other processes on the box
    took during the 2-worker run (o ms per request sent) is stated beside it: that CPU was
    not the gateway's to use, and 2000/(g2 + l + r + o) is about what was left for it (o
    is read over loadgen's run only, g2 also over the ledger's work after it).
    """
    one, two = r.run(W1, scenario), r.run(W2, scenario)
    if one is None or two is None or not one.cpu_ms_per_request or not two.cpu_ms_per_request:
        return ""
    g1, g2 = one.cpu_ms_per_request, two.cpu_ms_per_request
    load, redis = two.load_cpu_ms_per_request, two.redis_cpu_ms_per_request or 0.0
    if not load:
        return ""
    loop = one.main_cpu_ms_per_request or g1  # without it, the whole process (older runs)
    alone = 1000 / loop
    if one.load_cpu_ms_per_request:  # one worker shares the 2 cores with the load too
        l1, r1 = one.load_cpu_ms_per_request, one.redis_cpu_ms_per_request or 0.0
        alone = min(alone, 2000 / (g1 + l1 + r1), 1000 / l1)
    shared = min(2000 / (g2 + load + redis), 1000 / load)
    if one.main_cpu_ms_per_request:
        one_text = f"1 worker's event loop {loop:.3g} ms (whole process {g1:.3g} ms)"
    else:
        one_text = f"1 worker {g1:.3g} ms"
    text = (
        f"CPU per request: {one_text}, so one worker serves at most {alone:,.0f} req/s; "
        f"2 workers {g2:.3g} ms + {r.workers_load} {load:.3g} ms + Redis {redis:.3g} ms on "
        f"the same 2 cores: at most {shared:,.0f} req/s, so at most {shared / alone:.2f}x "
        f"is attainable here (2m/(g+l+r)); measured {two.rps:,.0f} against "
        f"{one.rps:,.0f} req/s"
    )
    others = two.others_cpu_ms_per_request
    if others is not None:
        left = min(2000 / (g2 + load + redis + others), 1000 / load)
        text += (
            f"; other processes on the box took {others:.3g} ms per request during the "
            f"2-worker run, which left about {left:,.0f} req/s ({left / alone:.2f}x)"
        )
    text += _pass_ratios(one, two)
    return f"{text}; load average {two.loadavg_1m:.1f}"


def _pass_ratios(one: Run, two: Run) -> str:
    """Each pass's ratio, 2 workers over 1, where the passes ran back to back in turns:
    the box's speed moves between passes, and a pair of runs shares its minute."""
    if len(one.rps_passes) < 2 or len(one.rps_passes) != len(two.rps_passes):
        return ""
    ratios = [f"{b / a:.2f}x" for a, b in zip(one.rps_passes, two.rps_passes, strict=True) if a]
    return f"; pass by pass (each pair back to back): {', '.join(ratios)}"


def _bytecode(missing: int, total: int) -> str:
    if not missing:
        return f" (all {total} modules from bytecode)"
    return (
        f" ({missing} of its {total} modules have no bytecode, so every start compiles them: "
        "`make` writes it at install)"
    )


def _in_line(r: Results, scenario: str, added: float | None) -> str:
    """At c=1 a request's CPU is spent in line; what is added beyond it is waiting."""
    run = r.run(FB, scenario)
    if run is None or run.cpu_ms_per_request is None or added is None:
        return ""
    waited = added - run.cpu_ms_per_request
    text = f"{run.cpu_ms_per_request} ms of CPU per request, spent in line"
    if added < 0:
        # Seen in --tiny runs on a loaded CI box: too few requests to resolve the gap.
        text += NOISE
    elif waited > 0:
        text += (
            f"; the other {waited:.1f} ms is the extra hop and waiting for the core "
            f"(load average {run.loadavg_1m:.1f})"
        )
    return text


def goals(r: Results) -> list[Goal]:
    """Every target of issue 12, in the issue's order."""
    out: list[Goal] = []
    out += _latency_goals(r)
    out += _throughput_goals(r)
    out += _cpu_goals(r)
    out += _large_goals(r)
    out += _connection_goals(r)
    out += _process_goals(r)
    for goal in out:
        if goal.verdict == "met" and NOISE not in goal.bound:
            goal.bound = ""
    return out


def _latency_goals(r: Results) -> list[Goal]:
    out = []
    for scenario, field_name, what in (
        ("json-c1", "p50_ms", "p50"),
        ("json-c1", "p99_ms", "p99"),
        ("sse-c1", "ttft_p50_ms", "TTFT p50"),
        ("sse-c1", "ttft_p99_ms", "TTFT p99"),
    ):
        limit = 0.5 if "50" in what else 1.5
        goal = Goal(
            f"added latency, c=1 small {'stream' if 'sse' in scenario else 'whole'} {what}",
            f"< {limit} ms",
        )
        _judge(goal, _added(r, FB, scenario, field_name), limit, "ms", at_most=True)
        goal.bound = _in_line(r, scenario, _added(r, FB, scenario, field_name))
        goal.bound += _floor_added(r, scenario, field_name, limit)
        out.append(goal)
    return out


def _floor_added(r: Results, scenario: str, field_name: str, limit: float) -> str:
    """What minproxy.py, the bare proxy, added in the same run: the part of a latency
    target that is the box's (the hop through a second process, the core's wake-ups)."""
    floor = _added(r, "minproxy", scenario, field_name)
    if floor is None:
        return ""
    text = f"; minproxy.py added {floor:.3g} ms in the same run"
    if floor >= limit:
        text += f", itself not under {limit:g} ms on this box in this run"
    return text


def _throughput_goals(r: Results) -> list[Goal]:
    out = []
    for target, limit in ((FB, 1500.0), (PG, 1000.0)):
        for scenario in ("json-c64", "sse-c64"):
            kind = "streamed" if scenario.startswith("sse") else "whole"
            label = "SQLite" if target == FB else "PostgreSQL + Redis"
            goal = Goal(f"req/s at c=64, {kind}, {label}", f">= {limit:,.0f}")
            _judge(goal, _attr(r, target, scenario, "rps"), limit, "req/s", at_most=False)
            goal.bound = _cpu_bound(r, target, scenario)
            out.append(goal)
    for scenario in ("json-c64", "sse-c64"):
        goal = Goal(f"req/s vs LiteLLM's proxy at c=64, {scenario[:-4]}", ">= about 15x")
        ratio = _ratio(_attr(r, FB, scenario, "rps"), _attr(r, "litellm", scenario, "rps"))
        _judge(goal, ratio, 15.0, "x", at_most=False)
        if "litellm" in r.skipped:
            goal.measured = f"not measured ({r.skipped['litellm']})"
        theirs = r.run("litellm", scenario)
        if theirs is not None:
            goal.bound = (
                f"LiteLLM: {theirs.rps:,.1f} req/s at {theirs.cpu_ms_per_request} ms CPU/request"
            )
        out.append(goal)
    return out


def _cpu_goals(r: Results) -> list[Goal]:
    out = []
    for scenario in ("json-c64", "sse-c64"):
        cpu = _attr(r, FB, scenario, "cpu_ms_per_request")
        goal = Goal(f"CPU per request, c=64 {scenario[:-4]}", "< 0.6 ms")
        _judge(goal, cpu, 0.6, "ms", at_most=True)
        floor = _attr(r, "minproxy", scenario, "cpu_ms_per_request")
        profile = f"profile, c=64 whole: {r.profile_top}" if r.profile_top else "run --profile"
        goal.bound = _cpu_floor(cpu, floor) + profile
        out.append(goal)
        ratio = Goal(f"CPU per request vs minproxy.py, c=64 {scenario[:-4]}", "<= 3x")
        _judge(ratio, _ratio(cpu, floor), 3.0001, "x", at_most=True)
        ratio.bound = f"minproxy.py: {floor} ms" if floor else ""
        out.append(ratio)
    return out


FLOOR_CPU_MS = (0.15, 0.3)
"""minproxy.py's CPU per request where issue 12 set its targets (the perf floor's README)."""


def _cpu_floor(cpu: float | None, floor: float | None) -> str:
    """What minproxy.py took in the same run: how fast this box ran, against the box the
    absolute target was set on."""
    if cpu is None or not floor:
        return ""
    low, high = FLOOR_CPU_MS
    text = f"minproxy.py took {floor} ms in the same run ({cpu / floor:.2f}x of it"
    text += f"; issue 12 set this target where it took {low:g}-{high:g} ms"
    if floor > high:
        text += f", so this box ran {floor / high:.2f}x slower than that at least"
    return text + "); "


def _large_goals(r: Results) -> list[Goal]:
    out = []
    for scenario, field_name, limit, label in (
        ("agent-1mb", "p50_ms", 3.0, "1 MB agent step, added p50"),
        ("agent-1mb", "p99_ms", 10.0, "1 MB agent step, added p99"),
        ("fresh-1mb", "p50_ms", 5.0, "1 MB fresh prompt, added p50"),
    ):
        goal = Goal(label, f"< {limit:g} ms")
        _judge(goal, _added(r, FB, scenario, field_name), limit, "ms", at_most=True)
        goal.bound = _in_line(r, scenario, _added(r, FB, scenario, field_name))
        goal.bound += _floor_added(r, scenario, field_name, limit)
        out.append(goal)
    return out


def _connection_goals(r: Results) -> list[Goal]:
    out = []
    for scenario in ("json-c64", "sse-c64"):
        run = r.run(FB, scenario)
        goal = Goal(
            f"upstream connections opened per request, {scenario[:-4]} (steady state)", "<= 0.01"
        )
        _judge(goal, run.opens_per_request if run else None, 0.0100001, "", at_most=True)
        if run and run.upstream_opens is not None:
            goal.bound = f"{run.upstream_opens} connections opened for {run.sent} requests"
        out.append(goal)
    return out


def _process_goals(r: Results) -> list[Goal]:
    workers = Goal("2 workers vs 1, req/s at c=64 whole", ">= 1.8x")
    if W2 in r.skipped:
        workers.measured = workers.verdict = r.skipped[W2]
    else:
        ratio = _ratio(_attr(r, W2, "json-c64", "rps"), _attr(r, W1, "json-c64", "rps"))
        _judge(workers, ratio, 1.8, "x", at_most=False)
        workers.bound = workers_bound(r, "json-c64") or _cpu_bound(r, W2, "json-c64")
    rss = Goal("RSS per worker (peak over the run)", "< 150 MiB")
    _judge(rss, r.rss_mib.get(FB), 150.0, "MiB", at_most=True)
    if W2 in r.rss_mib:
        rss.bound = f"with 2 workers the largest process peaked at {r.rss_mib[W2]} MiB"
        if W2 in r.pss_uss_mib:
            pss, uss = r.pss_uss_mib[W2]
            rss.bound += f" (PSS {pss}, USS {uss}: what a worker adds)"
    start = Goal("first request served after start", "< 1.5 s")
    _judge(start, r.ready_s.get(FB), 1.5, "s", at_most=True)
    if r.import_s is not None:
        start.bound = f"farebox serve's imports alone take {r.import_s:.2f} s on the gateway core"
        if r.import_uncompiled is not None:
            start.bound += _bytecode(*r.import_uncompiled)
    return [workers, rss, start]
