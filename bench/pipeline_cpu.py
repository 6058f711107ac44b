"""CPU per request of Farebox's chat path beside the bare-proxy floor, in one run.

Run: `python bench/pipeline_cpu.py [--floor ../shared/perf-floor] [--n 3000] [--stream]
[--history-file F --history-mode agent|fresh] [--profile out.txt]
[--database-url postgresql+asyncpg://... --redis-url redis://...]`.

Starts the floor's instant mock upstream and load generator on core 0, then each proxy
under test pinned to core 1: `minproxy.py` (an aiohttp pass-through, the floor) and
`farebox serve` with a config whose alias `bench-gpt` routes to the mock's `mock-model`
(a renamed alias: every request is a body edit). After a warm-up run it reads the
process's utime+stime from /proc before and after the measured run and divides by the
requests sent; upstream connections opened are `ActiveOpens` (/proc/net/snmp) over the
run. Prints one JSON object. `--profile` runs py-spy on the gateway during a second run.
`--worker-metrics library|farebox` has the gateway keep its metrics in prometheus_client's
multiprocess files as a `--workers` worker does, written by the library's value class or
by gateway.metric_files' (docs/performance.md, "A worker's metrics files").

`--callgrind` runs each proxy under `valgrind --tool=callgrind` instead and reports the
instructions it executed per request (counters zeroed after the warm-up, dumped after the
measured run): about 50 times slower, but the same tree gives the same count to within a
percent or two on this shared box, where CPU time moves by 20%. Use small runs
(`-n 300 --warm 100 -c 8`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
CONFIG = """models:
  bench-gpt:
    {{provider: openai, model: mock-model, base_url: "http://127.0.0.1:{port}/v1", family: vllm}}
prices:
  bench-gpt: {{input: 1.0, output: 2.0}}
"""


# `farebox serve` from another checkout (an A/B of two trees): drop the editable finder.
LAUNCH = (
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
    "getattr(f, '__module__', '') and 'editable' not in getattr(f, '__name__', '')]; "
    "sys.path.insert(0, sys.argv.pop(1)); from gateway.cli import main; main()"
)
# `--worker-metrics`: one process writing its metrics as a `--workers` worker does, in
# prometheus_client's multiprocess files, through the library's value class or Farebox's.
WORKER_METRICS = (
    "import sys; mode = sys.argv.pop(1); from prometheus_client import values; "
    "from gateway.metric_files import file_values; "
    "values.ValueClass = file_values() if mode == 'farebox' else values.MultiProcessValue(); "
    "from gateway.cli import main; main()"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_s(pid: int) -> float:
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def _active_opens() -> int:
    lines = Path("/proc/net/snmp").read_text().splitlines()
    tcp = [line.split() for line in lines if line.startswith("Tcp:")]
    return int(tcp[1][tcp[0].index("ActiveOpens")])


def _wait_port(port: int, proc: subprocess.Popen[bytes], limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def _load(args: argparse.Namespace, url: str, n: int, warmup: int) -> dict[str, object]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = ["taskset", "-c", "0", PY, str(args.floor / "loadgen.py"), "--url", url]
    cmd += ["--model", args.model, "-c", str(args.c), "-n", str(n), "--warmup", str(warmup)]
    cmd += ["--max-seconds", str(args.max_seconds), "--json-out", str(out)]
    if args.stream:
        cmd += ["--stream", "--drain"]
    if args.history_file:
        cmd += ["--history-file", args.history_file, "--history-mode", args.history_mode]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, object] = json.loads(out.read_text().splitlines()[-1])
    out.unlink()
    return result


Row = dict[str, Any]


def _callgrind(pid: int, command: str) -> None:
    subprocess.run(["callgrind_control", command, str(pid)], check=True, stdout=subprocess.DEVNULL)


def _instructions(out_dir: Path) -> int:
    """The instructions counted since the last zeroing: the newest dump's summary."""
    dumps = sorted(out_dir.glob("cg.*"), key=lambda path: path.stat().st_mtime)
    for line in dumps[-1].read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {dumps[-1]}")


