"""The kept responses of previous_response_id chains, on the in-process state."""

from __future__ import annotations

from gateway.state.memory import MemoryState
from gateway.state.responses import ResponseStore, StoredResponse


async def test_a_kept_response_comes_back_and_expires() -> None:
    state = MemoryState()
    store = ResponseStore(state, ttl_s=60)
    kept = StoredResponse([{"role": "user", "content": "hi"}], "task-1", "key-abc")
    await store.save("resp_1", kept)
    assert await store.load("resp_1") == kept
    assert await store.load("resp_2") is None
    short = ResponseStore(state, ttl_s=1e-9)
    await short.save("resp_3", kept)
    assert await short.load("resp_3") is None  # expired


async def test_the_first_save_of_an_id_wins_and_garbage_reads_as_unknown() -> None:
    state = MemoryState()
    store = ResponseStore(state, ttl_s=60)
    first = StoredResponse([], "task-1", None)
    await store.save("resp_1", first)
    await store.save("resp_1", StoredResponse([], "task-2", None))
    assert await store.load("resp_1") == first
    await state.pin_task_value("response:resp_bad", "chain", "not json", 60)
    assert await store.load("resp_bad") is None
    assert StoredResponse.from_json('{"items": "no"}') is None
