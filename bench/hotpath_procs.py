"""Processes under test for bench/hotpath.py: start them pinned, read their cost from /proc.

Everything here is loopback only. The process under test runs under `taskset -c 1`; the
mock upstream and the load generator under `taskset -c 0` (perf-floor's README). CPU is
utime+stime of the whole process tree (a master and its workers), in clock ticks.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
GATEWAY_CORE, LOAD_CORE = "1", "0"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree(pid: int) -> list[int]:
    """`pid` and every live descendant (uvicorn workers, spawned helpers)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = Path(f"/proc/{current}/task").iterdir()
            for task in tasks:
                children = (task / "children").read_text().split()
                todo.extend(int(child) for child in children)
        except OSError:
            continue
    return found


def cpu_ticks(pid: int) -> int:
    """utime+stime (fields 14 and 15 of /proc/PID/stat) summed over the process tree."""
    total = 0
    for member in tree(pid):
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces
        total += int(fields[11]) + int(fields[12])
    return total


def postgres_backend_ticks(database: str) -> dict[int, int]:
    """utime+stime of each PostgreSQL backend connected to `database`, by pid: a process
    whose title (`update_process_title`, on by default) reads `postgres: [CLUSTER: ]USER
    DATABASE HOST(PORT) STATE`. The server's shared processes (WAL writer, checkpointer)
    are not counted: they serve every database on the server."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not title.startswith("postgres:") or f" {database} " not in title:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(proc.name)] = int(fields[11]) + int(fields[12])
    return found


def main_thread_ticks(pid: int) -> int:
    """utime+stime of each process's main thread (its event loop), summed over the tree.

    A gateway's other threads (the ledger's SQLite writes, the spool's file I/O) run
    beside its loop, on another core when one is free: one worker's rate is bounded by
    its loop thread, not by the whole process's CPU.
    """
    total = 0
    for member in tree(pid):
        try:
            stat = Path(f"/proc/{member}/task/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total


def box_busy_ticks() -> int:
    """CPU ticks the whole box spent busy (every core, every process): /proc/stat's `cpu`
    line less idle and iowait."""
    values = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4]  # guest time is inside user already


def _status_kib(pid: int, name: str) -> int:
    """One KiB field of /proc/PID/status (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kib(pid: int) -> int:
    """VmRSS of one process, KiB (0 once it is gone)."""
    return _status_kib(pid, "VmRSS")


def peak_rss_kib(pid: int) -> int:
    """VmHWM of one process, KiB: the largest RSS it had so far (0 once it is gone)."""
    return _status_kib(pid, "VmHWM")


def shared_kib(pid: int) -> tuple[int, int]:
    """PSS (shared pages divided among their users) and USS (this process's own), KiB."""
    pss = uss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == "Pss":
                pss = int(rest.split()[0])
            elif name in ("Private_Clean", "Private_Dirty"):
                uss += int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return pss, uss


def active_opens() -> int:
    """ActiveOpens of the `Tcp:` line of /proc/net/snmp (the whole network namespace)."""
    lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()]
    names, values = [ln for ln in lines if ln[0] == "Tcp:"][:2]
    return int(values[names.index("ActiveOpens")])


def get_json(url: str, timeout: float = 5.0) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        data: dict[str, object] = json.loads(reply.read())
    return data


@dataclass
class RssWatch:
    """The peak memory of each process in a tree, read without disturbing what is measured.

    Peak RSS is the kernel's own (`VmHWM`: the largest resident set since the process
    began), exact whenever it is read. PSS and USS come from smaps_rollup, which walks the
    process's page tables under its memory-map lock: they are read only when `sample()` is
    called, at moments nothing is measured (the bench calls it after each measured run, and
    at the end). A thread that read both every 0.1 s during the runs added ~1 ms to the
    c=1 p99 of every proxy measured, minproxy.py's as much as Farebox's (docs/performance.md,
    "The bench's memory sampler").
    """

    pid: int
    peak_kib: dict[int, int] = field(default_factory=dict)
    peak_pss_kib: dict[int, int] = field(default_factory=dict)
    peak_uss_kib: dict[int, int] = field(default_factory=dict)

    def start(self) -> RssWatch:
        self.sample()
        return self

    def sample(self) -> None:
        for member in tree(self.pid):
            kib = peak_rss_kib(member)
            self.peak_kib[member] = max(self.peak_kib.get(member, 0), kib)
            pss, uss = shared_kib(member)
            self.peak_pss_kib[member] = max(self.peak_pss_kib.get(member, 0), pss)
            self.peak_uss_kib[member] = max(self.peak_uss_kib.get(member, 0), uss)

    def stop(self) -> None:
        self.sample()

    def per_process_mib(self) -> float:
        """The largest RSS any single process of the tree reached (a worker's, or the only)."""
        return round(max(self.peak_kib.values(), default=0) / 1024, 1)

    def total_mib(self) -> float:
        return round(sum(self.peak_kib.values()) / 1024, 1)

    def pss_uss_mib(self) -> tuple[float, float]:
        """The largest PSS and USS any single process of the tree reached."""
        pss = max(self.peak_pss_kib.values(), default=0)
        uss = max(self.peak_uss_kib.values(), default=0)
        return round(pss / 1024, 1), round(uss / 1024, 1)


@dataclass
class Proc:
    """One started process: its pid, log and launch time (epoch seconds)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    launched: float
    settings: dict[str, str] = field(default_factory=dict)  # environment set for it

    def shown(self, root: Path) -> str:
        """The command line with its settings, as a reader would type it."""
        words = [f"{k}={v}" for k, v in self.settings.items()]
        words += [str(part) for part in self.popen.args]  # type: ignore[union-attr]
        return shlex.join(words).replace(f"{root}/", "")

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, grace_s: float = 20.0) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()  # SIGTERM: a gateway flushes its ledger
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def launch(
    name: str, command: Sequence[str], core: str, workdir: Path, settings: dict[str, str]
) -> Proc:
    """Start `command` pinned to `core` (a taskset list) with `settings` in a clean
    environment, output to workdir/NAME.log."""
    log = workdir / f"{name}.log"
    launched = time.time()
    with log.open("wb") as out:  # the child keeps its own handle
        popen = subprocess.Popen(
            ["taskset", "-c", core, *command],
            env=clean_env(**settings),
            cwd=workdir,
            stdout=out,
            stderr=out,
        )
    # Reaped as soon as it exits, so /proc/PID goes and loadgen's probe (--pid) gives up.
    threading.Thread(target=popen.wait, daemon=True).start()
    return Proc(name, popen, log, launched, settings)


def wait_http(url: str, proc: Proc, timeout_s: float = 60.0) -> None:
    """Poll `url` until it answers; fail with the log's tail when the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited: {tail(proc.log)}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name} never answered {url}: {tail(proc.log)}")


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def log_errors(log: Path) -> str:
    """How many ERROR lines a process logged, and the first exception it named."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = sum(line.startswith("ERROR") for line in lines)
    named = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*: ", ln)]
    if not errors and not named:
        return ""
    first = f"; first exception: {named[0][:160]}" if named else ""
    return f"{errors} ERROR lines in its log{first}"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without FAREBOX_* or LITELLM_* settings of the caller, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAREBOX_", "LITELLM_"))}
    env.update(extra)
    return env