def _measure(
    args: argparse.Namespace, name: str, cmd: list[str], port: int, env: dict[str, str]
) -> Row:
    cg_dir = Path(tempfile.mkdtemp(prefix="callgrind-")) if args.callgrind else None
    if cg_dir is not None:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_dir}/cg.%p", *cmd]
    proc = subprocess.Popen(
        ["taskset", "-c", "1", *cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_port(port, proc, 600.0 if cg_dir else 30.0)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        _load(args, url, args.warm, 20)  # first-request costs are not per-request costs
        if cg_dir is not None:
            _callgrind(proc.pid, "-z")
        before, opens = _cpu_s(proc.pid), _active_opens()
        run = _load(args, url, args.n, 0)
        cpu = _cpu_s(proc.pid) - before
        opened = _active_opens() - opens
        sent = int(run["sent"])  # type: ignore[call-overload]
        lat = run["lat_ms"]
        row = {"name": name, "sent": sent, "cpu_ms_per_req": round(cpu * 1000 / sent, 3)}
        if cg_dir is not None:
            _callgrind(proc.pid, "-d")
            row["instructions_per_req"] = round(_instructions(cg_dir) / sent)
        row |= {"rps": run["rps"], "latency_ms": lat, "errors": run.get("errors")}
        row["tcp_opens_per_req"] = round(opened / sent, 3)
        if args.stream:
            row["ttft_ms"] = run.get("ttft_data_ms")
        if args.profile and name == "farebox":
            spy_cmd = [str(Path(PY).parent / "py-spy"), "record", "-p", str(proc.pid)]
            spy_cmd += ["-f", "raw", "-o", args.profile, "-r", str(args.rate)]
            spy = subprocess.Popen(spy_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
            _load(args, url, args.n, 0)
            spy.send_signal(signal.SIGINT)
            spy.wait()
        return row
    finally:
        proc.terminate()
        try:
            proc.wait(60 if cg_dir else 15)
        except subprocess.TimeoutExpired:  # a drain still waiting on a stream
            proc.kill()
            proc.wait()
        if cg_dir is not None and args.keep_callgrind:  # for callgrind_annotate
            Path(args.keep_callgrind).mkdir(parents=True, exist_ok=True)
            for dump in cg_dir.glob("cg.*"):
                shutil.move(dump, Path(args.keep_callgrind) / f"{name}.{dump.name}")
        if cg_dir is not None:
            shutil.rmtree(cg_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", "--n", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("-c", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--history-file")
    parser.add_argument("--history-mode", default="agent")
    parser.add_argument("--max-seconds", type=float, default=60)
    parser.add_argument("--profile")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--keep-callgrind", help="with --callgrind: keep the dumps here")
    parser.add_argument("--only", choices=("farebox", "minproxy"))
    parser.add_argument("--src", help="run the gateway from this checkout instead")
    parser.add_argument(
        "--worker-metrics",
        choices=("library", "farebox"),
        help="write metrics to multiprocess files, as a worker does, through prometheus_client's "
        "value class or gateway.metric_files'",
    )
    parser.add_argument("--direct", action="store_true", help="also load the mock directly")
    parser.add_argument(
        "--callgrind", action="store_true", help="count instructions per request (valgrind)"
    )
    parser.add_argument("--database-url", help="FAREBOX_DATABASE_URL (default: SQLite)")
    parser.add_argument("--redis-url", help="FAREBOX_REDIS_URL (default: in-process state)")
    args = parser.parse_args()
    args.model = "bench-gpt"
    mock_port, min_port, fb_port = _free_port(), _free_port(), _free_port()
    mock = subprocess.Popen(
        ["taskset", "-c", "0", PY, str(args.floor / "mock_upstream.py"), "--port", str(mock_port)],
        stdout=subprocess.DEVNULL,
    )
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(CONFIG.format(port=mock_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning", "FAREBOX_PORT": str(fb_port)}
    if args.database_url:  # e.g. postgresql+asyncpg://127.0.0.1:5432/<a database of your own>
        env["FAREBOX_DATABASE_URL"] = args.database_url
    if args.redis_url:  # e.g. redis://127.0.0.1:6379/12
        env["FAREBOX_REDIS_URL"] = args.redis_url
    rows: list[Row] = []
    try:
        _wait_port(mock_port, mock)
        upstream = f"http://127.0.0.1:{mock_port}/v1/chat/completions"
        if args.direct:  # the latency a proxy adds is its percentile minus this one
            args.model, direct = "mock-model", _load(args, upstream, args.n, args.warm)
            rows.append({"name": "direct", "latency_ms": direct["lat_ms"], "rps": direct["rps"]})
            args.model = "bench-gpt"
        if args.only != "farebox":
            cmd = [PY, str(args.floor / "minproxy.py"), str(min_port), upstream]
            rows.append(_measure(args, "minproxy", cmd, min_port, env))
        if args.only != "minproxy":
            farebox = [shutil.which("farebox", path=str(Path(PY).parent)) or "farebox"]
            if args.src:
                farebox = [PY, "-c", LAUNCH, args.src]
            if args.worker_metrics:
                if args.src:
                    parser.error("--worker-metrics runs this checkout's gateway: no --src")
                env["PROMETHEUS_MULTIPROC_DIR"] = str(data / "metrics")
                (data / "metrics").mkdir()
                farebox = [PY, "-c", WORKER_METRICS, args.worker_metrics]
            rows.append(_measure(args, "farebox", [*farebox, "serve"], fb_port, env))
    finally:
        mock.terminate()
        mock.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    key = "instructions_per_req" if args.callgrind else "cpu_ms_per_req"
    cpu = {row["name"]: row.get(key) for row in rows}
    floor, farebox_cpu = cpu.get("minproxy"), cpu.get("farebox")
    if floor and farebox_cpu:
        rows.append({"ratio": round(float(farebox_cpu) / float(floor), 2)})
    summary = {"stream": args.stream, "c": args.c, "history": args.history_file}
    summary |= {"database": args.database_url or "sqlite", "redis": args.redis_url}
    print(json.dumps(summary | {"rows": rows}))


if __name__ == "__main__":
    main()
