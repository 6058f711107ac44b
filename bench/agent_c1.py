"""bench/c1_path.py for the 1 MB agent step (or fresh prompt): what the gateway adds.

Run: `python bench/agent_c1.py [--mode agent|fresh] [c1_path.py's options: -n 300 --warm 30
--pairs 3 --src DIR --phases ...]`.

Every load of bench/c1_path.py (the direct one on the mock, the gateway's warm-up and its
measured run) sends bench/hotpath_load.py's 1 MB history with a new last turn, as
bench/hotpath.py's agent-step and fresh-prompt targets do: for an agent step with one task
id (`--task-prefix bench-agent --tasks 1`), so each request's prefix check runs against
the task's previous one. The added p50 / p99 are the gateway's minus the mock's own, in
the same round, and the trees alternate within the same minutes (`--pairs`), so the
comparison holds on a loaded box better than two separate runs of bench/hotpath.py.
Defaults: `-n 300 --warm 30` (a 1 MB request takes ~10 ms at concurrency 1).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import c1_path
from hotpath_load import write_history


def main() -> None:
    argv = sys.argv[1:]
    mode = "agent"
    if "--mode" in argv:
        at = argv.index("--mode")
        mode = argv[at + 1]
        del argv[at : at + 2]
    history = write_history(Path(tempfile.mkdtemp(prefix="agent-c1-")) / "history-1mb.json")
    extra = ["--history-file", str(history), "--history-mode", mode]
    if mode == "agent":
        extra += ["--task-prefix", "bench-agent", "--tasks", "1"]
    real_run = c1_path.subprocess.run

    def run(cmd: list[str], **kw: Any) -> Any:
        if any(str(part).endswith("loadgen.py") for part in cmd):
            cmd = [*cmd, *extra]
        return real_run(cmd, **kw)

    c1_path.subprocess.run = run  # type: ignore[assignment]
    defaults = [] if "-n" in argv else ["-n", "300"]
    defaults += [] if "--warm" in argv else ["--warm", "30"]
    sys.argv = [sys.argv[0], *defaults, *argv]
    c1_path.main()


if __name__ == "__main__":
    main()
