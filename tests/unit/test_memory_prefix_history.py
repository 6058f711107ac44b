"""The in-process state's prefix history: newest first, `keep` per key, least recent key
evicted first, one record stored under two keys handed back once, expired keys unseen."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.state.memory import MemoryState


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_records_newest_first_and_kept_per_key() -> None:
    state = MemoryState()
    first, second, third = {"n": 1}, {"n": 2}, {"n": 3}
    for record in (first, second, third):
        _run(state.remember_prefix(["a"], record, 60, 2))
    assert _run(state.prefix_history(["a"])) == [third, second]
    _run(state.remember_prefix(["b"], first, 60, 0))
    assert _run(state.prefix_history(["b"])) == []  # keep 0: nothing kept


def test_one_record_under_two_keys_comes_back_once() -> None:
    state = MemoryState()
    shared, other = {"n": 1}, {"n": 2}
    _run(state.remember_prefix(["a", "b"], shared, 60, 4))
    _run(state.remember_prefix(["b"], other, 60, 4))
    found = _run(state.prefix_history(["a", "b", "missing"]))
    assert found == [shared, other] and found[0] is shared


def test_the_least_recently_written_key_goes_first() -> None:
    state = MemoryState(max_prefix_keys=2)
    _run(state.remember_prefix(["a"], {"n": 1}, 60, 4))
    _run(state.remember_prefix(["b"], {"n": 2}, 60, 4))
    _run(state.remember_prefix(["a"], {"n": 3}, 60, 4))  # `a` written again: `b` is oldest
    _run(state.remember_prefix(["c"], {"n": 4}, 60, 4))
    assert _run(state.prefix_history(["b"])) == []
    assert [r["n"] for r in _run(state.prefix_history(["a", "c"]))] == [3, 1, 4]


def test_an_expired_key_is_not_read() -> None:
    state = MemoryState()
    _run(state.remember_prefix(["a"], {"n": 1}, -1, 4))
    assert _run(state.prefix_history(["a"])) == []
