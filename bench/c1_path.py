"""Concurrency 1, small request: what the gateway adds, and what it does per request.

Run: `python bench/c1_path.py [-n 2000] [-c 1] [--stream] [--src DIR[::NAME=VALUE,...] ...]
[--pairs 3] [--strace] [--perf] [--gc] [--phases] [--hotpath-config]`.

Starts perf-floor's mock upstream on core 0 and, for each tree in turn (this checkout,
then every `--src`; all of them again for each pair, so trees alternate within the same
minutes), `farebox serve` pinned to core 1 with `bench/pipeline_cpu.py`'s config (an
alias renamed to the mock's model, SQLite ledger; `--hotpath-config`: bench/hotpath.py's,
every feature on). Each round loads the mock directly
(the baseline), then the gateway at concurrency 1 and prints, per tree:

- added p50 / p99 (whole latency, or TTFT with `--stream`: to the first content token,
  loadgen's `ttft_content`): the gateway's percentile
  minus the direct one of the same round;
- CPU ms per request (utime+stime of the process over the requests sent), and the same
  for the loop's thread and for the others (the ledger's database and spool threads);
- the voluntary context switches per request of the loop's thread and of the others: each
  a time the thread went to sleep and had to be woken (a proxy's loop sleeps twice per
  request at concurrency 1: waiting for the client, then for the upstream);
- `--perf`: context switches per request of the gateway's process (`perf stat`), each a
  time its loop (or a thread) went to sleep and had to be woken;
- `--strace`: system calls per request by name (`strace -f -c`, a separate run: strace
  slows every call);
- `--phases`: the loop thread's CPU (µs, mean) from a request's bytes in to its upstream
  request written, waiting for the reply, from the reply to the response body written, and
  from there to the next request's bytes (work after the response, which at concurrency 1
  delays the next request when it outlasts the client's turnaround), and `busy_p50` /
  `busy_p99`: the process's CPU from a request's bytes in to its response written, its
  latency on an idle core less the upstream's (load on a shared box does not move it),
  and `loop_p50` / `loop_p99`, the loop thread's own CPU over the same span;
- `--gc`: the cyclic collector's collections per 1,000 requests by generation, their
  mean and longest pause (gc.callbacks installed by the launcher).

`--src DIR::NAME=VALUE` runs a tree with its own environment: e.g.
`FAREBOX_LEDGER_FLUSH_INTERVAL=1000` (no ledger flush during the run), `C1_GC_OFF=1`
(the cyclic collector disabled), `C1_GC_THRESHOLD=N` (its gen-0 threshold set to N),
`C1_NICE_THREADS=N` (every thread but the loop's at nice N) or
`C1_SET=module.NAME=value;...` (a module constant, e.g. `gateway.ledger.writer.SLICE_ROWS=8`),
to see what each adds to `busy_p99`. `-c` sets the measured run's concurrency (the
collector's figures at 64, say).

One JSON line per tree and round, then a summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_cpu import CONFIG, _cpu_s, _free_port, _wait_port

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# `farebox serve` from a checkout, with the collector's pauses logged at exit when asked.
LAUNCH = """
import sys, os
sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')
                    and 'editable' not in getattr(f, '__name__', '')]
sys.path.insert(0, sys.argv.pop(1))
if os.environ.get('C1_GC_OFF'):  # `--src DIR::C1_GC_OFF=1`: no cyclic collection at all
    import gc
    gc.disable()
if os.environ.get('C1_GC_THRESHOLD'):  # `--src DIR::C1_GC_THRESHOLD=N`: gen-0 threshold N
    import gc
    young = int(os.environ['C1_GC_THRESHOLD'])
    gc.set_threshold(young, *gc.get_threshold()[1:])
    from gateway import heap
    if hasattr(heap, 'YOUNG_THRESHOLD'):  # the one `farebox serve` sets
        heap.YOUNG_THRESHOLD = young
