"""CPU per request of one 1 MB agent step (or fresh prompt) through Farebox, alone.

Run: `python bench/agent_step.py [--mode agent|fresh] [-n 150] [--src OTHER_CHECKOUT]
[--profile out.txt --rate 1000]`.

A thin front on `bench/pipeline_cpu.py` (same mock, loadgen, pinning and /proc CPU
accounting) that writes the 1 MB history of `bench/hotpath_load.py` and, for an agent step,
sends it with one task id (`--task-prefix bench-agent --tasks 1`), as `bench/hotpath.py`
does: so the prefix check runs against the task's previous request. Only Farebox is loaded
(`--with-minproxy` adds the floor).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_cpu
from hotpath_load import write_history

_load = pipeline_cpu._load


def _load_with_task(args, url, n, warmup):  # type: ignore[no-untyped-def]
    """loadgen with one task id for an agent step (the hot path's agent scenario)."""
    if args.history_file and args.history_mode == "agent" and "--task-prefix" not in sys.argv:
        real_run = pipeline_cpu.subprocess.run

        def run(cmd, **kw):  # type: ignore[no-untyped-def]
            return real_run([*cmd, "--task-prefix", "bench-agent", "--tasks", "1"], **kw)

        pipeline_cpu.subprocess.run = run  # type: ignore[assignment]
        try:
            return _load(args, url, n, warmup)
        finally:
            pipeline_cpu.subprocess.run = real_run  # type: ignore[assignment]
    return _load(args, url, n, warmup)


def main() -> None:
    argv = sys.argv[1:]
    mode = "agent"
    if "--mode" in argv:
        at = argv.index("--mode")
        mode = argv[at + 1]
        del argv[at : at + 2]
    only = [] if "--with-minproxy" in argv else ["--only", "farebox"]
    argv = [a for a in argv if a != "--with-minproxy"]
    history = write_history(Path(tempfile.mkdtemp(prefix="agent-step-")) / "history-1mb.json")
    defaults = ["-c", "1", "-n", "150", "--warm", "30"]
    sys.argv = [sys.argv[0], *defaults, *only, "--history-file", str(history)]
    sys.argv += ["--history-mode", mode, *argv]
    pipeline_cpu._load = _load_with_task
    pipeline_cpu.main()


if __name__ == "__main__":
    main()
