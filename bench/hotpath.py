"""The hot path, side by side: direct, minproxy.py, Farebox (SQLite; PostgreSQL + Redis),
LiteLLM's proxy, and Farebox with 1 and 2 workers, against perf-floor's instant mock.

    .venv/bin/python bench/hotpath.py [--quick | --full | --tiny] [--profile]
        [--no-litellm] [--no-postgres] [--json-out FILE] [--results FILE]

The process under test runs pinned to core 1, the mock and loadgen to core 0; everything is
loopback. Writes bench/RESULTS.md (machine, versions, commands, each target of issue 12
met or missed by how much) and, with --json-out, the same as JSON. Modes bound the time:
--tiny (the test's, under a minute), --quick (the default and `make bench`'s, about
3 min: 2 s runs, minproxy.py, PostgreSQL and LiteLLM at c=64 only) and --full (about
8-10 min: three passes of 3 s runs, medians, every scenario on each). Exits 1 when a
target failed or a run completed no request (never for a missed target: the file says
which are), 2 when the perf-floor tools are missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from functools import partial
from pathlib import Path

import asyncpg
from hotpath_goals import FB, PG, W2, Results, goals
from hotpath_load import (
    ALL,
    SMALL,
    SMALL_JSON_C1,
    SMALL_JSON_C64,
    THROUGHPUT,
    Budget,
    Load,
    LoadSetup,
    LoadWorker,
    Run,
    Scenario,
    combine,
    loadgen_args,
    measure,
    probe_ready,
    write_history,
)
from hotpath_procs import GATEWAY_CORE, LOAD_CORE, RssWatch, free_port, log_errors
from hotpath_profile import Profile, finish, start
from hotpath_report import Context, machine, markdown, report, versions
from hotpath_targets import (
    MODEL,
    POSTGRES_URL,
    REDIS_URL,
    ROOT,
    UPSTREAM_MODEL,
    Target,
    farebox_workers_flag,
    fresh_database,
    litellm_version,
    start_farebox,
    start_litellm,
    start_minproxy,
    start_mock,
)
from native_load import NativeLoad, load_files, missing, start_nginx, wrk_env

MODES = {
    "tiny": Budget(
        seconds=2, small_c1=40, small_c64=150, large=3, warmup_c1=5, warmup_c64=64, warmup_large=1
    ),
    "quick": Budget(seconds=2, small_c1=400, small_c64=4000, large=30),
    "full": Budget(seconds=3, small_c1=600, small_c64=6000, large=40, passes=3),
}
FLOOR = Path(os.environ.get("FAREBOX_PERF_FLOOR", ROOT.parent / "shared" / "perf-floor"))
LITELLM_VENV = ROOT / "bench" / ".litellm-venv"


class Bench:
    """One invocation: the mock, the load set-up, and what each target measured."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.budget = MODES[args.mode]
        if args.passes:
            self.budget = dataclasses.replace(self.budget, passes=args.passes)
        self.results = Results()
        self.profile: Profile | None = None
        self.seconds: dict[str, float] = {}  # wall time each target took, start to stop
        self.ctx = Context(args.mode, "bench/hotpath.py " + shlex.join(sys.argv[1:]))
        self.python = sys.executable
        self.tiny, self.full = args.mode == "tiny", args.mode == "full"
        history = write_history(workdir / "history-1mb.json")
        self.mock, mock_url = start_mock(self.python, args.floor, workdir, LOAD_CORE)
        self.ctx.launches["mock (direct)"] = self.mock.shown(ROOT)
        worker = LoadWorker(self.python, args.floor, LOAD_CORE)
        redis = urllib.parse.urlsplit(args.redis_url)
        self.setup = LoadSetup(
            args.floor,
            self.python,
            history,
            LOAD_CORE,
            mock_url,
            worker,
            mock_pid=self.mock.popen.pid,
            redis=(redis.hostname or "127.0.0.1", redis.port or 6379),
        )
        for scenario in ALL:
            argv = loadgen_args(self.setup, "URL", MODEL, scenario, self.budget, Path("OUT.json"))
            self.ctx.loadgen.append(_shown(self.setup.shown(argv)))

    def run_target(
        self,
        make: Callable[[], Target],
        scenarios: tuple[Scenario, ...],
        budget: Budget | None = None,
    ) -> None:
        """Launch the target, wait for its first 200, warm it up, measure each scenario."""
        self.side_by_side([(make, scenarios)], budget)

    def side_by_side(
        self,
        group: list[tuple[Callable[[], Target], tuple[Scenario, ...]]],
        budget: Budget | None = None,
        load: Load | None = None,
    ) -> None:
        """Start each target of `group` in turn (its first 200 and warm-up alone on the box),
        then measure them in turns, scenario by scenario, pass by pass: what one target's
        figure is compared with (direct's latency, minproxy.py's CPU, one worker's req/s)
        is measured in the same minutes, not minutes apart on a box whose speed moves.
        `load`: what drives the runs (default: loadgen.py and the mock)."""
        budget, load = budget or self.budget, load or self.setup
        began = time.monotonic()
        started: list[tuple[Target, tuple[Scenario, ...]]] = []
        passes: dict[str, dict[str, list[Run]]] = {}
        try:
            for make, scenarios in group:
                target = self._started(make, load)
                if target is not None:
                    started.append((target, scenarios))
                    passes[target.name] = {}
            for _ in range(budget.passes):  # in turns, so a burst of load hits one pass
                for scenario in ALL:
                    for target, scenarios in list(started):
                        if scenario not in scenarios:
                            continue
                        if len(started) > 1:
                            self._rewarm(target, scenario, load)
                        if not self._pass(target, scenario, budget, passes, load):
                            started.remove((target, scenarios))
                            self._stop(target)
            for target, _ in started:
                self._finish(target, passes[target.name])
        finally:
            for target, _ in started:
                self._stop(target)
            names = " + ".join(passes) or "nothing"
            self.seconds[names] = round(time.monotonic() - began)

    def _started(self, make: Callable[[], Target], load: Load) -> Target | None:
        """A launched target once it served its first 200 and its warm-up; None: it failed."""
        target: Target | None = None
        try:
            target = make()
            print(f"[hotpath] {target.name}: starting", file=sys.stderr, flush=True)
            if target.proc is not None:
                self.ctx.launches[target.name] = target.proc.shown(ROOT)
                target.watch = RssWatch(target.proc.pid).start()
                self.results.ready_s[target.name] = probe_ready(
                    self.setup, target.url, MODEL, target.proc.launched, target.proc.pid
                )
                self._prewarm(target, load)
            return target
        except RuntimeError as exc:  # one broken target leaves the others measured
            if target is None:
                raise
            self._failed(target, exc)
            self._stop(target)
            return None

    def _pass(
        self,
        target: Target,
        scenario: Scenario,
        budget: Budget,
        passes: dict[str, dict[str, list[Run]]],
        load: Load,
    ) -> bool:
        """One measured run of `scenario` on `target`; False when the target failed."""
        try:
            run = measure(
                load, target.name, target.pid, target.url, MODEL, scenario, budget,
                target.database,
            )  # fmt: skip
        except RuntimeError as exc:
            self._failed(target, exc)
            return False
        passes[target.name].setdefault(scenario.key, []).append(run)
        if target.watch is not None:  # between runs: its page-table walk measures nothing
            target.watch.sample()
        print(
            f"[hotpath] {target.name} {scenario.key}: {run.rps} req/s p50 {run.p50_ms} ms "
            f"cpu {run.cpu_ms_per_request} ms/req opens {run.upstream_opens}",
            file=sys.stderr,
            flush=True,
        )
        return True

    def _finish(self, target: Target, passes: dict[str, list[Run]]) -> None:
        """The target's runs combined, its profile (Farebox on SQLite) and its memory."""
        name = target.name
        runs = self.results.runs.setdefault(name, {})
        runs.update({key: combine(each) for key, each in passes.items()})
        if name == FB and self.args.profile:
            self.profile = self._profiled(target)
            top = ", ".join(f"{part} {share}%" for part, share in self.profile.parts[:4])
            self.results.profile_top = top or self.profile.note
        if target.watch is not None:
            target.watch.stop()
            self.results.rss_mib[name] = target.watch.per_process_mib()
            self.results.rss_total_mib[name] = target.watch.total_mib()
            self.results.pss_uss_mib[name] = target.watch.pss_uss_mib()

    def _failed(self, target: Target, exc: RuntimeError) -> None:
        self.results.skipped[target.name] = f"failed: {exc}"[:400].replace("\n", " ")
        print(f"[hotpath] {target.name} failed: {exc}", file=sys.stderr, flush=True)

    def _stop(self, target: Target) -> None:
        """Stop it (again is harmless) and report what its log says went wrong."""
        target.stop()
        found = log_errors(target.proc.log) if target.proc else ""
        if found:
            self.results.log_errors[target.name] = found

    def _prewarm(self, target: Target, load: Load) -> None:
        """Unmeasured c=64 runs: pools filled, caches warm, so runs after are steady state
        (--tiny relies on each run's own warm-up)."""
        if self.tiny:
            return
        short = Budget(seconds=2, small_c1=0, small_c64=256, large=0, warmup_c64=0)
        for scenario in THROUGHPUT:
            measure(load, target.name, target.pid, target.url, MODEL, scenario, short)

    def _rewarm(self, target: Target, scenario: Scenario, load: Load) -> None:
        """Before a c=64 run beside other targets: a short unmeasured one, so the run starts
        at steady state. While the others were measured this one idled past its upstream
        pool's keep-alive (4 s: Farebox closes an idle connection before uvicorn's 5 s), and
        its next run would count 64 opens that a gateway under steady load never makes."""
        if self.tiny or target.proc is None or scenario not in THROUGHPUT:
            return
        short = Budget(seconds=2, small_c1=0, small_c64=256, large=0, warmup_c64=0)
        measure(load, target.name, target.pid, target.url, MODEL, scenario, short)

    def _profiled(self, target: Target) -> Profile:
        """py-spy over one more (unmeasured) c=64 whole-reply run."""
        assert target.pid is not None
        out = self.workdir / "profile.raw"
        sampler = start(target.pid, self.budget.seconds, out, LOAD_CORE)
        measure(self.setup, target.name, target.pid, target.url, MODEL, SMALL_JSON_C64, self.budget)
        return finish(sampler, out)

    def each(self) -> None:
        """Direct, minproxy.py and Farebox on SQLite side by side (the added latencies and the
        CPU ratios come from them), then each other target alone, stopped before the next."""
        mock = f"{self.setup.mock_url}/v1/chat/completions"
        floor = partial(
            start_minproxy, self.python, self.args.floor, self.workdir, self.setup.mock_url
        )
        self.side_by_side(
            [
                (lambda: Target("direct", mock, None), ALL),
                (floor, ALL if self.full else THROUGHPUT),  # the ratios need c=64 only
                (partial(self._farebox, FB, postgres=None), ALL),
            ]
        )
        imported = None if self.tiny else _import_seconds()
        if imported is not None:
            self.results.import_s, self.results.import_uncompiled = imported
        if self.args.no_postgres:
            self.results.skipped[PG] = "--no-postgres"
        else:
            scenarios = (SMALL_JSON_C1, *THROUGHPUT) if self.full else THROUGHPUT
            self._postgres(scenarios)
        self._litellm()
        self._workers()

    def _postgres(self, scenarios: tuple[Scenario, ...]) -> None:
        """Farebox on a PostgreSQL database of this run's own, migrated from empty."""
        try:
            with fresh_database(self.args.postgres_url) as url:
                self.run_target(partial(self._farebox, PG, postgres=url), scenarios)
        except (OSError, asyncpg.PostgresError) as exc:  # no server: the others still run
            self.results.skipped[PG] = f"failed: PostgreSQL at {self.args.postgres_url}: {exc}"

    def _farebox(
        self, name: str, postgres: str | None, workers: int | None = None, core: str = GATEWAY_CORE
    ) -> Target:
        """`farebox serve`; `postgres`: the URL of the ledger's database, else SQLite."""
        mock, redis = self.setup.mock_url, self.args.redis_url
        return start_farebox(name, self.workdir, mock, core, postgres, workers, redis)

    def _litellm(self) -> None:
        version = litellm_version(self.args.litellm_venv)
        self.ctx.versions["litellm proxy (bench venv)"] = version or "absent"
        if self.args.no_litellm:
            self.results.skipped["litellm"] = "--no-litellm"
        elif version is None:
            self.results.skipped["litellm"] = (
                f"no venv at {self.args.litellm_venv} (make bench makes it)"
            )
        else:
            # One pass, warm from its pre-warm only: at 5-20 req/s a c=64 run of LiteLLM's
            # takes tens of seconds to drain, and each pass would add a minute.
            budget = dataclasses.replace(self.budget, passes=1, warmup_c1=5, warmup_c64=0)
            proxy = partial(
                start_litellm, self.args.litellm_venv, self.workdir, self.setup.mock_url
            )
            self.run_target(proxy, SMALL if self.full else THROUGHPUT, budget)

    def _workers(self) -> None:
        """1 vs 2 workers side by side, SQLite ledger and Redis state (farebox refuses 2
        workers without it), both allowed on both cores (the load shares core 0 either way).
        The load is wrk and nginx where installed: perf-floor's Python tools would take as
        much as half of the 2 cores (bench/native_load.py)."""
        if not farebox_workers_flag():
            self.results.skipped[W2] = "not available (`farebox serve --workers` does not exist)"
        elif self.args.mode == "tiny":
            self.results.skipped[W2] = "not run in --tiny mode"
        else:
            absent = None if self.args.loadgen_workers else missing()
            if absent:
                self.ctx.notes.append(f"Workers comparison on loadgen.py: {absent}.")
            native = None if self.args.loadgen_workers or absent else self._native_load()
            if native is None:  # results.workers_load stays "loadgen and mock"
                self._workers_on(self.setup, self.setup.mock_url)
                return
            try:
                self.results.workers_load = "wrk and nginx"
                self._workers_on(native, native.mock_url)
            finally:
                native.nginx.stop()

    def _native_load(self) -> NativeLoad | None:
        """wrk, and nginx started as the upstream; None, said in the notes, when nginx
        would not start (the comparison then runs on loadgen.py)."""
        try:
            nginx, base = start_nginx(self.workdir, free_port(), UPSTREAM_MODEL, LOAD_CORE)
        except RuntimeError as exc:
            why = str(exc).replace("\n", " ")[:300]
            self.ctx.notes.append(f"Workers comparison on loadgen.py: nginx did not start: {why}")
            return None
        self.ctx.launches["nginx (workers' upstream)"] = nginx.shown(ROOT)
        native = NativeLoad(nginx, base, LOAD_CORE, self.workdir, self.setup.redis)
        for scenario in THROUGHPUT:
            env = wrk_env(MODEL, scenario.stream, "OUT.json")
            argv = native.argv("URL", scenario, self.budget.seconds)
            self.ctx.loadgen.append(_shown([*(f"{k}={v}" for k, v in env.items()), *argv]))
        return native

    def _workers_on(self, load: Load, upstream: str) -> None:
        both = f"{LOAD_CORE},{GATEWAY_CORE}"
        redis = self.args.redis_url
        one = partial(
            start_farebox, "farebox-1-worker", self.workdir, upstream, both, None, 1, redis
        )
        two = partial(start_farebox, W2, self.workdir, upstream, both, None, 2, redis)
        # At least 3 passes in every mode: the box's speed moves between passes (one pass
        # of --quick gave 1.17x where the pass before gave 1.69x), and the ratio is of
        # medians, each pass's own stated beside it.
        budget = dataclasses.replace(self.budget, passes=max(self.budget.passes, 3))
        self.side_by_side([(one, THROUGHPUT), (two, THROUGHPUT)], budget, load)

    def configs(self) -> dict[str, str]:
        """The configuration files the gateways ran with, and the workers' load's."""
        found = {}
        for name in (f"{FB}.yaml", "litellm.yaml"):
            path = self.workdir / name
            if path.exists():
                found[name] = path.read_text().replace(self.setup.mock_url, "http://127.0.0.1:MOCK")
        found.update(load_files(self.workdir))
        return found

    def close(self) -> None:
        self.setup.worker.close()
        self.mock.stop()