if os.environ.get('C1_NICE_THREADS'):  # `::C1_NICE_THREADS=N`: every other thread at nice N
    import threading
    nice, bootstrap = int(os.environ['C1_NICE_THREADS']), threading.Thread._bootstrap_inner
    def niced(self):
        os.setpriority(os.PRIO_PROCESS, 0, nice)  # Linux: the calling thread alone
        bootstrap(self)
    threading.Thread._bootstrap_inner = niced
for setting in filter(None, os.environ.get('C1_SET', '').split(';')):
    # `::C1_SET=gateway.ledger.writer.SLICE_ROWS=8`: a module constant set before serving
    import importlib
    target, _, value = setting.partition('=')
    module, _, name = target.rpartition('.')
    owner = importlib.import_module(module)
    setattr(owner, name, type(getattr(owner, name))(value))
log = os.environ.get('C1_GC_LOG')
if log:
    import atexit, gc, json, time
    def zeroed():
        return {'count': [0, 0, 0], 'longest_ms': [0.0, 0.0, 0.0], 'total_ms': [0.0, 0.0, 0.0],
                'cpu_ms': [0.0, 0.0, 0.0], 'collected': [0, 0, 0]}
    stats = zeroed()
    started = [0.0, 0.0]
    def watch(phase, info):
        if phase == 'start':
            started[:] = time.perf_counter(), time.thread_time()
            return
        gen, ms = info['generation'], (time.perf_counter() - started[0]) * 1000
        stats['count'][gen] += 1
        stats['total_ms'][gen] += ms
        stats['cpu_ms'][gen] += (time.thread_time() - started[1]) * 1000
        stats['collected'][gen] += info['collected']
        stats['longest_ms'][gen] = max(stats['longest_ms'][gen], ms)
    gc.callbacks.append(watch)
    def reset(*_):
        stats.update(zeroed())
    def dump(*_):
        with open(log + '.part', 'w') as out:
            json.dump(stats, out)
        os.replace(log + '.part', log)
    import signal
    signal.signal(signal.SIGUSR1, reset)
    signal.signal(signal.SIGUSR2, dump)
phases = os.environ.get('C1_PHASES')
if phases:
    # The loop thread's CPU clock at four points of each request: its bytes in (t0), its
    # upstream request written (t1), the upstream reply in (t2), the response body
    # written (t3); the next request's t0 ends the one before.
    import json, signal, time
    from aiohttp import client_proto, http_writer
    from gateway import server
    clock, process = time.thread_time, time.process_time
    marks = []
    def mark(label, method):
        def wrapper(self, *args, **kwargs):
            marks.append((label, clock(), process()))
            return method(self, *args, **kwargs)
        return wrapper
    server.FareboxHttpToolsProtocol.data_received = mark(
        0, server.FareboxHttpToolsProtocol.data_received)
    http_writer.StreamWriter._writelines = mark(1, http_writer.StreamWriter._writelines)
    http_writer.StreamWriter._write = mark(1, http_writer.StreamWriter._write)
    client_proto.ResponseHandler.data_received = mark(2, client_proto.ResponseHandler.data_received)
    try:  # plain http:// upstreams go through gateway/upstream/h1.py, not aiohttp's client
        from gateway.upstream import h1
    except ImportError:
        pass
    else:
        # A body in hand is written by Connection.write (e0b7d33) without send's coroutine;
        # a tree from before it has send alone.
        if hasattr(h1.Connection, 'write'):
            h1.Connection.write = mark(1, h1.Connection.write)
        else:
            h1.Connection.send = mark(1, h1.Connection.send)
        h1.Connection.data_received = mark(2, h1.Connection.data_received)
    def body_write(method):
        def wrapper(self, data):
            if not data.startswith(b'HTTP/'):
                marks.append((3, clock(), process()))
            return method(self, data)
        return wrapper
    server.HeadWithBody.write = body_write(server.HeadWithBody.write)
    def dump_phases(*_):
        with open(phases + '.part', 'w') as out:
            json.dump(marks, out)
        os.replace(phases + '.part', phases)
    def chained(signum, then):
        before = signal.getsignal(signum)
        def handler(*args):
            then()
            if callable(before):
                before(*args)
        signal.signal(signum, handler)
    chained(signal.SIGUSR1, marks.clear)
    chained(signal.SIGUSR2, dump_phases)
