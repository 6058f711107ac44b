"""Redis killed under load, then back: no request fails, totals end exact, one log line each way.

Each test runs a redis-server of its own on a free port (no persistence, like a cache
that restarts empty), so `kill -9` never touches the Redis other tests share.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal

import httpx
import openai
import pytest
import redis
from sqlalchemy import func, select

from gateway.ledger import make_engine
from gateway.ledger.models import RequestRow, TaskRow
from gateway.settings import RedisLimits
from gateway.state.base import from_units, to_units
from gateway.state.fallback import FallbackState
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.servers import free_port

pytestmark = pytest.mark.redis

# Patient socket timeouts: a busy CI box must not look like an outage; a killed Redis
# refuses at once anyway. Quick probes keep the test short.
LIMITS = RedisLimits(timeout_s=2, connect_timeout_s=2, failures=3, retry_s=0.2)
CLIENTS = 4
PER_PHASE = 70  # requests completed before the kill, during the outage, after recovery


class RedisServer:
    """A redis-server process on a fixed port: started, killed with SIGKILL, started again."""

    def __init__(self, binary: str, port: int) -> None:
        self.binary = binary
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        try:
            _wait(lambda: _pings(client), "redis-server did not start")
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def units(self, task_id: str) -> int:
        """The task's running total in Redis, in 1e-10 USD units (0 when absent)."""
        with redis.Redis(port=self.port) as client:
            value = client.get(f"farebox:task-cost:{task_id}")
        return int(value) if value is not None else 0


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _wait(condition: Callable[[], bool], message: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A stopped redis-server of this test's own (start it in the test)."""
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed; run `make services`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(binary, free_port())
    yield server
    server.kill()


class Load:
    """A few clients sending chat requests (every fourth streamed) over a few tasks."""

    def __init__(self, gateway: Gateway, tasks: list[str]) -> None:
        self.gateway = gateway
        self.tasks = tasks
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def wait_for(self, more: int) -> None:
        """Block until `more` further requests have succeeded."""
        target = self.ok + more
        _wait(lambda: self.ok >= target, f"load stalled at {self.ok} requests", timeout=60)

    def _run(self, client_index: int) -> None:
        client = self.gateway.sdk(timeout=30)
        sent = 0
        while not self._stop.is_set() and sent < 1000:  # bounded, whatever happens
            task = self.tasks[(client_index + sent) % len(self.tasks)]
            try:
                self._one(client, task, stream=sent % 4 == 3)
            except Exception as exc:
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                with self._lock:
                    self.ok += 1
            sent += 1

    @staticmethod
    def _one(client: openai.OpenAI, task: str, stream: bool) -> None:
        headers = {"X-Task-Id": task}
        messages = [{"role": "user", "content": f"hello from {task}"}]
        create = client.chat.completions.create
        if stream:
            chunks = list(
                create(model="chat", messages=messages, stream=True, extra_headers=headers)
            )
            assert chunks and chunks[-1].choices[0].finish_reason == "stop"
        else:
            reply = create(model="chat", messages=messages, extra_headers=headers)
            assert reply.choices[0].message.content


def _readyz(gateway: Gateway) -> dict[str, object]:
    response = httpx.get(f"{gateway.server.url}/readyz", timeout=10)
    assert response.status_code == 200, response.text  # degraded still serves: still ready
    body: dict[str, object] = response.json()
    return body


def _metric(gateway: Gateway, name: str) -> float:
    text = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def _ledger(gateway: Gateway) -> tuple[int, dict[str, int]]:
    """Rows in the requests table, and each task's booked cost in 1e-10 USD units."""

    async def read() -> tuple[int, dict[str, int]]:
        engine = make_engine(gateway.settings.ledger_url())
        try:
            async with engine.connect() as connection:
                rows = await connection.scalar(select(func.count()).select_from(RequestRow))
                tasks = await connection.execute(select(TaskRow.task_id, TaskRow.cost_total))
                costs = {task_id: int(cost * 10**10) for task_id, cost in tasks}
        finally:
            await engine.dispose()
        return int(rows or 0), costs

    return asyncio.run(read())


def _transitions(caplog: pytest.LogCaptureFixture) -> Counter[str]:
    return Counter(
        record.getMessage().split(":")[0]
        for record in caplog.records
        if record.name == "farebox.state"
    )


def test_redis_killed_under_load_no_request_fails_and_totals_end_exact(
    make_gateway: GatewayFactory,
    redis_server: RedisServer,
    sim: SimControl,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="farebox.state")
    redis_server.start()
    gateway = make_gateway(redis_url=redis_server.url, redis_limits=LIMITS)
    tasks = [f"outage-{uuid.uuid4().hex[:8]}-{i}" for i in range(6)]
    with Load(gateway, tasks) as load:
        load.wait_for(PER_PHASE)
        assert _readyz(gateway)["status"] == "ready"

        redis_server.kill()
        _wait(lambda: _readyz(gateway)["status"] == "degraded", "/readyz never said degraded")
        state = _readyz(gateway)["state"]
        assert isinstance(state, dict) and state["status"] == "degraded"
        assert "unreachable" in str(state["reason"]) and state["since"]
        assert _metric(gateway, "farebox_state_degraded ") == 1
        load.wait_for(PER_PHASE)

        redis_server.start()  # empty: without persistence, a restart forgets every total
        _wait(lambda: _readyz(gateway)["status"] == "ready", "/readyz never recovered")
        load.wait_for(PER_PHASE)
    assert _metric(gateway, "farebox_state_degraded ") == 0
    assert _metric(gateway, "farebox_state_fallbacks_total") > 0

    total = load.ok + len(load.failures)
    assert load.ok >= 0.999 * total, load.failures[:5]
    assert _transitions(caplog) == {"shared state degraded": 1, "shared state recovered": 1}

    gateway.stop()  # flushes the ledger
    rows, booked = _ledger(gateway)
    assert rows == len(sim.requests()) == total
    # The restarted Redis got the outage's deltas with each task's known total as a floor:
    # every shared total equals what the ledger billed the task.
    assert {task: redis_server.units(task) for task in tasks} == {
        task: booked[task] for task in tasks
    }
    assert all(booked[task] > 0 for task in tasks)


def test_gateway_starts_with_redis_down_and_picks_it_up(
    make_gateway: GatewayFactory, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="farebox.state")
    gateway = make_gateway(redis_url=redis_server.url, redis_limits=LIMITS)
    ready = _readyz(gateway)
    assert ready["status"] == "degraded" and ready["state"]["status"] == "degraded"  # type: ignore[index]
    assert _metric(gateway, "farebox_state_degraded ") == 1

    client = gateway.sdk()
    task = f"late-{uuid.uuid4().hex[:8]}"
    costs = []
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Task-Id": task},
    )
    costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))

    redis_server.start()
    _wait(lambda: _readyz(gateway)["status"] == "ready", "Redis was never picked up")
    assert _metric(gateway, "farebox_state_degraded ") == 0
    # The cost booked while Redis was away was pushed on recovery; the next adds to it.
    assert from_units(redis_server.units(task)) == costs[0]
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Task-Id": task},
    )
    costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
    assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == sum(costs)
    assert from_units(redis_server.units(task)) == sum(costs)
    assert _transitions(caplog) == {"shared state degraded": 1, "shared state recovered": 1}


