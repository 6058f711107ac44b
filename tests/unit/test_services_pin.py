"""A request's services are pinned to the snapshot in force when it started."""

from __future__ import annotations

from typing import Any

from gateway.services import Services


def _services() -> Services:
    # Services holds what the lifespan built; pinning reads only `snapshot`.
    parts: list[Any] = [object() for _ in range(9)]
    return Services(*parts)


def test_requests_of_one_snapshot_share_one_pinned_copy() -> None:
    services = _services()
    pinned = services.for_request()
    assert pinned is not services and pinned.snapshot is services.snapshot
    assert services.for_request() is pinned
    assert pinned.upstreams is services.upstreams and pinned.ledger is services.ledger


def test_a_reload_pins_the_next_request_and_leaves_a_running_one_as_it_was() -> None:
    services = _services()
    running, before = services.for_request(), services.snapshot
    services.snapshot = object()  # type: ignore[assignment]  # what the reloader swaps in
    after = services.for_request()
    assert after is not running and after.snapshot is services.snapshot
    assert running.snapshot is before  # the request in flight keeps its configuration
