"""perf-floor's loadgen.py, imported once and run many times (one process for all runs).

    FAREBOX_PERF_FLOOR=DIR taskset -c 0 python bench/hotpath_loadworker.py

Each stdin line is a JSON list of loadgen.py arguments; the worker runs `loadgen.main()` with
them, exactly as `python loadgen.py ARGS` would, then prints `HOTPATH-DONE <exit status>`.
Starting Python and importing aiohttp for each of ~40 runs cost more CPU than the runs of
the test's tiny mode; the load itself is loadgen's own code, unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.environ.get("FAREBOX_PERF_FLOOR", str(Path.cwd())))

import loadgen


def serve() -> None:
    for line in sys.stdin:
        sys.argv = ["loadgen.py", *json.loads(line)]
        try:
            status = loadgen.main()
        except SystemExit as exc:  # argparse refusing an argument
            status = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # report it and stay up for the next run
            print(f"loadgen failed: {exc!r}", flush=True)
            status = 1
        print(f"HOTPATH-DONE {status}", flush=True)


if __name__ == "__main__":
    serve()
