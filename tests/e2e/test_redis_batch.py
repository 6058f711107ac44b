"""Shared state's script calls in the real Redis: batched across callers, each its own reply.

gateway/state/batch.py sends the prefix-history reads and writes of concurrent requests in
one pipeline; these tests hold it to giving every caller exactly its own answer, through
a Redis that forgot its scripts, a caller that gave up, and a Redis that went away.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest
import redis

from gateway.settings import RedisLimits
from gateway.state import outage
from gateway.state.batch import MAX_BATCH, MAX_JOINED
from gateway.state.fallback import FallbackState
from gateway.state.redis import PARSED_MAX_BYTES, CostDelta
from tests.e2e.test_state_outage import RedisServer, redis_server  # noqa: F401 (fixture)
from tests.redis_service import commands_sent, require_redis

pytestmark = pytest.mark.redis

PATIENT = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=10, retry_s=0.2)


async def _state(url: str) -> FallbackState:
    state = await FallbackState.connect(url, f"test-{uuid.uuid4().hex}", PATIENT)
    assert not state.degraded
    return state


@pytest.fixture
async def state() -> AsyncIterator[FallbackState]:
    """Shared state on the local Redis in a namespace of its own, dropped and closed after."""
    shared = await _state(require_redis())
    try:
        yield shared
    finally:
        await _drop(shared)
        await shared.aclose()


@pytest.fixture
async def own_state(redis_server: RedisServer) -> AsyncIterator[FallbackState]:  # noqa: F811
    """Shared state on a Redis of its own (a test may flush its scripts, kill it, fill it)."""
    redis_server.start()
    shared = await _state(redis_server.url)
    try:
        yield shared
    finally:
        await shared.aclose()


async def test_concurrent_callers_each_get_their_own_history_in_few_pipelines(
    state: FallbackState,
) -> None:
    await asyncio.gather(
        *(state.remember_prefix([f"k{i}", "shared"], {"i": i}, 60, 4) for i in range(100))
    )
    histories = await asyncio.gather(*(state.prefix_history([f"k{i}"]) for i in range(100)))
    assert histories == [[{"i": i}] for i in range(100)]
    # 200 calls, made together, went out in far fewer round trips than one each.
    assert state.redis._batch.sent < 100
    shared = await state.prefix_history(["shared"])
    assert len(shared) == 4  # trimmed to the newest four, as the pipeline did
    assert await state.redis.client.ttl(state.redis._prefix_key("shared")) in range(55, 61)


async def test_the_same_stored_record_parses_to_the_same_dict(state: FallbackState) -> None:
    await state.remember_prefix(["small"], {"fingerprints": ["a" * 32]}, 60, 4)
    first, again = await state.prefix_history(["small"]), await state.prefix_history(["small"])
    assert first == again == [{"fingerprints": ["a" * 32]}]
    assert first[0] is again[0]  # the prefix stage reuses what it rebuilt from it
    big = {"fingerprints": ["b" * 32] * (PARSED_MAX_BYTES // 32)}
    await state.remember_prefix(["big"], big, 60, 4)
    first, again = await state.prefix_history(["big"]), await state.prefix_history(["big"])
    assert first == again == [big]
    assert first[0] is not again[0]  # a large record is not pinned in memory


async def test_a_caller_that_gives_up_leaves_the_others_their_replies(state: FallbackState) -> None:
    await state.remember_prefix(["k"], {"n": 1}, 60, 4)
    quitter = asyncio.create_task(state.prefix_history(["k"]))
    await asyncio.sleep(0)  # its call waits for the next batch
    quitter.cancel()
    others = await asyncio.gather(*(state.prefix_history(["k"]) for _ in range(10)))
    assert others == [[{"n": 1}]] * 10
    with pytest.raises(asyncio.CancelledError):
        await quitter
    assert not state.degraded


async def test_closing_answers_waiting_calls_with_an_outage_not_a_cancel() -> None:
    state = await _state(require_redis())
    try:
        calls = [asyncio.create_task(state.redis.prefix_history(["k"])) for _ in range(5)]
        # Reads for the end of a batch (a task's history) wait apart: answered too.
        calls += [asyncio.create_task(state.redis.prefix_history(["t", "k"])) for _ in range(3)]
        await asyncio.sleep(0)  # the calls wait for a batch whose sender has not yet run
        await state.redis._batch.aclose()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(outcome, redis.ConnectionError) for outcome in outcomes)
        assert all(outage.is_outage(outcome) for outcome in outcomes)  # the callers fall back
    finally:
        await state.aclose()


async def test_scripts_redis_forgot_are_loaded_again(
    redis_server: RedisServer,  # noqa: F811
    own_state: FallbackState,
) -> None:
    await own_state.remember_prefix(["k"], {"n": 1}, 60, 4)
    with redis.Redis(port=redis_server.port) as admin:
        admin.script_flush()  # as after a restart: every cached script is gone
    await asyncio.gather(*(own_state.remember_prefix(["k"], {"n": n}, 60, 4) for n in (2, 3)))
    histories = await asyncio.gather(*(own_state.prefix_history(["k"]) for _ in range(5)))
    assert all(sorted(r["n"] for r in history) == [1, 2, 3] for history in histories)
    assert not own_state.degraded


async def test_a_batch_that_meets_a_dead_redis_is_answered_locally(
    redis_server: RedisServer,  # noqa: F811
    own_state: FallbackState,
) -> None:
    await own_state.remember_prefix(["k"], {"n": 1}, 60, 4)
    assert await own_state.prefix_history(["k"]) == [{"n": 1}]
    redis_server.kill()
    # Every caller of the failed batch falls back to this process's own history.
    writes = (own_state.remember_prefix(["k"], {"n": n}, 60, 4) for n in range(5))
    await asyncio.gather(*writes)
    histories = await asyncio.gather(*(own_state.prefix_history(["k"]) for _ in range(5)))
    assert all(len(history) == 4 for history in histories)
    assert own_state.degraded


async def test_batched_calls_to_a_hung_redis_end_by_their_own_deadlines(
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """One timer per batch, set by its oldest call, answers every call by its deadline."""
    redis_server.start()
    state = await _state(redis_server.url)  # sockets patient (5 s): only the deadline ends it
    deadline = 0.4
    state.redis.bound_batched_calls(deadline)
    assert redis_server.process is not None
    try:
        await state.remember_prefix(["k"], {"n": 1}, 60, 4)  # connected, scripts loaded
        loop = asyncio.get_running_loop()
        redis_server.process.send_signal(signal.SIGSTOP)  # alive, accepting, never answering

        async def wave(delay: float) -> tuple[float, list[BaseException | object]]:
            await asyncio.sleep(delay)
            made = loop.time()
            calls = (state.redis.prefix_history(["k"]) for _ in range(8))
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            return loop.time() - made, outcomes

        # The second wave queues behind the first wave's batch, then goes in its own.
        (first, first_outcomes), (second, second_outcomes) = await asyncio.gather(
            wave(0), wave(0.15)
        )
        for outcome in first_outcomes + second_outcomes:
            assert isinstance(outcome, TimeoutError)
            assert outage.is_outage(outcome)  # the callers fall back
        assert deadline - 0.05 <= first <= deadline + 0.25
        # ... by its own deadline, not the first batch's end plus a deadline of its own.
        assert second <= deadline + 0.25
        assert state.redis._batch.sent == 1 + 2
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
        await state.aclose()


async def test_a_sender_keeps_its_connection_through_busy_and_idle_spells() -> None:
    """Batch after batch on the connection in hand while callers keep calling, and the same
    connection after an idle spell (checked first, as the pool checks one it hands out):
    every reply still its own caller's."""
    state = await _state(require_redis())
    batch = state.redis._batch
    held: list[object] = []

    async def caller(i: int) -> list[object]:
        answers = []
        for step in range(5):  # read, then write at once, as a request's calls come
            answers.append(await state.prefix_history([f"k{i}"]))
            held.append(batch._held)
            await state.remember_prefix([f"k{i}"], {"i": i, "step": step}, 60, 8)
            held.append(batch._held)
        return answers

    try:
        answers = await asyncio.gather(*(caller(i) for i in range(16)))
        for i, history in enumerate(answers):  # each caller read back its own writes
            assert [[r["step"] for r in h] for h in history] == [[], [0], [1, 0], [2, 1, 0],
                                                                 [3, 2, 1, 0]]  # fmt: skip
            assert {r["i"] for h in history for r in h} <= {i}
        assert batch.sent >= 10
        # The sender lingered a turn after each batch of several calls: every batch went
        # on the one connection it kept, never given back in between.
        assert None not in held and len(set(map(id, held))) == 1
        for _ in range(3):
            await asyncio.sleep(0)
        assert batch._sender is None and batch._held is held[0]  # idle, still in hand
        pool = state.redis.client.connection_pool
        assert len(pool._in_use_connections) == 1  # the pool lent it once, for good
        assert await state.prefix_history(["k0"])  # the same connection, checked first
        assert batch._held is held[0] and len(pool._in_use_connections) == 1
    finally:
        await _drop(state)
        await state.aclose()
    assert not pool._in_use_connections  # closing gave it back


