"""`farebox serve` runs no garbage collection while it imports, and serves with one running.

gateway/serve_imports.py pauses the collector from gateway.cli's first import until
`serve` has frozen its imports: the ~280 collections that importing set off (150-190 ms of
CPU before the first request) freed nothing worth it. The process is a real `farebox
serve`; a `sitecustomize` on its path counts the collections from the interpreter's start
and writes them, with the collector's state, on SIGUSR2, after a chat request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.heap import YOUNG_THRESHOLD
from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.serve_probe import probed_serve
from tests.servers import ServerThread, running

COUNT_COLLECTIONS = """\
import gc, json, os, signal

_runs = [0, 0, 0]

def _count(phase, info):
    if phase == "start":
        _runs[info["generation"]] += 1

gc.callbacks.append(_count)

def _dump(*_, path=os.environ["SERVE_GC_OUT"]):
    state = {"enabled": gc.isenabled(), "threshold": gc.get_threshold(), "runs": _runs}
    with open(path + ".part", "w", encoding="utf-8") as out:
        json.dump(state, out)
    os.replace(path + ".part", path)

signal.signal(signal.SIGUSR2, _dump)
"""


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def _collector_after_serving(tmp_path: Path, sim_url: str) -> dict[str, object]:
    with probed_serve(tmp_path, sim_url, COUNT_COLLECTIONS, "SERVE_GC_OUT") as serve:
        assert serve.chat() == 200
        state: dict[str, object] = json.loads(serve.dump())
        return state


def test_serve_collects_nothing_while_importing_and_serves_with_the_collector_on(
    tmp_path: Path, sim: ServerThread
) -> None:
    state = _collector_after_serving(tmp_path, sim.url)
    assert state["enabled"] is True
    assert state["threshold"] == [YOUNG_THRESHOLD, 10, 10]  # freeze_imports' young threshold
    runs = state["runs"]
    assert isinstance(runs, list)
    # Before the pause: ~280 (256 young, 23 middle, 2 full) by the first request. Now: the
    # interpreter's own start, the lifespan's freeze_heap (a full one), a few young ones.
    assert runs[0] + runs[1] < 20, runs
    assert runs[2] <= 2, runs