async def test_a_blip_below_the_threshold_counts_each_cost_once(redis_server: RedisServer) -> None:
    redis_server.start()
    state = await FallbackState.connect(redis_server.url, "farebox", LIMITS)
    try:
        assert await state.add_task_cost("t", Decimal(1), 60) == 1
        redis_server.kill()
        assert await state.add_task_cost("t", Decimal(2), 60) == 3  # answered locally
        assert not state.degraded  # one failure is not an outage
        redis_server.start()  # empty: the 1 it had is gone
        # Redis takes 4 with this process's total less the unpushed 2 as its floor, then
        # the 2 is pushed: 7, each amount once.
        await state.add_task_cost("t", Decimal(4), 60)
        assert redis_server.units("t") == to_units(Decimal(7))
        assert await state.add_task_cost("t", Decimal(8), 60) == 15
        assert redis_server.units("t") == to_units(Decimal(15))
    finally:
        await state.aclose()


def test_a_hung_redis_costs_each_request_at_most_its_timeouts(
    make_gateway: GatewayFactory, redis_server: RedisServer
) -> None:
    redis_server.start()
    quick = RedisLimits(timeout_s=0.25, connect_timeout_s=0.25, failures=3, retry_s=0.2)
    gateway = make_gateway(redis_url=redis_server.url, redis_limits=quick)
    client = gateway.sdk(timeout=30)
    assert redis_server.process is not None
    redis_server.process.send_signal(signal.SIGSTOP)  # alive, accepting, never answering
    try:
        slowest = 0.0
        for _ in range(6):
            started = time.monotonic()
            Load._one(client, "hung", stream=False)
            slowest = max(slowest, time.monotonic() - started)
        assert _readyz(gateway)["status"] == "degraded"
        # A request makes a few state calls, each bounded (0.25 s here); not a hang.
        assert slowest < 10, f"a request took {slowest:.2f} s"
        print(f"hung Redis: slowest request {slowest:.3f} s")
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    _wait(lambda: _readyz(gateway)["status"] == "ready", "Redis was never picked up again")