async def test_a_kept_connection_redis_closed_while_idle_is_connected_again(
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """Redis closes idle clients (its `timeout`, CLIENT KILL, a restart): the next call
    finds the kept connection closed, connects it again and gets its answer, as a call
    given a closed pooled connection does; shared state is not counted as away."""
    redis_server.start()
    state = await _state(redis_server.url)
    batch = state.redis._batch
    try:
        await state.remember_prefix(["k"], {"n": 1}, 60, 4)
        for _ in range(2):  # a new Redis: the first call of each script loads it
            assert await state.prefix_history(["k"]) == [{"n": 1}]
        kept = batch._held
        assert kept is not None and batch._sender is None
        with redis.Redis(port=redis_server.port) as admin:
            assert admin.client_kill_filter(_type="normal") >= 1  # every client but admin
        await asyncio.sleep(0.1)  # the loop reads the close
        assert await state.prefix_history(["k"]) == [{"n": 1}]
        assert batch._held is kept and not state.degraded
    finally:
        await state.aclose()


async def test_a_pooled_connection_redis_closed_while_idle_is_connected_again(
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """The same for a connection the pool lends (a pool of one: none kept): redis-py's own
    check is off while its maintenance notifications are on, as they are by default."""
    redis_server.start()
    limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=5, pool_size=1)
    state = await FallbackState.connect(redis_server.url, f"test-{uuid.uuid4().hex}", limits)
    try:
        await state.remember_prefix(["k"], {"n": 1}, 60, 4)
        for _ in range(2):  # a new Redis: the first call of each script loads it
            assert await state.prefix_history(["k"]) == [{"n": 1}]
        assert state.redis._batch._held is None
        with redis.Redis(port=redis_server.port) as admin:
            assert admin.client_kill_filter(_type="normal") >= 1
        await asyncio.sleep(0.1)
        assert await state.prefix_history(["k"]) == [{"n": 1}]
        assert not state.degraded
    finally:
        await state.aclose()


async def test_reconnecting_after_an_outage_drops_the_kept_connection(state: FallbackState) -> None:
    """After an outage the kept connection is likely dead: `reconnect` gives it back with
    the pool's idle ones (which it drops), and the next call takes a live one."""
    batch = state.redis._batch
    assert await state.prefix_history(["k"]) == []
    kept = batch._held
    assert kept is not None
    socket = kept._writer
    await state.redis.reconnect()
    assert batch._held is None
    assert kept._writer is not socket  # closed with the pool's idle ones (the ping
    # after it may have connected it again: the pool lends its newest)
    assert await state.prefix_history(["k"]) == []


async def test_a_pool_of_one_connection_gets_it_back_after_every_spell() -> None:
    """With one connection to share, the batch keeps none idle: a call outside the batch
    (a ping, a task's lookup) never waits for it."""
    limits = RedisLimits(timeout_s=5, connect_timeout_s=5, pool_wait_s=0.5, pool_size=1)
    state = await FallbackState.connect(require_redis(), f"test-{uuid.uuid4().hex}", limits)
    batch = state.redis._batch
    try:
        assert await state.prefix_history(["k"]) == []
        assert batch._held is None
        await state.redis.ping()  # within pool_wait_s: the connection was free
    finally:
        await state.aclose()


async def test_concurrent_records_are_pushed_in_one_call_whatever_their_keys(
    state: FallbackState,
) -> None:
    # What Redis receives (MONITOR): the writes of concurrent requests (a caller's and
    # two tasks' lists) are one script call (Redis's CPU: 12.7 us for one record, ~3.4
    # us a record for four in one call, bench/redis_history.py), pushed in their order.
    redis_state, namespace = state.redis, state.redis.namespace
    await state.remember_prefix(["warm"], {}, 60, 4)  # the script loaded (a fresh Redis)
    both = [(["task:t", "caller:c"], {"n": n}) for n in range(6)]
    alone = [(["caller:c"], {"alone": n}) for n in range(3)]
    other = [(["task:u", "caller:c"], {"u": 0})]
    calls = [both[0], alone[0], *both[1:3], alone[1], *other, *both[3:], alone[2]]

    async def write() -> None:
        await asyncio.gather(*(state.remember_prefix(k, r, 60, 4) for k, r in calls))

    ours = await commands_sent(redis_state.client, namespace, write)
    assert len(ours) == 1 and ours[0].startswith("EVALSHA "), ours
    # Each list holds its records in the order they were made, the newest first,
    # trimmed to the newest four, as nine calls one after another would leave it.
    task = await state.prefix_history(["task:t"])
    assert [record["n"] for record in task] == [5, 4, 3, 2]
    assert await state.prefix_history(["task:u"]) == [{"u": 0}]
    caller = await state.prefix_history(["caller:c"])
    assert caller == [{"alone": 2}, {"n": 5}, {"n": 4}, {"n": 3}]
    for key in ("task:t", "task:u", "caller:c"):
        assert await redis_state.client.ttl(redis_state._prefix_key(key)) in range(55, 61)
    assert not state.degraded


async def test_a_history_key_redis_holds_no_list_for_is_started_anew_alone(
    state: FallbackState,
) -> None:
    # A history key overwritten by something else (text, a hash): LPUSH's error failed
    # the whole joined call, so every caller beside it fell back, and with three of them
    # at once shared state was marked away. Now that key starts a history anew.
    redis_state = state.redis
    await redis_state.client.set(redis_state._prefix_key("caller:text"), "not a list")
    await redis_state.client.hset(redis_state._prefix_key("task:hash"), "a", "b")
    calls = [
        (["task:t", "caller:c"], {"n": 0}),
        (["caller:text"], {"n": 1}),
        (["task:hash", "caller:c"], {"n": 2}),
        (["caller:text"], {"n": 3}),
    ]
    await asyncio.gather(*(state.remember_prefix(k, r, 60, 4) for k, r in calls))
    assert not state.degraded
    assert await state.prefix_history(["caller:text"]) == [{"n": 3}, {"n": 1}]
    assert await state.prefix_history(["task:hash"]) == [{"n": 2}]
    assert await state.prefix_history(["caller:c"]) == [{"n": 2}, {"n": 0}]
    assert await state.prefix_history(["task:t"]) == [{"n": 0}]
    for key in ("caller:text", "task:hash"):
        assert await redis_state.client.ttl(redis_state._prefix_key(key)) in range(55, 61)
    assert not state.degraded


async def test_a_redis_that_refuses_writes_keeps_every_history_and_total(
    redis_server: RedisServer,  # noqa: F811
    own_state: FallbackState,
) -> None:
    # Out of memory (maxmemory, noeviction), Redis refuses writes inside the scripts too:
    # the write that meets it ends the call. It used to be taken for a key of another
    # type: the history deleted and started anew, the total set to this process's view.
    await asyncio.gather(
        own_state.remember_prefix(["task:t", "caller:c"], {"n": 0}, 60, 4),
        own_state.add_task_cost("t", Decimal(1), 60),
    )
    # Another replica's addition: this process's own view of the total stays 1.
    await own_state.redis.client.incrby(own_state.redis._key("t"), 100 * 10**10)
    with redis.Redis(port=redis_server.port) as admin:
        admin.config_set("maxmemory", 1)
        await asyncio.gather(  # answered here: each caller falls back
            *(own_state.remember_prefix(["task:t", "caller:c"], {"n": n}, 60, 4) for n in (1, 2)),
            *(own_state.add_task_cost("t", Decimal(n), 60) for n in (2, 3)),
        )
        admin.config_set("maxmemory", 0)
    assert await own_state.redis.prefix_history(["task:t"]) == [{"n": 0}]
    assert await own_state.redis.prefix_history(["caller:c"]) == [{"n": 0}]
    # As it was, or with the two additions kept here pushed since (Redis came back);
    # never this process's own view (the floor, 6) in its place.
    assert await own_state.redis.task_cost("t") in (Decimal(101), Decimal(106))


async def test_reads_of_a_key_of_another_type_are_answered_here_without_marking_redis_away(
    state: FallbackState,
) -> None:
    # WRONGTYPE comes from a Redis that is up: each such call is answered from this
    # process's state, and however many in a row, shared state stays on Redis.
    redis_state = state.redis
    await redis_state.client.hset(redis_state._prefix_key("caller:hash"), "a", "b")
    await redis_state.client.hset(redis_state._pin_key("t", "effort"), "a", "b")
    await state.local.remember_prefix(["caller:hash"], {"here": 1}, 60, 4)
    for _ in range(2 * state.limits.failures):
        assert await state.prefix_history(["caller:hash"]) == [{"here": 1}]
        assert await state.prefix_history(["task:u", "caller:hash"]) == [{"here": 1}]
        assert await state.task_value("t", "effort") is None
    assert not state.degraded
    await state.remember_prefix(["caller:c"], {"n": 1}, 60, 4)  # Redis still serves others
    assert await redis_state.prefix_history(["caller:c"]) == [{"n": 1}]


async def test_a_task_claim_key_of_another_type_is_claimed_afresh_in_redis(
    state: FallbackState,
) -> None:
    # A claim key overwritten by something else (a hash) holds no owner: the next claim
    # takes it in Redis, as after a Redis that lost its data, and every replica then sees
    # that owner. Answered per process instead, each replica could give the task to
    # another team.
    redis_state = state.redis
    await redis_state.client.hset(redis_state._pin_key("t", "owner"), "a", "b")
    assert await state.claim_task_value("t", "owner", "team:a", 60) == "team:a"
    assert await redis_state.client.get(redis_state._pin_key("t", "owner")) == b"team:a"
    other = await FallbackState.connect(require_redis(), redis_state.namespace, PATIENT)
    try:  # another replica, nothing cached: Redis answers the owner
        assert await other.claim_task_value("t", "owner", "team:b", 60) == "team:a"
    finally:
        await other.aclose()
    assert not state.degraded


async def test_records_kept_for_another_time_go_in_a_call_of_their_own(
    state: FallbackState,
) -> None:
    redis_state, namespace = state.redis, state.redis.namespace
    await state.remember_prefix(["warm"], {}, 60, 4)  # the script loaded (a fresh Redis)

    async def write() -> None:
        await asyncio.gather(
            state.remember_prefix(["caller:c"], {"ttl": 60}, 60, 4),
            state.remember_prefix(["caller:d"], {"ttl": 3600}, 3600, 4),
            state.remember_prefix(["caller:e"], {"ttl": 60}, 60, 4),
        )

    ours = await commands_sent(redis_state.client, namespace, write)
    assert len(ours) == 2, ours
    ttl = redis_state.client.ttl
    assert await ttl(redis_state._prefix_key("caller:c")) in range(55, 61)
    assert await ttl(redis_state._prefix_key("caller:d")) in range(3590, 3601)
    assert await ttl(redis_state._prefix_key("caller:e")) in range(55, 61)


async def test_more_concurrent_records_than_one_call_takes_all_land_in_order(
    state: FallbackState,
) -> None:
    count = 2 * MAX_JOINED + 22  # three calls: 64, 64 and 22 records
    await asyncio.gather(*(state.remember_prefix(["k"], {"n": n}, 60, 500) for n in range(count)))
    history = await state.prefix_history(["k"])
    assert [record["n"] for record in history] == list(reversed(range(count)))
    assert not state.degraded


async def test_a_writer_that_gives_up_leaves_the_others_writing_with_it_their_replies(
    state: FallbackState,
) -> None:
    batch = state.redis._batch
    await state.prefix_history(["k"])  # the batch's connection in hand
    sent = batch.sent
    writers = [asyncio.create_task(state.remember_prefix(["k"], {"n": n}, 60, 8)) for n in range(3)]
    await asyncio.sleep(0)  # all three records wait for the next batch, in one call
    writers[0].cancel()
    assert await asyncio.gather(*writers[1:]) == [None, None]
    with pytest.raises(asyncio.CancelledError):
        await writers[0]
    assert batch.sent == sent + 1
    # The one call carried every record: the quitter's was on its way already.
    history = await state.prefix_history(["k"])
    assert [record["n"] for record in history] == [2, 1, 0]
    assert not state.degraded


async def test_a_lone_writer_that_gives_up_before_its_batch_leaves_sends_nothing(
    state: FallbackState,
) -> None:
    # Alone, its call's reply is its own future (as a plain script call's): given up, the
    # batch drops the call, as it drops any other whose caller left.
    await state.prefix_history(["k"])  # the batch's connection in hand
    quitter = asyncio.create_task(state.remember_prefix(["k"], {"n": 0}, 60, 8))
    await asyncio.sleep(0)  # its record waits for the next batch
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    await state.remember_prefix(["k"], {"n": 1}, 60, 8)  # a later batch, a call anew
    history = await state.prefix_history(["k"])
    assert [record["n"] for record in history] == [1]
    assert not state.degraded


async def test_concurrent_cost_additions_are_one_call_each_told_its_own_total(
    state: FallbackState,
) -> None:
    # What Redis receives (MONITOR): the additions of concurrent requests of three tasks
    # are one script call; each caller is told its own task's total just after its own
    # addition, as calls one after another in the order they were made would tell it.
    redis_state, namespace = state.redis, state.redis.namespace
    await state.add_task_cost("warm", Decimal(0), 60)  # the script loaded (a fresh Redis)
    calls = [("a", "0.1"), ("b", "2"), ("a", "0.3"), ("c", "7"), ("a", "0.5"), ("b", "4")]

    async def add() -> list[Decimal]:
        adds = (state.add_task_cost(task, Decimal(amount), 60) for task, amount in calls)
        return list(await asyncio.gather(*adds))

    ours = await commands_sent(redis_state.client, namespace, add)
    assert len(ours) == 1 and ours[0].startswith("EVALSHA "), ours
    totals = await add()  # the same again, without MONITOR: the totals go on from there
    assert totals == [Decimal(n) for n in ("1.0", "8", "1.3", "14", "1.8", "12")]
    for task, total in (("a", "1.8"), ("b", "12"), ("c", "14")):
        assert await redis_state.task_cost(task) == Decimal(total)
        assert await redis_state.client.ttl(redis_state._key(task)) in range(55, 61)
        assert await state.local.task_cost(task) == Decimal(total)  # each caller's view
    assert not state.degraded


async def test_a_gathered_addition_is_raised_to_its_own_floor_alone(state: FallbackState) -> None:
    redis_state = state.redis
    await redis_state.add_task_cost("low", Decimal("1"), 60)  # a known start for each
    await redis_state.add_task_cost("kept", Decimal("1"), 60)
    sent = redis_state._batch.sent
    totals = await asyncio.gather(
        redis_state.add_task_cost("low", Decimal("2"), 60, floor=Decimal("10")),
        redis_state.add_task_cost("kept", Decimal("2"), 60, floor=Decimal("1")),
        redis_state.add_task_cost("low", Decimal("1"), 60),
    )
    assert totals == [Decimal("10"), Decimal("3"), Decimal("11")]
    assert redis_state._batch.sent == sent + 1


async def test_more_concurrent_additions_than_one_call_takes_are_all_counted_in_order(
    state: FallbackState,
) -> None:
    count = 2 * MAX_JOINED + 22  # three calls: 64, 64 and 22 additions
    totals = await asyncio.gather(
        *(state.redis.add_task_cost("t", Decimal(1), 60) for _ in range(count))
    )
    assert totals == [Decimal(n) for n in range(1, count + 1)]
    assert await state.redis.task_cost("t") == Decimal(count)


async def test_an_adder_that_gives_up_leaves_the_others_their_totals(state: FallbackState) -> None:
    redis_state = state.redis
    await state.prefix_history(["k"])  # the batch's connection in hand
    adders = [
        asyncio.create_task(redis_state.add_task_cost(task, Decimal(n), 60))
        for n, task in enumerate(("a", "b", "a"), start=1)
    ]
    await asyncio.sleep(0)  # all three wait for the next batch, in one call
    adders[0].cancel()
    assert await asyncio.gather(*adders[1:]) == [Decimal(2), Decimal(4)]
    with pytest.raises(asyncio.CancelledError):
        await adders[0]
    assert await redis_state.task_cost("a") == Decimal(4)  # the quitter's went with them


async def test_a_task_total_redis_holds_no_integer_for_takes_the_callers_view_alone(
    state: FallbackState,
) -> None:
    # A task-cost key overwritten by something else (text, or a list): INCRBY's error
    # failed the whole joined call, so every caller beside it fell back, and with three
    # of them at once shared state was marked away. Now that key takes its caller's own
    # view of the total (its floor) and the others are told theirs.
    redis_state = state.redis
    await redis_state.client.set(redis_state._key("text"), "not a number")
    await redis_state.client.rpush(redis_state._key("list"), "x")
    await state.add_task_cost("good", Decimal(1), 60)
    calls = [("good", 2), ("text", 3), ("list", 4), ("good", 5), ("text", 6)]
    adds = (state.add_task_cost(task, Decimal(n), 60) for task, n in calls)
    assert await asyncio.gather(*adds) == [Decimal(n) for n in (3, 3, 4, 8, 9)]
    for task, total in (("good", 8), ("text", 9), ("list", 4)):
        assert await redis_state.task_cost(task) == Decimal(total)
        assert await redis_state.client.ttl(redis_state._key(task)) in range(55, 61)
    assert not state.degraded
    # The push of totals kept locally through an outage takes the same way.
    await redis_state.client.set(redis_state._key("text"), "garbage again")
    await redis_state.add_units({"text": CostDelta(10**10, 10**11, 60)})
    assert await redis_state.task_cost("text") == Decimal(10)


async def test_additions_redis_forgot_the_script_of_are_made_again(
    redis_server: RedisServer,  # noqa: F811
    own_state: FallbackState,
) -> None:
    await own_state.add_task_cost("a", Decimal(1), 60)
    with redis.Redis(port=redis_server.port) as admin:
        admin.script_flush()  # as after a restart: every cached script is gone
    adds = (own_state.add_task_cost(task, Decimal(n), 60) for n, task in ((2, "a"), (5, "b")))
    assert await asyncio.gather(*adds) == [Decimal(3), Decimal(5)]
    assert await own_state.redis.task_cost("a") == Decimal(3)
    assert not own_state.degraded


async def test_concurrent_reads_of_tasks_are_one_call_each_given_its_own_lists(
    state: FallbackState,
) -> None:
    # What Redis receives (MONITOR): the history reads of concurrent requests of tasks
    # (a task's list and its caller's, one script) are one script call; each reader gets
    # its own task's records and its caller's.
    redis_state, namespace = state.redis, state.redis.namespace
    for n, task in enumerate(("a", "b", "c")):
        await state.remember_prefix([f"task:{task}", f"caller:{task}"], {"n": n}, 60, 4)
    await state.prefix_history(["task:a", "caller:a"])  # its script loaded (a fresh Redis)
    tasks = ["a", "b", "a", "c", "b", "a"]
    reads: list[list[dict[str, object]]] = []

    async def read() -> None:
        calls = (state.prefix_history([f"task:{t}", f"caller:{t}"]) for t in tasks)
        reads.extend(await asyncio.gather(*calls))

    ours = await commands_sent(redis_state.client, namespace, read)
    assert len(ours) == 1 and ours[0].startswith("EVALSHA "), ours
    assert reads == [[{"n": "abc".index(t)}] for t in tasks]
    assert not state.degraded


async def test_a_joined_read_sees_every_write_made_before_its_readers(state: FallbackState) -> None:
    # The reads go at the end of the batch, after a write made between two readers: the
    # later reader sees it (the earlier may too: both were in flight at once).
    keys = ["task:t", "caller:c"]
    await state.prefix_history(keys)  # the batch's connection in hand
    first = asyncio.create_task(state.prefix_history(keys))
    write = asyncio.create_task(state.remember_prefix(keys, {"n": 1}, 60, 4))
    later = asyncio.create_task(state.prefix_history(keys))
    await asyncio.gather(first, write, later)
    assert later.result() == [{"n": 1}]
    assert first.result() in ([], [{"n": 1}])


async def test_a_joined_read_waits_for_the_batch_that_takes_its_readers_earlier_calls(
    state: FallbackState,
) -> None:
    # A read, more calls than one batch takes, a push, then a second read of that list
    # that joins the first: the joined read goes with the push's batch (the second),
    # never ahead of it in the first.
    batch, history = state.redis._batch, state.redis._history
    key, other = state.redis._prefix_key("task:t"), state.redis._prefix_key("caller:c")
    await state.prefix_history(["caller:c"])  # the batch's connection in hand
    sent = batch.sent
    first = batch.script_reading(history, [other, key])
    pings = [batch.command("PING") for _ in range(MAX_BATCH + 10)]
    push = batch.command("LPUSH", key, b'{"n": 1}')
    later = batch.script_reading(history, [key])
    assert await later == [[b'{"n": 1}']]
    assert await first == [[], [b'{"n": 1}']]  # joined, so it went as late
    assert await push == 1 and all(answer == b"PONG" for answer in await asyncio.gather(*pings))
    assert batch.sent == sent + 2


async def test_a_reader_that_gives_up_leaves_the_others_reading_with_it_their_lists(
    state: FallbackState,
) -> None:
    await state.remember_prefix(["task:t", "caller:c"], {"n": 1}, 60, 4)
    await state.prefix_history(["caller:c"])  # the batch's connection in hand
    readers = [
        asyncio.create_task(state.redis.prefix_history([f"task:{t}", "caller:c"]))
        for t in ("t", "u", "t")
    ]
    await asyncio.sleep(0)  # the three wait for the next batch, in one call
    readers[0].cancel()
    assert await asyncio.gather(*readers[1:]) == [[{"n": 1}], [{"n": 1}]]
    with pytest.raises(asyncio.CancelledError):
        await readers[0]


async def test_reads_redis_forgot_the_script_of_are_made_again(
    redis_server: RedisServer,  # noqa: F811
    own_state: FallbackState,
) -> None:
    await own_state.remember_prefix(["task:t", "caller:c"], {"n": 1}, 60, 4)
    assert await own_state.prefix_history(["task:t", "caller:c"]) == [{"n": 1}]
    with redis.Redis(port=redis_server.port) as admin:
        admin.script_flush()  # as after a restart: every cached script is gone
    reads = (own_state.prefix_history([f"task:{t}", "caller:c"]) for t in ("t", "u"))
    assert await asyncio.gather(*reads) == [[{"n": 1}], [{"n": 1}]]
    assert not own_state.degraded


async def test_a_joined_read_older_than_its_batch_ends_by_its_own_deadline(
    redis_server: RedisServer,  # noqa: F811
) -> None:
    # A read waits for its readers' earlier calls, so its batch may start with calls made
    # after it: that batch ends by the read's deadline, not by its first call's.
    redis_server.start()
    state = await _state(redis_server.url)
    deadline = 0.4
    state.redis.bound_batched_calls(deadline)
    assert redis_server.process is not None
    loop = asyncio.get_running_loop()
    try:
        await state.prefix_history(["task:t", "caller:c"])  # connected, script loaded
        redis_server.process.send_signal(signal.SIGSTOP)  # alive, never answering
        hung = asyncio.create_task(state.redis.prefix_history(["caller:c"]))
        await asyncio.sleep(0.05)  # its batch is on the wire
        made = loop.time()
        first = asyncio.create_task(state.redis.prefix_history(["task:t", "caller:c"]))
        await asyncio.sleep(0.3)
        after = asyncio.create_task(state.redis.prefix_history(["caller:d"]))
        later = asyncio.create_task(state.redis.prefix_history(["task:u", "caller:c"]))
        outcomes = await asyncio.gather(hung, first, after, later, return_exceptions=True)
        assert all(isinstance(outcome, TimeoutError) for outcome in outcomes), outcomes
        waited = loop.time() - made
        # The next batch (the call made 0.3 s later, then the read) ended when the read's
        # deadline did; by its first call's it would have waited 0.7 s.
        assert deadline - 0.05 <= waited <= deadline + 0.2, waited
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
        await state.aclose()


async def _drop(state: FallbackState) -> None:
    redis_state = state.redis
    names = await redis_state.client.keys(f"{redis_state.namespace}:*")
    if names:
        await redis_state.client.delete(*names)
