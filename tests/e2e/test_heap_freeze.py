"""The start-up heap is frozen out of garbage collection once the gateway is warm."""

from __future__ import annotations

import gc
import logging

import pytest

from gateway.heap import freeze_heap
from tests.e2e.conftest import GatewayFactory


def test_freeze_heap_moves_live_objects_out_of_collection() -> None:
    kept = [[index] for index in range(1_000)]  # tracked containers, alive
    try:
        assert freeze_heap() >= len(kept)
        walked = {id(item) for item in gc.get_objects()}  # what a collection would visit
        assert not any(id(item) in walked for item in kept)
        assert kept[-1] == [999]  # still alive and usable
    finally:
        gc.freeze()  # as the worker's collection left it (tests/conftest.py)


# The freeze's collection finalises whatever earlier tests in this worker left behind;
# their unraisable warnings are reported, not this test's failure.
@pytest.mark.filterwarnings("default::pytest.PytestUnraisableExceptionWarning")
def test_gateway_freezes_its_heap_at_start(
    make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    gc.unfreeze()
    gc.collect()  # earlier tests' garbage is theirs: collected here, not inside the freeze
    try:
        with caplog.at_level(logging.INFO, logger="farebox.heap"):
            make_gateway()
        assert any("long-lived objects" in r.getMessage() for r in caplog.records)
        assert gc.get_freeze_count() > 0
    finally:
        gc.freeze()  # as the worker's collection left it (tests/conftest.py)
