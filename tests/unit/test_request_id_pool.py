"""Request ids drawn from a pool of OS randomness: the same form, never one given twice.

The pool is read 4 KiB at a time; every id is `req-` and 32 lower-case hex digits (the
time in milliseconds, then random bits), no value comes out twice (across refills and
threads), ids sort in the order they were made, and a forked child draws its own random
bits, not the ones its parent had pooled.
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from gateway import request_id
from gateway.request_id import new_request_id, random_hex, request_id_of

FORM = re.compile(r"req-[0-9a-f]{32}")


def test_ids_have_the_form_and_never_repeat_across_refills() -> None:
    ids = [new_request_id() for _ in range(5000)]  # about 20 refills
    assert all(FORM.fullmatch(value) for value in ids)
    assert len(set(ids)) == len(ids)
    hexes = [random_hex() for _ in range(600)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in hexes)
    assert not {value[:20] for value in hexes} & {value[-20:] for value in ids}


def test_ids_sort_in_the_order_they_were_made() -> None:
    """The ledger's indexes on request and task ids take appends, not random pages."""
    before = time.time_ns() // 1_000_000
    ids = []
    for _ in range(5):
        ids.append(new_request_id())
        time.sleep(0.002)  # a later millisecond
    after = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == 5
    made = [int(value[4:16], 16) for value in ids]  # the millisecond each was made in
    assert before <= made[0] < made[-1] <= after


def test_threads_never_get_the_same_id() -> None:
    got: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        into.extend(new_request_id() for _ in range(3000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for into in got for value in into]
    assert len(set(every)) == len(every) == 12000


def test_a_scope_keeps_its_id() -> None:
    scope: dict[str, object] = {}
    first = request_id_of(scope)
    assert FORM.fullmatch(first) and request_id_of(scope) == first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_reuse_the_parents_pool() -> None:
    new_request_id()  # the pool holds ids now
    pooled = set(request_id._pool)
    assert pooled
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.write(write, "\n".join(new_request_id() for _ in range(300)).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    child = b"".join(chunks).decode().split("\n")
    assert len(child) == 300 and all(FORM.fullmatch(value) for value in child)
    assert not {value[-20:] for value in child} & {value[:20] for value in pooled}
