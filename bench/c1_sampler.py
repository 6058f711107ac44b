"""What a process reading a proxy's /proc memory files does to its c=1 tail.

Run: `python bench/c1_sampler.py [--pairs 4] [-n 600]` (a quiet box: ~2 minutes).

Starts the bench's mock upstream on core 0, and `farebox serve` (bench/hotpath.py's
farebox-sqlite configuration) and perf-floor's minproxy.py on core 1, as bench/hotpath.py
does; after a c=64 warm-up of each, every pair runs perf-floor's loadgen at c=1 (`-n`
requests after 20 of warm-up, as the full bench's c=1 scenario) against each proxy twice:
with nothing else running, then with a sampler process reading both proxies'
/proc/PID/status and /proc/PID/smaps_rollup every 0.1 s, as bench/hotpath.py's memory
sampler did during its runs until 2026-12-03. Printed per pair: each proxy's p50 and p99
without and with the sampler. smaps_rollup walks the process's page tables under its
memory-map lock; the sampler is unpinned, as the bench's thread was.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hotpath_procs import GATEWAY_CORE, LOAD_CORE, rss_kib, shared_kib, tree
from hotpath_targets import MODEL, ROOT, start_farebox, start_minproxy, start_mock

FLOOR = Path(os.environ.get("FAREBOX_PERF_FLOOR", ROOT.parent / "shared" / "perf-floor"))


def sampler(pids: list[int], interval_s: float = 0.1) -> None:
    """Read each process's status and smaps_rollup every `interval_s`, until killed."""
    while True:
        time.sleep(interval_s)
        for pid in pids:
            for member in tree(pid):
                rss_kib(member)
                shared_kib(member)


def loadgen(url: str, *argv: str) -> dict[str, float]:
    """One perf-floor loadgen run on the load core; its latency percentiles, ms."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = ["taskset", "-c", LOAD_CORE, sys.executable, str(FLOOR / "loadgen.py")]
        command += ["--url", url, "--model", MODEL, *argv, "--json-out", out.name]
        subprocess.run(command, check=True, capture_output=True)
        summary = json.loads(Path(out.name).read_text().splitlines()[-1])
    return {k: float(v) for k, v in summary["lat_ms"].items() if k in ("p50", "p99")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("-n", type=int, default=600, help="measured requests per c=1 run")
    parser.add_argument("--sample", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        sampler(args.sample)
        return
    workdir = Path(tempfile.mkdtemp(prefix="c1-sampler-"))
    mock, mock_url = start_mock(sys.executable, FLOOR, workdir, LOAD_CORE)
    proxies = [
        start_farebox("farebox-sqlite", workdir, mock_url, GATEWAY_CORE, None, None),
        start_minproxy(sys.executable, FLOOR, workdir, mock_url),
    ]
    try:
        time.sleep(3)  # started and listening (each answers the warm-up below)
        for proxy in proxies:
            loadgen(proxy.url, "-c", "64", "-n", "6000", "--warmup", "100")
        pids = [str(proxy.pid) for proxy in proxies]
        c1 = ("-c", "1", "-n", str(args.n), "--warmup", "20")
        for pair in range(1, args.pairs + 1):
            quiet = {proxy.name: loadgen(proxy.url, *c1) for proxy in proxies}
            watching = subprocess.Popen([sys.executable, __file__, "--sample", *pids])
            time.sleep(0.3)
            try:
                sampled = {proxy.name: loadgen(proxy.url, *c1) for proxy in proxies}
            finally:
                watching.kill()
                watching.wait()
            for proxy in proxies:
                q, s = quiet[proxy.name], sampled[proxy.name]
                print(
                    f"pair {pair} {proxy.name:15s} p50 {q['p50']:.3f} -> {s['p50']:.3f} ms, "
                    f"p99 {q['p99']:.3f} -> {s['p99']:.3f} ms (no sampler -> sampler)",
                    flush=True,
                )
    finally:
        for proxy in proxies:
            proxy.stop()
        mock.stop()


if __name__ == "__main__":
    main()