def _shown(command: object) -> str:
    parts = [str(part) for part in command] if isinstance(command, list | tuple) else [str(command)]
    return shlex.join(parts).replace(str(ROOT) + "/", "")


# Wall seconds to import the app, then how many of the modules it loaded from source
# files had no bytecode to load (each start compiles those: `make` writes it at install).
# What `farebox serve` imports before it binds, the way it does (gateway.cli first, with
# `serve` as the command: bench/startup_instructions.py's list), not a plain `import
# gateway.app`, which imports every router and runs the collector throughout.
IMPORT_PROBE = """
import os, sys, time
t = time.perf_counter()
sys.argv = ["farebox", "serve"]
import gateway.cli
from gateway import serve_imports
with serve_imports.deferred_model_builds():
    import fastapi
import gateway.app, gateway.drain, gateway.preflight, gateway.server, gateway.workers
took = time.perf_counter() - t
cached = [m.__spec__.cached for m in list(sys.modules.values())
          if getattr(m, "__spec__", None) is not None and m.__spec__.cached]
print(took, sum(not os.path.exists(c) for c in cached), len(cached))
"""


def _import_seconds() -> tuple[float, tuple[int, int]] | None:
    """Wall seconds for serve's imports on the gateway core (start-up's floor), and
    (modules without bytecode, modules with a source file) of that import."""
    done = subprocess.run(
        ["taskset", "-c", GATEWAY_CORE, sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    try:
        took, missing, total = done.stdout.split()
        return round(float(took), 3), (int(missing), int(total))
    except ValueError:
        return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    for name in MODES:
        mode.add_argument(f"--{name}", dest="mode", action="store_const", const=name)
    parser.set_defaults(mode="quick")
    parser.add_argument("--profile", action="store_true", help="py-spy the Farebox process")
    parser.add_argument("--passes", type=int, default=None, help="override the mode's passes")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--loadgen-workers",
        action="store_true",
        help="drive the 1-vs-2 workers comparison with loadgen.py and the mock, not wrk and nginx",
    )
    parser.add_argument("--floor", type=Path, default=FLOOR, help="perf-floor tools' folder")
    parser.add_argument("--litellm-venv", type=Path, default=LITELLM_VENV)
    parser.add_argument(
        "--postgres-url",
        default=POSTGRES_URL,
        help="the PostgreSQL server (a database of the run's own is made there)",
    )
    parser.add_argument("--redis-url", default=REDIS_URL, help="Redis state (PostgreSQL, workers)")
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="work here and keep the logs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not (args.floor / "loadgen.py").exists():
        print(
            f"perf-floor tools not found in {args.floor} (set FAREBOX_PERF_FLOOR)", file=sys.stderr
        )
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="farebox-hotpath-") as folder:
        workdir = args.keep or Path(folder)
        workdir.mkdir(parents=True, exist_ok=True)
        bench = Bench(args, workdir)
        bench.ctx.machine, bench.ctx.versions = machine(), versions(None)
        bench.ctx.loadavg.append("at start: " + _loadavg())
        try:
            bench.each()
            bench.ctx.configs = bench.configs()
        finally:
            bench.close()
    ctx, results = bench.ctx, bench.results
    ctx.loadavg.append("at end: " + _loadavg())
    ctx.notes += _notes(time.monotonic() - started) + _failures(results)
    if ctx.versions.get("farebox commit", "").endswith("-dirty"):
        ctx.notes.append(DIRTY)
    spent = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in bench.seconds.items())
    ctx.notes.append(f"Wall time per target, start to stop: {spent}.")
    judged = goals(results)
    docs = os.path.relpath(ROOT / "docs" / "performance.md", args.results.resolve().parent)
    args.results.write_text(markdown(ctx, results, judged, bench.profile, docs))
    if args.json_out:
        args.json_out.write_text(json.dumps(report(ctx, results, judged, bench.profile), indent=1))
    print(args.results.read_text())
    return 1 if _broken(results) else 0


