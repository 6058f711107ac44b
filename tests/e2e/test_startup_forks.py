"""`farebox serve` runs its start-up steps (the ledger's migration, the price map's digest)
in one forked child, not one each: a fork and a child's exit of the started process cost
5-7 ms of CPU on the gateway's core. The process is a real `farebox serve`; a
`sitecustomize` counts its forks and writes the count on SIGUSR2, after a chat request
(which shows the ledger migrated and the digest installed: tests/e2e/test_serve_imports.py
checks that the serving process never parses the map)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.sim.app import create_sim_app
from gateway.sim.config import SimConfig
from tests.serve_probe import probed_serve
from tests.servers import ServerThread, running

COUNT_FORKS = """\
import os, signal

_forks = [0]
os.register_at_fork(before=lambda: _forks.__setitem__(0, _forks[0] + 1))

def _dump(*_, path=os.environ["SERVE_FORKS_OUT"]):
    with open(path + ".part", "w", encoding="utf-8") as out:
        out.write(str(_forks[0]))
    os.replace(path + ".part", path)

signal.signal(signal.SIGUSR2, _dump)
"""


@pytest.fixture
def sim() -> Iterator[ServerThread]:
    with running(create_sim_app(SimConfig())) as server:
        yield server


def test_serve_forks_one_child_for_its_start_up_steps(tmp_path: Path, sim: ServerThread) -> None:
    with probed_serve(tmp_path, sim.url, COUNT_FORKS, "SERVE_FORKS_OUT") as serve:
        assert serve.chat() == 200
        assert (tmp_path / "data" / "farebox.db").exists()  # migrated in the child
        assert serve.dump() == "1"  # bbfb728: 2 (the migration's, the digest's)
