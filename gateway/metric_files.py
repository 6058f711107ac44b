"""A worker's metric values in prometheus_client's multiprocess files, written for less.

`farebox serve --workers N` keeps each worker's counters, gauges and histograms in
prometheus_client's per-process files, which `/metrics` sums. prometheus_client's value
class for them (`values.MultiProcessValue`) pays, at every inc/set/observe, a lock, a
call to the process-id function, a `write_value` method with its dict look-ups and a
pack of both doubles into a slice: 8,785 instructions a counter add against 1,301 for
one process's float (bench/metric_writes.py), 13 writes a small request. `file_values`
gives a class that writes the same bytes to the same files for less (3,386): each value
finds its slot once, at creation, and writes it as one aligned 8-byte store through a
view of the map as doubles (a scrape reads it whole). `bump`, which gateway.metrics'
`add` and `observe` call on the event loop's thread, takes no lock, as the in-process
fast path takes none (docs/performance.md, "A worker's metrics files").

Kept as prometheus_client has it: `inc`, `set` and `get` under one lock for every value of
the process (other threads set gauges too), the file names (`<type>_<pid>.db`,
`gauge_<mode>_<pid>.db`, which `mark_process_dead` and the collector read), and a fork's
reset: a child that writes first reopens every file under its own pid, each value read
back from it (zero: the parent's counts stay in the parent's files). Where
prometheus_client's file class is not what this was written against (a version without
`_m` and `_positions`), `file_values` returns prometheus_client's own class.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict, mmap_key

PID = [os.getpid()]
"""This process's id, read without a system call (prometheus_client's own class calls
`os.getpid()` at every write); a forked child sets its own."""
os.register_at_fork(after_in_child=lambda: PID.__setitem__(0, os.getpid()))


def file_values(pid: list[int] = PID) -> Any:
    """A value class for prometheus_client (`values.ValueClass`) writing this process's
    files; `pid[0]`: the process's id, kept current across forks (`PID`)."""
    if not _writes_like_this():
        return values.MultiProcessValue(lambda: pid[0])
    files: dict[str, MmapedDict] = {}
    views: dict[int, tuple[Any, Any]] = {}  # by id(map): the map, its doubles
    made: list[Any] = []
    lock = threading.Lock()
    opened = [pid[0]]  # the pid whose files `files` holds

    def doubles(mapped: Any) -> Any:  # memoryview[float]: a `d` cast
        """The map as doubles. A file that grows is mapped anew (the library keeps the
        old map open); a value keeps the view of the map it was made in: both map the
        same pages of the same file."""
        kept = views.get(id(mapped))
        if kept is None:
            kept = views[id(mapped)] = (mapped, memoryview(mapped).cast("d"))
        return kept[1]

    def close_files() -> None:
        for _, view in views.values():
            view.release()  # a map with a view exported cannot close
        views.clear()
        for file in files.values():
            file.close()
        files.clear()

    def close() -> None:
        close_files()
        made.clear()

    # `values.close_all_multiprocess_files()` closes these too, as it does the library's.
    getattr(values, "_multi_process_cleanups", []).append(close)

    def own_files() -> None:
        """After a fork: this process's own files, each value read back from its own.
        Called with the lock held."""
        if opened[0] == pid[0]:
            return
        close_files()
        opened[0] = pid[0]
        for value in made:
            value._open()

    class FileValue:
        """A float in this process's file of its kind, written through at each change."""

        _multiprocess = True

        def __init__(
            self,
            typ: str,
            metric_name: str,
            name: str,
            labelnames: Any,
            labelvalues: Any,
            help_text: str,
            multiprocess_mode: str = "",
            **kwargs: Any,
        ) -> None:
            self._prefix = f"{typ}_{multiprocess_mode}" if typ == "gauge" else typ
            self._key = mmap_key(metric_name, name, labelnames, labelvalues, help_text)
            with lock:
                own_files()
                self._open()
                made.append(self)

        def _open(self) -> None:
            file = files.get(self._prefix)
            if file is None:
                directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
                path = os.path.join(directory, f"{self._prefix}_{pid[0]}.db")
                file = files[self._prefix] = MmapedDict(path)
            self._value, self._timestamp = file.read_value(self._key)  # makes its slot
            self._doubles = doubles(file._m)
            self._slot = file._positions[self._key] // 8  # slots are 8-byte aligned

        def bump(self, amount: float) -> None:
            """`inc` without the lock, for a value with one writing thread (the event
            loop's: gateway.metrics `add` and `observe`), as the in-process fast path
            has it. The value is one aligned 8-byte store: a scrape reads it whole."""
            if opened[0] != pid[0]:
                with lock:
                    own_files()
            self._value += amount
            self._doubles[self._slot] = self._value

        def inc(self, amount: float) -> None:
            with lock:
                own_files()
                self._store(self._value + amount, 0.0)

        def set(self, value: float, timestamp: float | None = None) -> None:
            with lock:
                own_files()
                self._store(value, timestamp or 0.0)

        def _store(self, value: float, timestamp: float) -> None:
            self._value, self._timestamp = value, timestamp
            self._doubles[self._slot] = value
            self._doubles[self._slot + 1] = timestamp

        def set_exemplar(self, exemplar: Any) -> None:
            return  # prometheus_client keeps no exemplars in multiprocess mode either

        def get(self) -> float:
            with lock:
                own_files()
                return float(self._value)

        def get_exemplar(self) -> None:
            return None

    return FileValue


def _writes_like_this() -> bool:
    """Whether prometheus_client's file class keeps its map and slots where this reads them."""
    init: Callable[..., Any] | None = getattr(MmapedDict, "_init_value", None)
    names = init.__code__.co_names if init is not None else ()
    return "_m" in names and "_positions" in names and hasattr(MmapedDict, "read_value")