def _broken(results: Results) -> bool:
    """A target that failed, or a run that completed nothing (a skip asked for is fine)."""
    failed = any(why.startswith("failed") for why in results.skipped.values())
    return failed or any(
        run.completed == 0 for runs in results.runs.values() for run in runs.values()
    )


def _loadavg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


DIRTY = (
    "The commit is marked -dirty: tracked files had uncommitted changes when it ran (a shared "
    "checkout), so the numbers are of the working tree as it was, not of the commit alone."
)


def _failures(results: Results) -> list[str]:
    """Failed requests and logged errors, target by target: reported, never dropped."""
    notes = []
    for target, runs in results.runs.items():
        for key, run in runs.items():
            if run.errors:
                notes.append(f"{target} {key}: failed requests {run.errors} of {run.sent} sent.")
    for target, found in results.log_errors.items():
        notes.append(f"{target}: {found} (rerun with --keep DIR to read the log).")
    return notes


def _notes(seconds: float) -> list[str]:
    return [
        f"The whole run took {seconds:.0f} s.",
        "Each process under test ran under `taskset -c 1`, the mock and loadgen under "
        "`taskset -c 0` (the workers comparison lets the gateway use both cores).",
        "Before its measured runs each target got unmeasured c=64 runs (whole and streamed), "
        "so connection counts are at steady state (a target measured beside others also got "
        "one before each of its c=64 runs: idle while they ran, it closed its upstream "
        "connections after the pool's 4 s keep-alive); each loadgen run also has its own warm-up "
        "(LiteLLM's: 5 requests at c=1, none at c=64, and one pass only, since at 5-20 req/s "
        "its c=64 runs take tens of seconds to drain).",
        "This box is shared with other work: the load average above is part of the result. "
        "CPU per request (from /proc) is the figure that holds across runs; req/s and "
        "latency move with the load.",
    ]


if __name__ == "__main__":
    sys.exit(main())
