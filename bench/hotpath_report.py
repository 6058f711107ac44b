"""bench/RESULTS.md and the JSON report of one bench/hotpath.py run."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from hotpath_goals import Goal, Results
from hotpath_load import ALL, Run
from hotpath_profile import Profile

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Context:
    """Machine, versions and commands: what a reader needs to rerun and compare."""

    mode: str
    command: str
    started: str = field(default_factory=lambda: f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC")
    machine: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    launches: dict[str, str] = field(default_factory=dict)  # target -> command line
    loadgen: list[str] = field(default_factory=list)  # one command line per scenario
    loadavg: list[str] = field(default_factory=list)
    configs: dict[str, str] = field(default_factory=dict)  # file name -> text
    notes: list[str] = field(default_factory=list)


def machine() -> dict[str, str]:
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {"cpu": model, "cores": str(os.cpu_count()), "kernel": platform.release()}


def versions(litellm: str | None) -> dict[str, str]:
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    found = {
        "python": platform.python_version(),
        "farebox commit": commit or "unknown",
        "litellm proxy (bench venv)": litellm or "absent",
    }
    for name in ("uvicorn", "uvloop", "httptools", "httpx", "aiohttp", "orjson", "starlette"):
        present = importlib.util.find_spec(name) is not None
        found[name] = version(name) if present else "absent"
    return found


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _added(base: Run | None, run: Run, name: str) -> str:
    if base is None or run.target == "direct":
        return "-"
    a, b = getattr(run, name), getattr(base, name)
    return "-" if a is None or b is None else f"{a - b:+.2f}"


def _load(run: Run) -> str:
    """loadgen's and the mock's CPU per request, + Redis's where it was read, + the
    PostgreSQL backends' of the target's ledger (PG)."""
    if run.load_cpu_ms_per_request is None:
        return "-"
    text = _num(run.load_cpu_ms_per_request, 3)
    if run.redis_cpu_ms_per_request:
        text += f" + {_num(run.redis_cpu_ms_per_request, 3)}"
    if run.postgres_cpu_ms_per_request is not None:
        text += f" + PG {_num(run.postgres_cpu_ms_per_request, 3)}"
    return text


def _side_by_side(results: Results) -> list[str]:
    lines = ["## Side by side", ""]
    lines.append(
        "Latency in ms (TTFT: time to the first content token); *added* is the target's "
        "percentile minus direct's in the same run. CPU: the process tree's utime+stime "
        "over loadgen's `sent` (warm-up included); load CPU: loadgen's and the mock's, "
        "the same way, + Redis's (INFO cpu, shared with the box), + PG: the PostgreSQL "
        "backends serving the target's ledger database (its rows only, from /proc, trailing "
        "work included), the CPU the load itself "
        "takes from the cores the target runs on. Opens: connections the mock accepted "
        "from the target per request; ActiveOpens Δ: /proc/net/snmp over the run "
        "(includes loadgen's own connections and other processes on the box). Direct, "
        "minproxy and farebox-sqlite were measured side by side, in turns (each scenario on "
        "each of them, then the next scenario), and so were farebox-1-worker and "
        "farebox-2-workers: each comparison is of the same minutes; the other targets ran "
        "alone, one after another."
    )
    if results.workers_load == "wrk and nginx":
        lines[-1] += (
            " The workers comparison was driven by wrk (one thread, 64 connections, a run of "
            "the mode's seconds) with nginx as the upstream (bench/native_load.py): load tools "
            "in C, which leave the 2 cores to the gateway; wrk reports no TTFT, and its "
            "requests sent are the ones it completed."
        )
    passes = max((run.passes for runs in results.runs.values() for run in runs.values()), default=1)
    if passes > 1:
        lines[-1] += (
            f" Each scenario ran {passes} times, in turns: latencies and req/s are the "
            "medians of the passes; CPU, connections and counts are over all of them."
        )
    for scenario in ALL:
        rows = [(t, runs[scenario.key]) for t, runs in results.runs.items() if scenario.key in runs]
        if not rows:
            continue
        base = results.run("direct", scenario.key)
        lines += ["", f"### {scenario.title}", ""]
        lines.append(
            "| target | p50 | p99 | added p50 | added p99 | TTFT p50 | TTFT p99 "
            "| added TTFT p50 | added TTFT p99 | req/s | CPU ms/req | load CPU ms/req | opens/req "
            "| ActiveOpens Δ | done/sent | errors |"
        )
        lines.append("|" + " --- |" * 16)
        for target, run in rows:
            lines.append(
                f"| {target} | {_num(run.p50_ms)} | {_num(run.p99_ms)} "
                f"| {_added(base, run, 'p50_ms')} | {_added(base, run, 'p99_ms')} "
                f"| {_num(run.ttft_p50_ms)} | {_num(run.ttft_p99_ms)} "
                f"| {_added(base, run, 'ttft_p50_ms')} | {_added(base, run, 'ttft_p99_ms')} "
                f"| {_num(run.rps, 0)} | {_num(run.cpu_ms_per_request, 3)} | {_load(run)} "
                f"| {_num(run.opens_per_request, 4)} | {run.active_opens_delta} "
                f"| {run.completed}/{run.sent} | {sum(run.errors.values()) or 0} |"
            )
    return lines


def _processes(results: Results) -> list[str]:
    lines = [
        "## Processes",
        "",
        "| target | start to first 200 (s) | peak RSS, largest process "
        "(MiB) | peak RSS, whole tree (MiB) | peak PSS / USS, largest process (MiB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for target in results.runs:
        if target == "direct":
            continue
        pss, uss = results.pss_uss_mib.get(target, (None, None))
        lines.append(
            f"| {target} | {_num(results.ready_s.get(target))} "
            f"| {_num(results.rss_mib.get(target), 1)} "
            f"| {_num(results.rss_total_mib.get(target), 1)} "
            f"| {_num(pss, 1)} / {_num(uss, 1)} |"
        )
    for target, why in results.skipped.items():
        lines.append(f"| {target} | not run: {why} | - | - | - |")
    lines += [
        "",
        "RSS counts a page in every process that maps it; PSS divides shared pages among "
        "their users, USS counts this process's own (what one more worker costs).",
    ]
    return lines


def _profile(profile: Profile | None) -> list[str]:
    if profile is None:
        return ["## Profile", "", "Not taken (run with `--profile`)."]
    lines = ["## Profile of farebox-sqlite, c=64 whole replies (py-spy)", ""]
    if not profile.samples:
        return [*lines, profile.note]
    lines += [
        f"{profile.samples} samples over one more c=64 whole-reply run after the measured "
        "ones. Each sample is given to the known part of its stack nearest the leaf (a "
        "library, or a gateway package), so the shares add up to 100:",
        "",
        "| part | share % |",
        "| --- | --- |",
    ]
    lines += [f"| {label} | {share} |" for label, share in profile.parts]
    lines += ["", "Top leaf functions (self time):", "", "| function | share % |", "| --- | --- |"]
    lines += [f"| `{name}` | {share} |" for name, share in profile.leaves]
    return lines


def _summary(goals: list[Goal]) -> str:
    met = [g for g in goals if g.verdict == "met"]
    missed = [g for g in goals if g.verdict.startswith("missed")]
    other = len(goals) - len(met) - len(missed)
    text = f"**{len(met)} of {len(goals)} targets met, {len(missed)} missed"
    return text + (f", {other} not measured.**" if other else ".**")


def markdown(
    ctx: Context,
    results: Results,
    goals: list[Goal],
    profile: Profile | None,
    docs_link: str = "../docs/performance.md",
) -> str:
    """The results page; `docs_link`: docs/performance.md relative to where it is written."""
    lines = [
        "# Hot path: Farebox against a bare proxy and LiteLLM's proxy",
        "",
        f"Written by `{ctx.command}` ({ctx.mode} mode), {ctx.started}. "
        f"How to run and read it: [docs/performance.md]({docs_link}).",
        "",
        "## Machine and versions",
        "",
    ]
    lines[4:4] = [_summary(goals), ""]
    lines += [f"- {k}: {v}" for k, v in {**ctx.machine, **ctx.versions}.items()]
    lines += [f"- load average (1, 5, 15 min) {text}" for text in ctx.loadavg]
    lines += [
        "",
        "## Targets (issue 12)",
        "",
        "| target | goal | measured | verdict | what bounds it |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {g.name} | {g.goal} | {g.measured} | {g.verdict} | {g.bound} |" for g in goals]
    lines += ["", *_side_by_side(results), "", *_processes(results), "", *_profile(profile)]
    lines += ["", "## Commands", "", "```sh"]
    lines += [f"# {target}\n{command}" for target, command in ctx.launches.items()]
    lines += ["# load (one per scenario; URL and port vary by target)", *ctx.loadgen, "```"]
    for name, text in ctx.configs.items():
        fence = {"lua": "lua", "conf": "nginx"}.get(name.rsplit(".", 1)[-1], "yaml")
        lines += ["", f"`{name}`:", "", f"```{fence}", text.rstrip(), "```"]
    if ctx.notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in ctx.notes]]
    return "\n".join(lines) + "\n"


def report(
    ctx: Context, results: Results, goals: list[Goal], profile: Profile | None
) -> dict[str, object]:
    return {
        "mode": ctx.mode,
        "command": ctx.command,
        "started": ctx.started,
        "machine": ctx.machine,
        "versions": ctx.versions,
        "loadavg": ctx.loadavg,
        "launches": ctx.launches,
        "loadgen": ctx.loadgen,
        "notes": ctx.notes,
        "configs": ctx.configs,
        "goals": [g.report() for g in goals],
        "runs": {
            t: {k: run.report() for k, run in runs.items()} for t, runs in results.runs.items()
        },
        "ready_s": results.ready_s,
        "rss_mib": results.rss_mib,
        "rss_total_mib": results.rss_total_mib,
        "pss_uss_mib": results.pss_uss_mib,
        "skipped": results.skipped,
        "workers_load": results.workers_load,
        "import_s": results.import_s,
        "profile": profile.report() if profile else None,
        "argv": sys.argv,
    }
