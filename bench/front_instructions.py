"""Instructions a chat request costs in-process, with the loop's timers quiet: A/B by count.

Run: `python bench/front_instructions.py [--src DIR] [--pairs 2] [-n 150] [--warm 150]
[--whole] [--config hot] [--api chat|messages|responses|completions] [--keep]`.

bench/stream_instructions.py with `--quiet-timers`: its windows (`first`: the app's call
to its first body message; `rest`: from there to its return), counted under callgrind,
with LoopWatch stopped, the ledger's flush every 1,000 s and the keys polled hourly, so
that what is counted is the request's own work (see that script's docstring).
"""

from __future__ import annotations

import sys

import stream_instructions  # bench/ is the script folder: sys.path[0]

if __name__ == "__main__":
    sys.argv[1:1] = ["--quiet-timers"]
    stream_instructions.main()
