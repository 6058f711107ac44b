"""gateway.metric_files writes the multiprocess files prometheus_client's own class writes.

The same operations, through prometheus_client's `MultiProcessValue` in one directory
and through `file_values` in another, must leave byte-identical files (names included,
past the 64 KiB a file starts with, so that it grows and is mapped anew), and the
collector must read the same samples from them. A forked child writes to files of its
own; two threads adding to one counter lose nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values
from prometheus_client.mmap_dict import MmapedDict

from gateway.metric_files import PID, file_values
from gateway.metrics import add, observe

GAUGE_MODES = ("all", "liveall", "min", "max", "livemax", "sum", "livesum", "mostrecent")


@pytest.fixture
def use_class(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path, Any], None]]:
    """`use_class(directory, value_class)`: metrics made next live in `directory`."""
    before = values.ValueClass

    def use(directory: Path, value_class: Any) -> None:
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
        values.ValueClass = value_class

    yield use
    values.close_all_multiprocess_files()
    values.ValueClass = before


def _workload(tag: str) -> None:
    """Counters, every gauge mode and a histogram; 600 label values grow the files."""
    counter = Counter(f"c_{tag}", "requests", ["model"], registry=None)
    histogram = Histogram(f"h_{tag}", "latency", ["model"], registry=None)
    gauges = [
        Gauge(f"g_{mode}_{tag}", "g", ["model"], registry=None, multiprocess_mode=mode)
        for mode in GAUGE_MODES
    ]
    for index in range(600):
        model = f"model-{index:04d}-" + "x" * 40
        counter.labels(model).inc(index)
        add(counter.labels(model), 0.5)
        histogram.labels(model).observe(index / 100)
        observe(histogram.labels(model), float("nan") if index == 7 else index / 7)
        for gauge, mode in zip(gauges, GAUGE_MODES, strict=True):
            gauge.labels(model).set(index)
            if mode != "mostrecent":  # prometheus_client refuses inc there
                gauge.labels(model).inc(2)
                gauge.labels(model).dec(1)
    gauges[0].labels("stamped").set(3.0)


def _entries(path: Path) -> list[tuple[str, float, float]]:
    return [
        (key, value, stamp)
        for key, value, stamp, _ in MmapedDict.read_all_values_from_file(str(path))
    ]


def _samples(directory: Path) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(directory))
    found = []
    for metric in registry.collect():
        for sample in metric.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "pid"))
            found.append((sample.name, labels, repr(sample.value)))  # NaN == NaN
    return sorted(found)


def test_the_files_are_byte_for_byte_prometheus_clients(
    tmp_path: Path, use_class: Callable[[Path, Any], None]
) -> None:
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir(), ours.mkdir()
    use_class(theirs, values.MultiProcessValue(lambda: PID[0]))
    _workload("t")
    use_class(ours, file_values())
    _workload("t")  # the same names: the keys in the files are the same bytes
    names = sorted(path.name for path in theirs.iterdir())
    assert names == sorted(path.name for path in ours.iterdir())
    assert len(names) == 2 + len(GAUGE_MODES)  # counter, histogram, one per gauge mode
    for name in names:
        if name.startswith("gauge_mostrecent_"):  # stamped with the time of each set
            continue
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    stamped = [f"gauge_mostrecent_{PID[0]}.db"]
    ours_stamped, theirs_stamped = (_entries(folder / stamped[0]) for folder in (ours, theirs))
    assert [(key, value) for key, value, _ in ours_stamped] == [
        (key, value) for key, value, _ in theirs_stamped
    ]
    assert all(stamp > 0 for _, _, stamp in ours_stamped)
    assert max((ours / name).stat().st_size for name in names) > 1 << 16  # grown, remapped
    assert _samples(ours) == _samples(theirs)


def test_the_worker_gets_the_fast_class() -> None:
    # Were prometheus_client's file class to change, file_values would hand back the
    # library's own class: right, but the 6.5% would be back. This says so.
    made = file_values()
    assert made.__name__ == "FileValue"
    assert made.__module__ == "gateway.metric_files"


def test_a_forked_child_writes_files_of_its_own(
    tmp_path: Path, use_class: Callable[[Path, Any], None]
) -> None:
    use_class(tmp_path, file_values())
    counter = Counter("booked", "requests booked", registry=None)
    gauge = Gauge("open", "open", registry=None, multiprocess_mode="livesum")
    counter.inc()
    gauge.set(5)
    child = os.fork()
    if child == 0:  # the child: nothing it does may land in the parent's files
        code = 1
        try:
            add(counter, 1.0)  # first: the loop's lock-free write reopens the files too
            counter.inc(1)
            gauge.inc(1)  # starts from its own file's zero, as prometheus_client's does
            code = 0 if PID[0] == os.getpid() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    counter.inc()
    names = sorted(path.name for path in tmp_path.iterdir())
    assert f"counter_{child}.db" in names and f"counter_{os.getpid()}.db" in names
    samples = {(name, labels): value for name, labels, value in _samples(tmp_path)}
    assert samples[("booked_total", ())] == "4.0"
    assert samples[("open", ())] == "6.0"  # the parent's 5 and the child's 1
    multiprocess.mark_process_dead(child, path=str(tmp_path))
    samples = {(name, labels): value for name, labels, value in _samples(tmp_path)}
    assert samples[("open", ())] == "5.0"  # a dead process's live gauge leaves the sum


def test_two_threads_adding_to_one_counter_lose_nothing(
    tmp_path: Path, use_class: Callable[[Path, Any], None]
) -> None:
    use_class(tmp_path, file_values())
    counter = Counter("rows", "rows written", ["table"], registry=None)
    child = counter.labels("requests")

    def work() -> None:
        for _ in range(20_000):
            child.inc()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    samples = {(name, labels): value for name, labels, value in _samples(tmp_path)}
    assert samples[("rows_total", (("table", "requests"),))] == "40000.0"
