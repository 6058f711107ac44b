"""What the ledger's background flushes add to a request's tail latency at concurrency 1.

Run: `python bench/ledger_latency.py [--pairs 3] [-n 3000] [--stream] [--src CHECKOUT]
[--intervals 0.2,3600] [--database-url URL]`. Uses bench/pipeline_cpu.py's harness (the
floor's instant mock and load generator on core 0, `farebox serve` pinned to core 1, one
warm-up run first) and runs the gateway once per flush interval
(`FAREBOX_LEDGER_FLUSH_INTERVAL`), in turns, `--pairs` times. With 3600 s nothing is
flushed during the measured run (the rows wait in memory): the difference between the two
is what the flushes cost the requests they overlap. Also reads the gateway's
`farebox_event_loop_lag_seconds` histogram (a 5 ms sleep's lateness) after each run: the
share of wake-ups later than 0.5, 1 and 2.5 ms. `--src` runs the gateway from another
checkout (an A/B of two trees: `--intervals 0.2 --src-b OTHER` alternates the trees).
Prints one JSON line per run and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import pipeline_cpu as harness  # bench/ is the script folder: sys.path[0]

ROOT = Path(__file__).resolve().parents[1]


def _lag_counts(port: int) -> dict[str, float]:
    """The loop-lag histogram's cumulative bucket counts, by upper bound."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("farebox_event_loop_lag_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            counts[bound] = float(line.rsplit(" ", 1)[1])
    return counts


def _run(args: argparse.Namespace, src: str | None, interval: str) -> dict[str, Any]:
    mock_port, fb_port = harness._free_port(), harness._free_port()
    floor = args.floor
    mock = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            harness.PY,
            str(floor / "mock_upstream.py"),
            "--port",
            str(mock_port),
        ],
        stdout=subprocess.DEVNULL,
    )
    data = Path(tempfile.mkdtemp())
    (data / "config.yaml").write_text(harness.CONFIG.format(port=mock_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning", "FAREBOX_PORT": str(fb_port)}
    env["FAREBOX_LEDGER_FLUSH_INTERVAL"] = interval
    if args.database_url:
        env["FAREBOX_DATABASE_URL"] = args.database_url
    farebox = [shutil.which("farebox", path=str(Path(harness.PY).parent)) or "farebox"]
    if src:
        farebox = [harness.PY, "-c", harness.LAUNCH, src]
    lag: dict[str, float] = {}
    orig_measure_load = harness._load

    def load_then_lag(a: argparse.Namespace, url: str, n: int, warmup: int) -> dict[str, object]:
        before = _lag_counts(fb_port) if n == args.n else None
        result = orig_measure_load(a, url, n, warmup)
        if before is not None:
            after = _lag_counts(fb_port)
            total = after["+Inf"] - before["+Inf"]
            for bound in ("0.0005", "0.001", "0.0025"):
                if bound in after:
                    late = total - (after[bound] - before[bound])
                    lag[f"over_{float(bound) * 1000:g}ms"] = round(late / max(total, 1), 4)
            lag["wakeups"] = total
        return result

    harness._load = load_then_lag
    try:
        harness._wait_port(mock_port, mock)
        row = harness._measure(args, "farebox", [*farebox, "serve"], fb_port, env)
    finally:
        harness._load = orig_measure_load
        mock.terminate()
        mock.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    out = {"src": src or str(ROOT), "interval": interval, "load": os.getloadavg()[0]}
    out |= {"cpu_ms_per_req": row["cpu_ms_per_req"], "rps": row["rps"], "lat": row["latency_ms"]}
    if args.stream:
        out["ttft"] = row.get("ttft_ms")
    out["loop_lag"] = lag
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor_dir = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor_dir))
    parser.add_argument("-n", "--n", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("-c", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--intervals", default="0.2,3600", help="flush intervals, in turns")
    parser.add_argument("--src", help="run the gateway from this checkout")
    parser.add_argument("--src-b", help="alternate with this checkout (same intervals)")
    parser.add_argument("--database-url", help="FAREBOX_DATABASE_URL (default: SQLite)")
    parser.add_argument("--max-seconds", type=float, default=60)
    args = parser.parse_args()
    args.model, args.history_file, args.history_mode = "bench-gpt", None, "agent"
    args.profile, args.callgrind, args.rate = None, False, 200
    trees = [args.src] + ([args.src_b] if args.src_b else [])
    runs = []
    for _ in range(args.pairs):
        for src in trees:
            for interval in args.intervals.split(","):
                run = _run(args, src, interval)
                print(json.dumps(run), flush=True)
                runs.append(run)
    key = "ttft" if args.stream else "lat"
    summary: dict[str, list[Any]] = {}
    for run in runs:
        label = f"{run['src']} @ {run['interval']}"
        summary.setdefault(label, []).append((run[key]["p50"], run[key]["p99"]))
    print(json.dumps({"p50_p99_" + key: summary}))


if __name__ == "__main__":
    main()
