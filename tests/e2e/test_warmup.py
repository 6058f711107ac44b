"""Start-up does the one-time work a route's first call used to do on the event loop.

A fresh interpreter (an import happens once per process) runs a gateway on a real port,
the simulator in a child process (`bench/loop_stall.py`'s helpers), and profiles the
gateway's loop thread during the first chat and the first lint request: neither imports
a module nor builds FastAPI route state (`fastapi.dependencies.utils.get_dependant`),
and the warm-up itself reached no upstream and wrote no ledger row. The loop CPU these
first calls cost is measured by `python bench/loop_stall.py` (its warm-up rows), not here.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from gateway.app import create_app
from gateway.settings import Settings
from gateway.warmup import route_unrouted

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import cProfile, json, pstats, sqlite3, sys, tempfile, threading
    from pathlib import Path
    import httpx
    sys.path.insert(0, "bench")
    import loop_stall as bench

    def on_loop(loop, call):
        done = threading.Event()
        loop.call_soon_threadsafe(lambda: (call(), done.set()))
        assert done.wait(30)

    def profiled(loop, url, body):
        profile = cProfile.Profile()
        on_loop(loop, profile.enable)  # the loop's thread, not this one
        response = httpx.post(url, json=body, timeout=30)
        on_loop(loop, profile.disable)
        called = sorted(f"{path}:{name}" for path, _, name in pstats.Stats(profile).stats)
        return response.status_code, response.json(), called

    out = {}
    out["backend_before_start"] = "anyio._backends._asyncio" in sys.modules
    with tempfile.TemporaryDirectory() as tmp, bench.simulator(Path(tmp)) as sim_url:
        with bench.gateway(Path(tmp), sim_url) as (url, watch):
            out["backend_after_start"] = "anyio._backends._asyncio" in sys.modules
            ledger = sqlite3.connect(Path(tmp) / "farebox.db")
            out["rows_after_start"] = ledger.execute("select count(*) from requests").fetchone()[0]
            loop = watch._loop
            body = bench._turns([])
            for route in ("chat/completions", "prefix/lint"):
                out[route] = profiled(loop, f"{url}/{route}", body)
    print(json.dumps(out))
    """
)


def _run() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _lazy_work(called: list[str]) -> list[str]:
    """The calls that mean a first call did start-up's work: an import, a route built."""
    return [
        name
        for name in called
        if name.endswith(":_find_and_load") or name.endswith("dependencies/utils.py:get_dependant")
    ]


def test_first_requests_find_the_lazy_work_done_at_start() -> None:
    out = _run()
    # anyio's asyncio backend: imported by start-up, not by the first request.
    assert not out["backend_before_start"]
    assert out["backend_after_start"]
    assert out["rows_after_start"] == 0  # the warm-up wrote no ledger row

    status, reply, called = out["chat/completions"]
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"]  # the simulator answered
    assert called, "the profile saw nothing on the loop"
    assert _lazy_work(called) == []

    status, reply, called = out["prefix/lint"]
    assert status == 200, reply
    assert called
    assert _lazy_work(called) == []


def test_the_warm_up_path_is_served_by_no_route(tmp_path: Path) -> None:
    """Routing it walks every route and runs none: a 404 from the router itself."""
    app = create_app(Settings(data_dir=tmp_path))
    assert asyncio.run(route_unrouted(app.router)) == 404
