"""gateway.heap: malloc arenas capped for the server process, the import-time freeze."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from gateway.heap import freeze_heap, freeze_imports

# Eight threads each allocate through malloc (sizes pymalloc passes on), then the number
# of arenas glibc made is read from malloc_info's XML, one <heap nr=...> per arena.
ARENAS_AFTER_THREADS = textwrap.dedent(
    """
    import ctypes, sys, tempfile, threading
    from gateway.heap import cap_malloc_arenas
    capped = cap_malloc_arenas() if sys.argv[1] == "cap" else False
    barrier = threading.Barrier(8)
    kept = []
    def allocate():
        barrier.wait()
        kept.extend(bytes(4096 + n) for n in range(200))
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    with tempfile.NamedTemporaryFile(suffix=".xml") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        xml = open(out.name).read()
    print(capped, xml.count("<heap nr="))
    """
)

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's"
)


def _arenas(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", ARENAS_AFTER_THREADS, mode],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    )
    capped, count = done.stdout.split()
    return capped, int(count)


@glibc_only
def test_capped_arenas_hold_every_threads_allocations_in_two() -> None:
    assert _arenas("cap") == ("True", 2)
    capped, uncapped = _arenas("none")
    assert capped == "False" and uncapped > 2  # glibc's default: a new arena per thread


@glibc_only
def test_an_operators_malloc_arena_max_wins() -> None:
    capped, count = _arenas("cap", MALLOC_ARENA_MAX="4")
    assert capped == "False" and 2 < count <= 4


def test_the_import_freeze_leaves_new_objects_to_the_collector() -> None:
    gc.unfreeze()
    try:
        before = [[n] for n in range(100)]
        freeze_imports()
        frozen = gc.get_freeze_count()
        assert frozen >= len(before)
        walked = {id(item) for item in gc.get_objects()}
        assert not any(id(item) in walked for item in before)
        after = [[n] for n in range(100)]
        assert all(id(item) in {id(o) for o in gc.get_objects()} for item in after[:3])
        assert freeze_heap() >= frozen + len(after)  # the lifespan's freeze adds the rest
    finally:
        gc.unfreeze()
