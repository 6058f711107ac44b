"""bench/hotpath_memory.py --stats: what a gateway's memory is made of, read on SIGUSR1.

On the gateway's PYTHONPATH only for that bench (never installed): when MEMPROBE_OUT is
set, SIGUSR1 writes MEMPROBE_OUT.PID.N with the thread and module counts, glibc's
mallinfo2 (arena: bytes in its heaps; uordblks in use; fordblks free; keepcost the
trimmable top), SQLite's own allocator's use, and CPython's pymalloc statistics
(`sys._debugmallocstats`: "# bytes in allocated blocks" are live small objects, "Total"
the arenas they take), plus MEMPROBE_OUT.PID.N.xml, glibc's malloc_info (each heap).
With MEMPROBE_GC=1 each signal first runs a full collection and writes what it freed
(MEMPROBE_OUT.PID.N.gc). With MEMPROBE_TRACE=FRAMES the first signal starts tracemalloc
and each later one writes MEMPROBE_OUT.PID.N.trace: live Python allocations made since, by
line (tracemalloc's own tables then add to the RSS, so read RSS from a run without it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any

_OUT = os.environ.get("MEMPROBE_OUT")


_FIELDS = (
    "arena", "ordblks", "smblks", "hblks", "hblkhd",
    "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
)  # fmt: skip


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS]


def _sqlite_line() -> str:
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        lib.sqlite3_memory_used.restype = ctypes.c_int64
        lib.sqlite3_memory_highwater.restype = ctypes.c_int64
        used, high = lib.sqlite3_memory_used(), lib.sqlite3_memory_highwater(0)
        return f"sqlite used {used / 2**20:.1f}M highwater {high / 2**20:.1f}M\n"
    except (ImportError, OSError, AttributeError) as exc:
        return f"sqlite unknown: {exc!r}\n"


def _write_stats(path: str, libc: ctypes.CDLL) -> None:
    info = libc.mallinfo2()
    with open(path, "w") as out:
        out.write(f"threads {threading.active_count()} modules {len(sys.modules)}\n")
        cells = (f"{name}={getattr(info, name) / 2**20:.1f}M" for name in _FIELDS)
        out.write("mallinfo2 " + " ".join(cells) + "\n")
        out.write(_sqlite_line())
        out.flush()
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)  # _debugmallocstats writes to the C stderr
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    stream = libc.fdopen(os.open(path + ".xml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))


def _write_trace(path: str, previous: list[Any]) -> None:
    import tracemalloc

    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["MEMPROBE_TRACE"]))
        return
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, __file__)])
    with open(path, "w") as out:
        out.write(f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f}M\n")
        for key in ("filename", "lineno", "traceback"):
            out.write(f"--- by {key}, since the last signal\n")
            stats = snap.compare_to(previous[0], key) if previous else snap.statistics(key)
            for stat in stats[:40]:
                size = getattr(stat, "size_diff", stat.size) / 1024
                count = getattr(stat, "count_diff", stat.count)
                where = " <- ".join(f"{f.filename}:{f.lineno}" for f in stat.traceback)
                out.write(f"{size:9.0f} KiB {count:8d}  {where}\n")
    previous[:] = [snap]


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _collect(path: str) -> None:
    import gc
    import tracemalloc

    before, traced = _rss_mib(), tracemalloc.get_traced_memory()[0]
    freed = gc.collect()
    with open(path, "w") as out:
        out.write(
            f"gc.collect() freed {freed} objects; RSS {before:.1f} -> {_rss_mib():.1f} MiB; "
            f"traced {traced / 2**20:.1f} -> {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB\n"
        )


def _install(prefix: str) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    libc.fdopen.restype = ctypes.c_void_p
    count = [0]
    previous: list[Any] = []

    def dump(signum: int, frame: object) -> None:
        count[0] += 1
        path = f"{prefix}.{os.getpid()}.{count[0]}"
        if os.environ.get("MEMPROBE_GC"):  # garbage in cycles first, and what that freed
            _collect(path + ".gc")
        _write_stats(path, libc)
        if os.environ.get("MEMPROBE_TRACE"):
            _write_trace(path + ".trace", previous)

    signal.signal(signal.SIGUSR1, dump)


if _OUT:
    _install(_OUT)