from gateway.cli import main
main()
"""


def _loadgen(
    floor: Path, url: str, model: str, n: int, warm: int, stream: bool, concurrency: int = 1
) -> dict[str, Any]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = [
        "taskset",
        "-c",
        "0",
        PY,
        str(floor / "loadgen.py"),
        "--url",
        url,
        "--model",
        model,
    ]
    cmd += ["-c", str(concurrency), "-n", str(n), "--warmup", str(warm), "--max-seconds", "120"]
    cmd += ["--json-out", str(out)]
    if stream:
        cmd += ["--stream", "--drain"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text().splitlines()[-1])
    out.unlink()
    return result


def _percentiles(run: dict[str, Any], stream: bool) -> dict[str, float]:
    # A stream's TTFT is to its first content token, as bench/hotpath.py judges it (until
    # 2026-12-03 this took loadgen's first `data:` event: the role chunk, no content).
    lat = run["ttft_content_ms"] if stream else run["lat_ms"]
    return {"p50": lat["p50"], "p99": lat["p99"]}


_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def _strace_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = _STRACE_ROW.match(line)
        if match and match.group(2) != "total":
            counts[match.group(2)] = int(match.group(1))
    return counts


def _perf_switches(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name = parts[2] if parts[1] == "msec" and len(parts) > 2 else parts[1]
        if name in ("context-switches", "cpu-migrations", "task-clock"):
            found[name] = float(parts[0].replace(",", ""))
    return found


PHASES = ("in_to_upstream", "upstream_wait", "reply_to_response", "after_response")


def _phases(marks: list[list[float]]) -> dict[str, float]:
    """Mean loop-thread CPU (µs) of each phase of a request, from the launcher's marks.

    A request runs from its bytes in (0) to its upstream request written (1), the reply
    in (2), its response written (3) and the next request's bytes in (0): the CPU of the
    loop thread between each pair of consecutive marks is that phase's. Also the p50 and
    p99 of the process's CPU (all threads: the core is the gateway's alone) from a
    request's bytes in to its response written: what its latency would be on an idle
    core, less the upstream's and the kernel's time, whatever the box's load; and
    `loop_p50` / `loop_p99`, the loop thread's own CPU over the same span (the other
    threads' CPU in `busy` may have run while the loop waited for the upstream).
    """
    sums = [0.0] * 4
    counts = [0] * 4
    stage, at, began, began_loop = None, 0.0, 0.0, 0.0
    busy: list[float] = []
    loop: list[float] = []
    for label, clock, process in marks:
        label = int(label)
        expected = 0 if stage is None else (stage + 1) % 4
        if label == expected and stage is not None:
            sums[stage] += clock - at
            counts[stage] += 1
            if label == 3:
                busy.append((process - began) * 1e6)
                loop.append((clock - began_loop) * 1e6)
        if label == expected or label == 0:
            stage, at = label, clock
            if label == 0:
                began, began_loop = process, clock
    found = {
        name: round(sums[i] / counts[i] * 1e6, 1) for i, name in enumerate(PHASES) if counts[i]
    }
    for name, spans in (("busy", busy), ("loop", loop)):
        spans.sort()
        if spans:
            found[f"{name}_p50"] = round(spans[len(spans) // 2], 1)
            found[f"{name}_p99"] = round(spans[min(len(spans) - 1, len(spans) * 99 // 100)], 1)
    return found


def _switches(pid: int) -> tuple[int, int]:
    """Voluntary context switches (a thread went to sleep): the loop's thread, the others."""
    main = others = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            status = (task / "status").read_text()
            count = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            if task.name == str(pid):
                main = count
            else:
                others += count
    return main, others


