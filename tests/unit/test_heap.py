"""gateway.heap: the import-time freeze, then the lifespan's."""

from __future__ import annotations

import gc

from gateway.heap import YOUNG_THRESHOLD, freeze_heap, freeze_imports


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
        # The lifespan's freeze adds the rest. Not judged by the count: objects frozen
        # earlier (a previous test's, in this worker) may be freed by reference counting
        # meanwhile, which lowers it.
        assert freeze_heap() > 0
        walked = {id(item) for item in gc.get_objects()}
        assert not any(id(item) in walked for item in after)
    finally:
        gc.freeze()  # as the worker's collection left it (tests/conftest.py)


def test_the_serving_process_runs_young_collections_less_often() -> None:
    """After `freeze_imports`, thousands of new live objects set off no collection: with
    CPython's threshold of 700 they would set off several (each one a pause on the loop)."""
    started: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    threshold = gc.get_threshold()
    gc.unfreeze()
    gc.callbacks.append(watch)
    try:
        freeze_imports()
        kept = [[n] for n in range(YOUNG_THRESHOLD // 2)]  # tracked containers, alive
        assert started == []
        assert len(kept) > 5 * 700  # a run the default threshold collects in
        kept += [[n] for n in range(YOUNG_THRESHOLD)]  # past the threshold: it collects
        assert started and set(started) == {0}
    finally:
        gc.callbacks.remove(watch)
        gc.set_threshold(*threshold)
        gc.freeze()  # as the worker's collection left it (tests/conftest.py)
