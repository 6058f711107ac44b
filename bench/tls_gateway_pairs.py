"""The whole gateway's CPU per request with an https:// upstream: two trees, in pairs.

Run: `python bench/tls_gateway_pairs.py --base TREE --new TREE [--pairs 3] [-n 3000]
[--stream]` (a tree: a checkout with its C extensions built, e.g. a `git worktree`).

bench/pipeline_cpu.py's measurement (`farebox serve` pinned to core 1, perf-floor's loadgen
on core 0, CPU from /proc over the measured run after a warm-up, upstream TCP opens per
request), with its upstream behind TLS (bench/tls_mock.py: the same mock, its own CA,
trusted by the gateway through SSL_CERT_FILE) and the gateway alternating between the two
trees, base then new, then new then base. Prints one JSON object: a row per run and the
new/base ratio per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from pipeline_cpu import LAUNCH, PY, ROOT, _free_port, _measure
from tls_client_cpu import start_mock

CONFIG = """models:
  bench-gpt:
    {{provider: openai, model: mock-model, base_url: "https://127.0.0.1:{port}/v1", family: vllm}}
prices:
  bench-gpt: {{input: 1.0, output: 2.0}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    floor = os.environ.get("FAREBOX_PERF_FLOOR") or ROOT.parent / "shared" / "perf-floor"
    parser.add_argument("--floor", type=Path, default=Path(floor))
    parser.add_argument("--base", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("-n", "--n", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=500)
    parser.add_argument("-c", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=60)
    args = parser.parse_args()
    args.model, args.callgrind, args.profile = "bench-gpt", False, None
    args.history_file, args.history_mode = None, "agent"
    data = Path(tempfile.mkdtemp(prefix="tls-pairs-"))
    mock, mock_port = start_mock(data / "ca.pem")
    (data / "config.yaml").write_text(CONFIG.format(port=mock_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env |= {"FAREBOX_CONFIG": str(data / "config.yaml"), "FAREBOX_DATA_DIR": str(data)}
    env |= {"FAREBOX_LOG_LEVEL": "warning", "SSL_CERT_FILE": str(data / "ca.pem")}
    rows, ratios = [], []
    try:
        for pair in range(args.pairs):
            order = ("base", "new") if pair % 2 == 0 else ("new", "base")
            cpu = {}
            for name in order:
                port = _free_port()
                cmd = [PY, "-c", LAUNCH, getattr(args, name), "serve"]
                row = _measure(args, name, cmd, port, env | {"FAREBOX_PORT": str(port)})
                rows.append(row)
                cpu[name] = float(row["cpu_ms_per_req"])
                print(json.dumps(row), file=sys.stderr, flush=True)
            ratios.append(round(cpu["new"] / cpu["base"], 3))
    finally:
        mock.terminate()
        mock.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps({"stream": args.stream, "c": args.c, "rows": rows, "new/base": ratios}))


if __name__ == "__main__":
    main()
