"""1 vs 2 workers as bench/hotpath.py runs them, in turns, with what each process did.

The mock and loadgen under `taskset -c 0`, the gateway under `taskset -c 0,1` with Redis
state and a SQLite ledger (bench/hotpath.py's commands). Each spec of --order runs one
unmeasured c=64 warm-up, then one measured run; per run it prints one JSON line: req/s,
CPU ms per request sent of the gateway tree, of each process's loop thread and other
threads, of loadgen, the mock and Redis; the connections each worker held; the box's idle
share; and, from `perf stat` on the gateway's processes, syscalls (by name), context
switches and migrations per request.

Specs: N (`farebox serve --workers N`), sN (N workers under the supervisor, 1 allowed:
the workers mode's own cost at one worker's load), @C for concurrency C (default 64).

    .venv/bin/python bench/workers_pairs.py --rounds 2 --order 1,1@32,2,s1 [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hotpath_load import Scenario, redis_cpu_seconds
from hotpath_procs import TICK_S, clean_env, cpu_ticks, free_port, tree
from hotpath_targets import FAREBOX_CONFIG, MODEL, UPSTREAM_MODEL
from native_load import NativeLoad, start_nginx, wrk_env
from native_load import summary as native_summary

FLOOR = Path(os.environ.get("FAREBOX_PERF_FLOOR", "/work/shared/perf-floor"))
REDIS = "redis://127.0.0.1:6379/13"
NATIVE: NativeLoad | None = None  # --native: wrk and nginx instead of loadgen and the mock
SYSCALLS = [
    *("epoll_pwait", "epoll_wait", "epoll_ctl", "futex", "read", "write", "writev"),
    *("recvfrom", "sendto", "getpid", "clock_gettime", "pread64", "pwrite64", "fsync"),
    *("fdatasync", "openat", "close", "unlink", "rename", "mmap", "munmap", "accept4"),
]
EVENTS = ",".join(
    ["raw_syscalls:sys_enter", "context-switches", "cpu-migrations"]
    + [f"syscalls:sys_enter_{name}" for name in SYSCALLS]
)
SUPERVISED = """
import sys
from gateway import serve_imports
from gateway.config import load_config
from gateway.forked import call_forked
from gateway.heap import freeze_imports
from gateway.preflight import PreflightError, bind, check_ledger
from gateway.settings import Settings
from gateway.workers import Supervisor
freeze_imports()
settings = Settings(port=int(sys.argv[1]), workers=int(sys.argv[2]))
listener = bind(settings.host, settings.port)
config = load_config(settings.config_path())
call_forked(lambda: check_ledger(settings), PreflightError)
sys.exit(Supervisor(settings, config, listener).run())
"""


@dataclass(frozen=True)
class Spec:
    workers: int
    supervised: bool  # through the Supervisor even with one worker
    concurrency: int

    @classmethod
    def parse(cls, text: str) -> Spec:
        kind, _, concurrency = text.partition("@")
        return cls(int(kind.lstrip("s")), kind.startswith("s"), int(concurrency or 64))

    def command(self, port: int) -> list[str]:
        if self.supervised:
            return [sys.executable, "-c", SUPERVISED, str(port), str(self.workers)]
        serve = ["serve", "--port", str(port), "--workers", str(self.workers)]
        return [sys.executable, "-m", "gateway", *serve]


def thread_ticks(pid: int) -> dict[str, int]:
    """utime+stime of `pid`'s main thread (its event loop) and of its other threads."""
    found = {"main": 0, "threads": 0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found["main" if task.name == str(pid) else "threads"] += int(fields[11]) + int(fields[12])
    return found


def box_idle() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def connections(pid: int, port: int) -> int:
    argv = ["ss", "-tnpH", "state", "established", f"( sport = :{port} )"]
    return subprocess.run(argv, capture_output=True, text=True).stdout.count(f"pid={pid},")


def loadgen(url: str, spec: Spec, seconds: int, n: int, out: Path) -> subprocess.Popen[bytes]:
    if NATIVE is not None:  # wrk: a run of `seconds`
        scenario = Scenario(f"json-c{spec.concurrency}", "", False, spec.concurrency)
        env = os.environ | wrk_env(MODEL, False, str(out))
        argv = NATIVE.argv(url, scenario, seconds)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    argv = ["taskset", "-c", "0", sys.executable, str(FLOOR / "loadgen.py"), "--url", url]
    argv += ["--model", MODEL, "-c", str(spec.concurrency), "-n", str(n), "--warmup", "64"]
    argv += ["--max-seconds", str(seconds), "--json-out", str(out), "--timeout", "60"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_ready(port: int, gateway: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return
        except OSError:
            if time.monotonic() > deadline or gateway.poll() is not None:
                raise RuntimeError("the gateway did not start") from None
            time.sleep(0.1)


def perf_counts(path: Path, sent: int) -> dict[str, float]:
    counts = {}
    for line in path.read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].isdigit() and int(parts[0]) >= 0.05 * sent:
            name = parts[2].split(":")[-1].replace("sys_enter_", "")
            counts[name] = round(int(parts[0]) / sent, 2)
    return counts


def measured(args: argparse.Namespace, spec: Spec, port: int, gateway_pid: int, mock: int) -> dict:
    """One measured run against a started, warmed gateway."""
    work, url = args.work, f"http://127.0.0.1:{port}/v1/chat/completions"
    procs = tree(gateway_pid)
    threads = {pid: thread_ticks(pid) for pid in procs}
    g0, m0, idle0 = cpu_ticks(gateway_pid), cpu_ticks(mock), box_idle()
    r0 = redis_cpu_seconds(("127.0.0.1", 6379)) or 0.0
    argv = ["perf", "stat", "-x,", "-o", str(work / "perf.csv"), "-e", EVENTS, "-p"]
    perf = subprocess.Popen([*argv, ",".join(map(str, procs))], stderr=subprocess.DEVNULL)
    run = loadgen(url, spec, args.seconds, args.n, work / "run.json")
    held: dict[int, int] = {}
    for _ in range(20):  # loadgen may take a while to start on a loaded box
        time.sleep(0.25)
        held = {pid: connections(pid, port) for pid in procs}
        ended = os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if sum(held.values()) >= spec.concurrency or ended is not None:
            break
    _, _, usage = os.wait4(run.pid, 0)
    run.returncode = 0
    g1, m1, idle1 = cpu_ticks(gateway_pid), cpu_ticks(mock), box_idle()
    r1 = redis_cpu_seconds(("127.0.0.1", 6379)) or 0.0
    perf.send_signal(2)
    perf.wait()
    summary = json.loads((work / "run.json").read_text().splitlines()[-1])
    if NATIVE is not None:
        summary = native_summary(summary)
    sent = summary["sent"]

    def ms(seconds: float) -> float:
        return round(seconds * 1000 / sent, 3)

    per_process = {}
    for pid in procs:
        after = thread_ticks(pid) if Path(f"/proc/{pid}").exists() else threads[pid]
        per_process[pid] = {k: ms((after[k] - threads[pid][k]) * TICK_S) for k in after}
    return {
        "spec": f"{'s' if spec.supervised else ''}{spec.workers}@{spec.concurrency}",
        "rps": summary["rps"],
        "sent": sent,
        "gateway_ms": ms((g1 - g0) * TICK_S),
        "loadgen_ms": ms(usage.ru_utime + usage.ru_stime),
        "mock_ms": ms((m1 - m0) * TICK_S),
        "redis_ms": ms(r1 - r0),
        "idle_share": round((idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]), 3),
        "connections": held,
        "per_process": per_process,
        "per_request": perf_counts(work / "perf.csv", sent),
        "errors": summary.get("errors"),
    }


def one(args: argparse.Namespace, spec: Spec, mock_port: int, mock_pid: int) -> dict:
    port, work = free_port(), args.work
    config = work / "farebox.yaml"
    base = f"http://127.0.0.1:{mock_port}/v1"
    config.write_text(FAREBOX_CONFIG.format(model=MODEL, upstream=UPSTREAM_MODEL, base=base))
    data = tempfile.mkdtemp(dir=work)
    env = clean_env(FAREBOX_CONFIG=str(config), FAREBOX_DATA_DIR=data, FAREBOX_REDIS_URL=REDIS)
    with (work / "gateway.log").open("ab") as log:
        gateway = subprocess.Popen(
            ["taskset", "-c", "0,1", *spec.command(port)],
            cwd=args.src,
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        wait_ready(port, gateway)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        loadgen(url, spec, 2, 2000, work / "warm.json").wait()
        time.sleep(0.5)
        return measured(args, spec, port, gateway.pid, mock_pid)
    finally:
        gateway.terminate()
        gateway.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--order", default="1,2", help="specs, comma-separated: 1,s1,1@32,2")
    parser.add_argument("-n", type=int, default=20000, help="requests per run at most")
    parser.add_argument("--seconds", type=int, default=3, help="loadgen's --max-seconds")
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--native", action="store_true", help="wrk and nginx (native_load.py)")
    args = parser.parse_args()
    args.work = Path(tempfile.mkdtemp(prefix="workers-pairs-"))
    mock_port = free_port()
    if args.native:
        global NATIVE
        nginx, base = start_nginx(args.work, mock_port, UPSTREAM_MODEL, "0")
        NATIVE = NativeLoad(nginx, base, "0", args.work)
        try:
            rounds(args, mock_port, nginx.pid)
        finally:
            nginx.stop()
        return
    argv = ["taskset", "-c", "0", sys.executable, str(FLOOR / "mock_upstream.py")]
    mock = subprocess.Popen(
        [*argv, "--port", str(mock_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(),
    )
    time.sleep(1.0)
    try:
        rounds(args, mock_port, mock.pid)
    finally:
        mock.terminate()


def rounds(args: argparse.Namespace, mock_port: int, mock_pid: int) -> None:
    """Every spec of --order, round after round, one JSON line each."""
    for round_ in range(args.rounds):
        for text in args.order.split(","):
            result = one(args, Spec.parse(text), mock_port, mock_pid)
            print(json.dumps({"round": round_, **result}), flush=True)


if __name__ == "__main__":
    main()
