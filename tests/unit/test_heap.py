"""gateway.heap: the import-time freeze, then the lifespan's."""

from __future__ import annotations

import gc

from gateway.heap import freeze_heap, freeze_imports


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
        gc.unfreeze()
