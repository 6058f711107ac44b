"""A hot-path run keeps the CPU its target spends after loadgen ends (`settle`).

Work a run leaves behind (the ledger applying thousands of c=64 rows) used to be booked
to the next run, the 1 MB agent step. A real process that burns CPU for a while after
`settle` starts must have that CPU counted, and settle must return once it is quiet.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from hotpath_load import Run, combine, settle
from hotpath_procs import TICK_S, cpu_ticks

# Says when it starts, then burns 0.4 s of CPU, then sleeps.
BURN = (
    "import sys, time\nprint('go', flush=True)\nend = time.process_time() + 0.4\n"
    "while time.process_time() < end: pass\ntime.sleep(30)\n"
)


def test_settle_waits_for_a_busy_process_to_go_quiet_and_counts_its_cpu() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "go\n"
        ticks = cpu_ticks(proc.pid)
        began = time.monotonic()
        # A window long enough that a burning process gets more than a tick in it even on
        # a box whose other work starves it (load 20 on 2 cores: ~10% of a core).
        after = settle(proc.pid, ticks, window_s=0.5, limit_s=20)
        assert proc.poll() is None  # quiet, not gone
        assert (after - ticks) * TICK_S >= 0.3  # the burn, counted
        assert time.monotonic() - began < 15  # it went quiet well before the limit
        assert cpu_ticks(proc.pid) - after <= 1
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its stdout


def test_settle_gives_up_at_its_limit_on_a_process_that_never_goes_quiet() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        began = time.monotonic()
        # Windows of 0.3 s: on a box at load 15 a spinning process still gets several ticks
        # in each (in 0.1 s it can get none, and look quiet).
        settle(proc.pid, cpu_ticks(proc.pid), window_s=0.3, limit_s=1.5)
        assert 1.4 <= time.monotonic() - began < 8
    finally:
        proc.kill()
        proc.wait()


def test_passes_combine_their_trailing_cpu_weighted_by_requests_sent() -> None:
    one = Run("fb", "agent-1mb", sent=10, cpu_ms_per_request=8.0, trailing_cpu_ms_per_request=1.0)
    two = Run("fb", "agent-1mb", sent=30, cpu_ms_per_request=6.0, trailing_cpu_ms_per_request=0.0)
    both = combine([one, two])
    assert both.sent == 40
    assert both.cpu_ms_per_request == 6.5
    assert both.trailing_cpu_ms_per_request == 0.25
