"""A worker's multiprocess metrics name their files by a pid kept without a system call;
a child the worker forks still counts in files of its own, and the sums stay right."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, multiprocess, values

from gateway.workers import _own_pid


@pytest.fixture
def multiproc_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    before = values.ValueClass
    values.ValueClass = values.MultiProcessValue(_own_pid)
    try:
        yield tmp_path
    finally:
        values.ValueClass = before


def _total(directory: Path) -> float:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    return registry.get_sample_value("booked_total") or 0.0


def test_a_forked_child_counts_in_its_own_file_and_the_sum_holds(multiproc_dir: Path) -> None:
    counter = Counter("booked", "requests booked", registry=None)
    counter.inc()
    child = os.fork()
    if child == 0:  # the child: its increment must not land in the parent's file
        code = 1
        try:
            counter.inc(2)
            code = 0 if _own_pid() == os.getpid() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    counter.inc()
    files = sorted(path.name for path in multiproc_dir.iterdir())
    assert files == sorted([f"counter_{os.getpid()}.db", f"counter_{child}.db"])
    assert _total(multiproc_dir) == 4.0
    assert _own_pid() == os.getpid()