def _thread_cpu(pid: int) -> tuple[float, float]:
    """utime+stime in seconds: the loop's thread, and the others (a thread that ended is lost)."""
    tick = os.sysconf("SC_CLK_TCK")
    main = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            spent = (int(fields[11]) + int(fields[12])) / tick
            if task.name == str(pid):
                main = spent
            else:
                others += spent
    return main, others


def _peak_rss_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM), MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return round(int(status.split("\nVmHWM:")[1].split()[0]) / 1024, 1)


def _written(*paths: Path | None) -> None:
    """Wait until the gateway has written each file (it replaces the empty one)."""
    for _ in range(300):
        if all(path is None or path.stat().st_size for path in paths):
            return
        time.sleep(0.1)
    raise RuntimeError("the gateway did not write its measurements")


def _tree(spec: str) -> tuple[str, dict[str, str]]:
    """`DIR` or `DIR::NAME=VALUE,NAME=VALUE`: a checkout and environment of its own."""
    src, _, extra = spec.partition("::")
    pairs = (item.partition("=") for item in extra.split(",") if item)
    return str(Path(src).resolve()), {name: value for name, _, value in pairs}


def _round(args: argparse.Namespace, spec: str, env: dict[str, str], mock_url: str) -> dict:
    port = _free_port()
    src, extra = _tree(spec)
    env = env | extra | {"FAREBOX_PORT": str(port)}
    gc_log = Path(tempfile.mkstemp(suffix=".gc.json")[1]) if args.gc else None
    if gc_log is not None:
        env["C1_GC_LOG"] = str(gc_log)
    phases = Path(tempfile.mkstemp(suffix=".phases.json")[1]) if args.phases else None
    if phases is not None:
        env["C1_PHASES"] = str(phases)
    signalled = gc_log is not None or phases is not None
    cmd = ["taskset", "-c", "1", PY, "-c", LAUNCH, src, "serve"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    row: dict[str, Any] = {"src": spec}
    try:
        _wait_port(port, proc)
        _loadgen(args.floor, url, "bench-gpt", args.warm, 0, args.stream)
        direct = _loadgen(args.floor, mock_url, "mock-model", args.n, 100, args.stream)
        if signalled:
            os.kill(proc.pid, signal.SIGUSR1)
        before, slept, spent = _cpu_s(proc.pid), _switches(proc.pid), _thread_cpu(proc.pid)
        run = _loadgen(args.floor, url, "bench-gpt", args.n, 0, args.stream, args.c)
        cpu = _cpu_s(proc.pid) - before
        woke = [after - then for after, then in zip(_switches(proc.pid), slept, strict=True)]
        row["sleeps_per_req"] = {
            "loop_thread": round(woke[0] / run["sent"], 2),
            "other_threads": round(woke[1] / run["sent"], 2),
        }
        used = [after - then for after, then in zip(_thread_cpu(proc.pid), spent, strict=True)]
        row["thread_cpu_ms_per_req"] = {
            "loop_thread": round(used[0] * 1000 / run["sent"], 3),
            "other_threads": round(used[1] * 1000 / run["sent"], 3),
        }
        if signalled:
            os.kill(proc.pid, signal.SIGUSR2)
            _written(gc_log, phases)
        if phases is not None:
            row["phases_us"] = _phases(json.loads(phases.read_text()))
        if gc_log is not None:
            gc_stats = json.loads(gc_log.read_text())
            per_k = [round(count * 1000 / run["sent"], 2) for count in gc_stats["count"]]
            longest = [round(ms, 2) for ms in gc_stats["longest_ms"]]
            mean, gc_cpu = (
                [round(total / count, 3) if count else 0.0 for total, count in zip(
                    gc_stats[key], gc_stats["count"], strict=True)]
                for key in ("total_ms", "cpu_ms")
            )  # fmt: skip
            freed = [round(count / run["sent"], 2) for count in gc_stats["collected"]]
            row["gc"] = {
                "per_1000_req": per_k, "mean_ms": mean, "mean_cpu_ms": gc_cpu,
                "longest_ms": longest, "freed_per_req": freed,
            }  # fmt: skip
        base, through = _percentiles(direct, args.stream), _percentiles(run, args.stream)
        row["direct"] = base
        row["gateway"] = through
        row["added"] = {k: round(through[k] - base[k], 3) for k in base}
        row["cpu_ms_per_req"] = round(cpu * 1000 / run["sent"], 3)
        row["peak_rss_mib"] = _peak_rss_mib(proc.pid)
        if args.perf:
            perf = subprocess.Popen(
                ["perf", "stat", "-e", "context-switches,cpu-migrations,task-clock",
                 "-p", str(proc.pid)],
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(0.3)
            sent = _loadgen(args.floor, url, "bench-gpt", args.n, 0, args.stream)["sent"]
            perf.send_signal(signal.SIGINT)
            _, err = perf.communicate()
            found = _perf_switches(err)
            row["perf_per_req"] = {k: round(v / sent, 3) for k, v in found.items()}
        if args.strace:
            trace = subprocess.Popen(
                ["strace", "-f", "-c", "-p", str(proc.pid)],
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            time.sleep(0.5)
            sent = _loadgen(args.floor, url, "bench-gpt", args.strace_n, 0, args.stream)["sent"]
            trace.send_signal(signal.SIGINT)
            _, err = trace.communicate()
            counts = _strace_counts(err)
            row["syscalls_per_req"] = {
                name: round(count / sent, 2)
                for name, count in sorted(counts.items(), key=lambda item: -item[1])
                if count / sent >= 0.05
            }
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for path in (gc_log, phases):
            if path is not None:
                path.unlink(missing_ok=True)
    return row


def _config(mock_port: int, hotpath: bool) -> str:
    """pipeline_cpu.py's config, or with `hotpath` bench/hotpath.py's (family openai, a
    max_tokens default and rules: every request's body gains a field), for the same alias."""
    if not hotpath:
        return CONFIG.format(port=mock_port)
    from hotpath_targets import FAREBOX_CONFIG

    base = f"http://127.0.0.1:{mock_port}/v1"
    return FAREBOX_CONFIG.format(model="bench-gpt", upstream="mock-model", base=base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("-c", type=int, default=1, help="concurrency of the measured run")
    parser.add_argument(
        "--src", action="append", default=[], help="another checkout (A/B): DIR[::NAME=VALUE,...]"
    )
    parser.add_argument("--pairs", type=int, default=1, help="rounds over every tree")
    parser.add_argument("--strace", action="store_true", help="count system calls per request")
    parser.add_argument("--strace-n", type=int, default=500)
    parser.add_argument("--perf", action="store_true", help="context switches per request")
    parser.add_argument("--gc", action="store_true", help="the collector's runs and pauses")
    parser.add_argument("--phases", action="store_true", help="loop CPU per phase of a request")
    parser.add_argument(
        "--hotpath-config",
        action="store_true",
        help="bench/hotpath.py's config (every feature on) instead of pipeline_cpu.py's",
    )
    args = parser.parse_args()
    trees = [str(ROOT), *args.src]
    mock_port = _free_port()
    mock = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            PY,
            str(args.floor / "mock_upstream.py"),
            "--port",
            str(mock_port),
        ],
        stdout=subprocess.DEVNULL,
    )
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(_config(mock_port, args.hotpath_config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning"}
    rows: list[dict[str, Any]] = []
    try:
        _wait_port(mock_port, mock)
        mock_url = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        for _ in range(args.pairs):
            for src in trees:
                row = _round(args, src, env, mock_url)
                row["load"] = round(os.getloadavg()[0], 2)
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        mock.terminate()
        mock.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    for src in trees:
        mine = [row for row in rows if row["src"] == src]
        added = [(row["added"]["p50"], row["added"]["p99"]) for row in mine]
        cpu = [row["cpu_ms_per_req"] for row in mine]
        print(json.dumps({"src": src, "added_p50_p99": added, "cpu_ms_per_req": cpu}))


if __name__ == "__main__":
    main()
