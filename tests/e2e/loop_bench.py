"""`bench/loop_stall.py` as a module: the tests that serve a gateway the way that bench does."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "loop_stall.py"


def load() -> ModuleType:
    """The bench module, loaded once per process."""
    if "loop_stall" in sys.modules:
        return sys.modules["loop_stall"]
    spec = importlib.util.spec_from_file_location("loop_stall", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["loop_stall"] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def serving(data: Path) -> Iterator[tuple[str, str, Any]]:
    """The simulator (child process) and a gateway (this process): their URLs and loop watch."""
    bench = load()
    with bench.simulator(data) as sim_url, bench.gateway(data, sim_url) as (url, watch):
        yield sim_url, url, watch
