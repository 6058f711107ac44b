"""Three `farebox serve` processes on one Redis and one PostgreSQL ledger, load spread over
them with the openai SDK: what one replica learns, the others know, and a replica killed
with SIGKILL mid-load loses no more than docs/reliability.md says while the others go on.

Each replica is a real process on its own port with its own data directory (its spool),
as a pod or a compose service would be; Redis is the local server's db 11 (flushed before
and after), the ledger a PostgreSQL database of this module's own (created, then dropped).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
import redis

from gateway.settings import RedisLimits
from gateway.tenants import Scope
from gateway.tenants.redis import RedisLimiter
from tests.conftest import SimControl
from tests.pg import PG_ADMIN_DB, PG_HOST, PG_PORT, PG_USER, pg_url, require_postgres
from tests.redis_service import require_redis
from tests.servers import ServerThread, free_port, wait_ready

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

REDIS_DB = 11  # no other test uses it: flushing it touches nobody else's keys
FLUSH_S = 0.2  # FAREBOX_LEDGER_FLUSH_INTERVAL, the documented kill -9 bound
# What a loaded 2-core box adds to that bound: the flush timer waits for its event loop,
# the spool write for its worker thread and fsync, and the row is queued just after the
# client has its reply. The test prints the age of the oldest row it lost.
SCHEDULING_SLACK_S = 0.8
BUDGET_USD = Decimal("0.02")
GUIDE = "You are the billing agent. Follow the runbook exactly. " * 120
CONFIG = """\
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  pinned: {{provider: openai, model: sim-thinker, base_url: "{sim}/v1", family: vllm}}
prices:
  chat: {{input: 2, output: 10}}
  pinned: {{input: 2, output: 10}}
rules:
  - name: pinned-first-effort
    match: {{model: pinned, step: user_turn}}
    effort: high
    pin_effort_per_task: true
  - name: pinned-later-steps
    match: {{model: pinned}}
    effort: low
    pin_effort_per_task: true
tenants:
  teams:
    {team}: {{budget: {{daily_usd: {limit}}}}}
"""


@dataclass
class Replica:
    """One `farebox serve` process: its port, its data directory (spool), its log."""

    port: int
    data_dir: Path
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        command = [sys.executable, "-m", "gateway", "serve", "--port", str(self.port)]
        with self.log.open("ab") as out:  # the child keeps its own descriptor
            self.process = subprocess.Popen(command, env=self.env, stdout=out, stderr=out)
        return self

    def ready(self) -> None:
        assert self.process is not None
        try:
            wait_ready(self.port, self.process, timeout=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.log.read_text()[-3000:]}") from None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: in-flight requests drain, the ledger flushes
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass
class Deployment:
    replicas: list[Replica]
    database: str
    team: str
    sim: ServerThread

    def sdk(self, index: int, **options: Any) -> openai.OpenAI:
        url = f"{self.replicas[index].url}/v1"
        return openai.OpenAI(base_url=url, api_key="replicas", max_retries=0, **options)


def _pg(database: str, sql: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        try:
            connection = await asyncpg.connect(
                host=PG_HOST, port=PG_PORT, user=PG_USER, database=database, timeout=5
            )
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            require_postgres(f"{type(exc).__name__}: {exc}")
            raise
        try:
            return list(await connection.fetch(sql, *args))
        finally:
            await connection.close()

    return asyncio.run(run())


def _env(replica_dir: Path, config: Path, database: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(
        FAREBOX_CONFIG=str(config),
        FAREBOX_DATA_DIR=str(replica_dir),
        FAREBOX_DATABASE_URL=pg_url(database),
        FAREBOX_REDIS_URL=f"redis://127.0.0.1:6379/{REDIS_DB}",
        FAREBOX_LEDGER_FLUSH_INTERVAL=str(FLUSH_S),
        # Patient Redis: a busy CI box must not look like an outage (that is another test).
        FAREBOX_REDIS_TIMEOUT_S="5",
        FAREBOX_REDIS_CONNECT_TIMEOUT_S="5",
        FAREBOX_REDIS_POOL_WAIT_S="10",
        FAREBOX_SHUTDOWN_GRACE_S="5",
    )
    return env


@pytest.fixture(scope="module")
def deploy(
    sim_server: ServerThread, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    require_redis()
    shared = redis.Redis.from_url(f"redis://127.0.0.1:6379/{REDIS_DB}")
    shared.flushdb()
    database = f"farebox_replicas_{uuid.uuid4().hex[:12]}"
    _pg(PG_ADMIN_DB, f'CREATE DATABASE "{database}"')
    folder = tmp_path_factory.mktemp("replicas")
    team = f"replicas-{uuid.uuid4().hex[:8]}"
    config = folder / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim_server.url, team=team, limit=BUDGET_USD))
    replicas = [
        Replica(
            port, folder / f"r{n}", _env(folder / f"r{n}", config, database), folder / f"r{n}.log"
        )
        for n, port in enumerate(free_port() for _ in range(3))
    ]
    try:
        for replica in replicas:  # all three start at once, migrating one database
            replica.start()
        for replica in replicas:
            replica.ready()
        yield Deployment(replicas, database, team, sim_server)
    finally:
        for replica in replicas:
            replica.stop()
        _pg(PG_ADMIN_DB, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shared.flushdb()
        shared.close()


def _sent_to_sim(sim: SimControl, marker: str) -> list[dict[str, Any]]:
    bodies = [json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests()]
    return [body for body in bodies if marker in json.dumps(body)]


def test_a_task_spread_over_three_replicas_has_one_total_one_effort_and_one_ledger(
    deploy: Deployment, sim: SimControl
) -> None:
    task, marker = f"task-{uuid.uuid4().hex}", uuid.uuid4().hex
    user: list[dict[str, Any]] = [{"role": "user", "content": f"Plan the migration {marker}."}]
    tool = [
        *user,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "plan", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "plan: three steps"},
    ]
    costs: list[Decimal] = []
    for index, messages in enumerate([user, tool, tool]):  # step n on replica n
        with deploy.sdk(index) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="pinned",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=40,
                extra_headers={"X-Task-Id": task},
            )
        costs.append(Decimal(raw.headers["x-farebox-cost-usd"]))
        # The running task total is Redis's: each replica adds to what the others booked.
        assert Decimal(raw.headers["x-farebox-task-cost-usd"]) == sum(costs)
    # The first step's effort, pinned by replica 0, is what replicas 1 and 2 sent.
    efforts = [body.get("reasoning_effort") for body in _sent_to_sim(sim, marker)]
    assert efforts == ["high", "high", "high"]
    # One ledger: every replica reads the whole task from PostgreSQL, once each replica's
    # writer has committed (within a flush interval). Every read is one snapshot: the
    # total is the sum of the rows listed beside it, however many have landed (read in
    # two statements, 3 rows were once listed beside a 2-row total).
    for replica in deploy.replicas:
        deadline = time.monotonic() + 10
        while True:
            body = httpx.get(f"{replica.url}/v1/tasks/{task}", timeout=10).json()
            rows, total = body.get("requests", []), body.get("cost", {}).get("total")
            if total is not None:
                assert Decimal(total) == sum(Decimal(row["cost_total"]) for row in rows), body
            if len(rows) == 3 and total is not None and Decimal(total) == sum(costs):
                break
            assert time.monotonic() < deadline, (body, costs)
            time.sleep(0.1)


def _agent_step(step: int, volatile_first: bool) -> list[dict[str, str]]:
    stamp = f"2026-11-29T10:{step:02d}:07Z"
    system = f"Current time: {stamp}\n{GUIDE}" if volatile_first else GUIDE
    messages = [{"role": "system", "content": system}]
    for earlier in range(step):
        messages += [
            {"role": "user", "content": f"Check invoice {earlier}."},
            {"role": "assistant", "content": f"Invoice {earlier} is paid."},
        ]
    messages.append({"role": "user", "content": f"Check invoice {step}."})
    return messages


def _prefix_verdicts(deploy: Deployment, task: str, volatile_first: bool) -> list[tuple[str, int]]:
    verdicts = []
    for step in range(3):  # step n on replica n: only Redis holds the steps before it
        with deploy.sdk(step) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="chat",
                messages=_agent_step(step, volatile_first),  # type: ignore[arg-type]
                max_tokens=8,
                extra_headers={"X-Task-Id": task},
            )
        verdicts.append(
            (raw.headers["x-farebox-prefix"], int(raw.headers["x-farebox-expected-cached-tokens"]))
        )
    return verdicts


def test_prefix_history_follows_a_task_from_replica_to_replica(deploy: Deployment) -> None:
    stable = _prefix_verdicts(deploy, f"task-{uuid.uuid4().hex}", volatile_first=False)
    assert stable[0][1] == 0  # nothing seen before the first step
    for header, expected in stable[1:]:
        # Forecast from the history another replica wrote: a replica on its own has none.
        assert header == "stable" and expected > 1000, stable
    broken = _prefix_verdicts(deploy, f"task-{uuid.uuid4().hex}", volatile_first=True)
    for header, expected in broken[1:]:
        assert "segment=system" in header and "volatile_value" in header, broken
        assert expected == 0, broken


async def _agent(
    sdks: list[openai.AsyncOpenAI], task: str, n: int
) -> list[tuple[str, int, Decimal, Decimal]]:
    """Three steps of agent `n`, its step s on replica n + s: (prefix verdict, expected
    cached tokens, the step's cost, the task's running total) per step. Its system prompt
    is its own, so that only its own steps (not the caller's other agents') forecast a hit."""
    steps = []
    for step in range(3):
        messages = _agent_step(step, volatile_first=False)
        messages[0]["content"] = f"You are agent number {n}.\n{messages[0]['content']}"
        raw = await sdks[(n + step) % 3].chat.completions.with_raw_response.create(
            model="chat",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=8,
            extra_headers={"X-Task-Id": task},
        )
        headers = raw.headers
        steps.append(
            (
                headers["x-farebox-prefix"],
                int(headers["x-farebox-expected-cached-tokens"]),
                Decimal(headers["x-farebox-cost-usd"]),
                Decimal(headers["x-farebox-task-cost-usd"]),
            )
        )
    return steps


def test_agents_side_by_side_each_see_their_own_history_and_total(deploy: Deployment) -> None:
    # Twelve agents at once over three replicas: each replica joins their Redis reads,
    # records and cost additions into shared script calls; every step must still read
    # the steps its own task made before it, and be told its own task's total.
    async def run() -> list[list[tuple[str, int, Decimal, Decimal]]]:
        sdks = [
            openai.AsyncOpenAI(
                base_url=f"{r.url}/v1", api_key="replicas", max_retries=0, timeout=30
            )
            for r in deploy.replicas
        ]
        try:
            tasks = [f"task-{uuid.uuid4().hex}" for _ in range(12)]
            return await asyncio.gather(*(_agent(sdks, t, n) for n, t in enumerate(tasks)))
        finally:
            for sdk in sdks:
                await sdk.close()

    for steps in asyncio.run(run()):
        assert steps[0][1] == 0, steps  # no step of its own before its first
        for verdict, expected, _, _ in steps[1:]:
            assert verdict == "stable" and expected > 1000, steps
        costs = [cost for _, _, cost, _ in steps]
        assert [total for *_, total in steps] == [sum(costs[: n + 1]) for n in range(3)], steps


@dataclass
class BudgetRun:
    served: int = 0
    refused: int = 0
    worst_cases: list[Decimal] = field(default_factory=list)


async def _spend(sdk: openai.AsyncOpenAI, team: str, run: BudgetRun, seed: int) -> None:
    for attempt in range(20):
        try:
            raw = await sdk.chat.completions.with_raw_response.create(
                model="chat",
                messages=[{"role": "user", "content": f"budget {seed} {attempt} " * (5 + seed)}],
                max_tokens=16 + (seed * 37 + attempt * 53) % 400,
                extra_headers={"X-Farebox-Team": team},
            )
        except openai.RateLimitError as exc:
            run.refused += 1
            if "$0 held by requests in flight" in exc.message:
                return  # nothing in flight and it does not fit: the budget is spent
            await asyncio.sleep(0.05)
            continue
        run.served += 1
        run.worst_cases.append(Decimal(raw.headers["x-farebox-budget-reserved-usd"]))


async def _spend_through_all(deploy: Deployment, clients: int) -> BudgetRun:
    run = BudgetRun()
    sdks = [
        openai.AsyncOpenAI(base_url=f"{r.url}/v1", api_key="replicas", max_retries=0, timeout=30)
        for r in deploy.replicas
    ]
    try:
        await asyncio.gather(*(_spend(sdks[i % 3], deploy.team, run, i) for i in range(clients)))
    finally:
        for sdk in sdks:
            await sdk.close()
    return run


async def _engine_spent(team: str) -> Decimal:
    limiter = RedisLimiter.from_url(
        f"redis://127.0.0.1:6379/{REDIS_DB}", "farebox", RedisLimits(timeout_s=5)
    )
    try:
        usage = await limiter.usage(Scope("team", team), "day", datetime.now(UTC))
    finally:
        await limiter.aclose()
    return usage.spent_usd


def _ledger_rows(
    deploy: Deployment, served: int, where: str, *args: object
) -> list[asyncpg.Record]:
    """The ledger rows matching `where`, once at least `served` have been committed."""
    deadline = time.monotonic() + 15
    while True:
        rows = _pg(
            deploy.database, f"SELECT request_id, cost_total FROM requests WHERE {where}", *args
        )
        if len(rows) >= served or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_one_team_budget_holds_across_three_replicas(deploy: Deployment) -> None:
    run = asyncio.run(_spend_through_all(deploy, clients=24))
    assert run.served > 0 and run.refused > 0, run
    rows = _ledger_rows(deploy, run.served, "team = $1 AND status_code = 200", deploy.team)
    assert len(rows) == run.served
    booked = sum((Decimal(row["cost_total"]) for row in rows), Decimal(0))
    # Never past the limit by more than one request's worst case (docs/budgets.md).
    assert booked <= BUDGET_USD + max(run.worst_cases), (booked, run)
    # The shared engine's count is the shared ledger's, to 1e-10 USD.
    assert asyncio.run(_engine_spent(deploy.team)) == booked


@dataclass
class KillRun:
    """Replies per replica: (request id, when the client had it), and the failures."""

    served: dict[int, list[tuple[str, float]]] = field(
        default_factory=lambda: {0: [], 1: [], 2: []}
    )
    errors: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 0})
    killed_at: float = 0.0
    served_after_kill: set[int] = field(default_factory=set)  # clients served after it


async def _client(
    sdks: list[openai.AsyncOpenAI], number: int, run: KillRun, stop_at: float, tag: str
) -> None:
    """Request in a loop on its replica; on a connection error, move on as a load balancer
    would (replica 2's clients to replica 0)."""
    home = replica = number % 3
    while time.monotonic() < stop_at:
        try:
            raw = await sdks[replica].chat.completions.with_raw_response.create(
                model="chat",
                messages=[{"role": "user", "content": f"kill test {tag} {home}"}],
                max_tokens=16,
                extra_headers={"X-Farebox-Team": tag},
            )
        except openai.APIConnectionError:
            run.errors[replica] += 1
            replica = (replica + 1) % 3 if replica == 2 else replica
            continue
        run.served[replica].append((raw.headers["x-request-id"], time.monotonic()))
        if run.killed_at and time.monotonic() > run.killed_at:
            run.served_after_kill.add(number)
        await asyncio.sleep(0.05)  # paced: the box has two cores for everything here


async def _load_and_kill(deploy: Deployment, tag: str) -> KillRun:
    run = KillRun()
    victim = deploy.replicas[2].process
    assert victim is not None
    sdks = [
        openai.AsyncOpenAI(base_url=f"{r.url}/v1", api_key="replicas", max_retries=0, timeout=30)
        for r in deploy.replicas
    ]
    start = time.monotonic()

    async def kill() -> None:
        await asyncio.sleep(1.0)
        victim.send_signal(signal.SIGKILL)
        run.killed_at = time.monotonic()

    try:
        clients = [_client(sdks, number, run, start + 2.5, tag) for number in range(9)]
        await asyncio.gather(kill(), *clients)
    finally:
        for sdk in sdks:
            await sdk.close()
    return run


def _wait_spool_replayed(spool: Path, timeout: float = 30) -> None:
    """Wait until a restarted replica has committed every segment its predecessor left."""
    deadline = time.monotonic() + timeout
    while any(spool.glob("*.jsonl")):
        assert time.monotonic() < deadline, sorted(spool.glob("*.jsonl"))
        time.sleep(0.1)


def _rss_mib(replica: Replica) -> float:
    """The replica process's resident memory now (MiB), as the Helm chart's sizing cites."""
    assert replica.process is not None
    status = Path(f"/proc/{replica.process.pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return round(int(line.split()[1]) / 1024, 1)


def test_a_replica_killed_mid_load_loses_at_most_one_flush_of_rows(deploy: Deployment) -> None:
    tag = f"kill-{uuid.uuid4().hex[:8]}"
    run = asyncio.run(_load_and_kill(deploy, tag))
    victim = deploy.replicas[2]
    assert victim.process is not None and victim.process.wait(timeout=10) == -signal.SIGKILL
    # The others carried on: no failed request on replicas 0 and 1, before or after.
    assert run.errors[0] == run.errors[1] == 0, run.errors
    after_kill = [t for i in (0, 1) for _, t in run.served[i] if t > run.killed_at]
    # Replica 2's three clients each saw one failure (a request cut, or the port closed),
    # then moved on; every client, theirs included, was served after the kill.
    assert run.errors[2] == 3, run.errors
    assert run.served_after_kill == set(range(9)), run.served_after_kill
    # Every reply the survivors gave is in the shared ledger.
    survivors = [rid for i in (0, 1) for rid, _ in run.served[i]]
    kept = _ledger_rows(deploy, len(survivors), "request_id = ANY($1)", survivors)
    assert len(kept) == len(survivors)
    # The killed replica comes back on its data directory (as a restarted container on its
    # volume) and replays its spool: only rows not yet spooled when it died are lost.
    victims = dict(run.served[2])
    query = "SELECT request_id FROM requests WHERE request_id = ANY($1)"
    before = {row["request_id"] for row in _pg(deploy.database, query, list(victims))}
    victim.start().ready()
    _wait_spool_replayed(victim.data_dir / "spool")
    after = {row["request_id"] for row in _pg(deploy.database, query, list(victims))}
    lost = {rid: run.killed_at - done for rid, done in victims.items() if rid not in after}
    rss = [_rss_mib(replica) for replica in deploy.replicas[:2]]
    print(
        f"\nkilled replica: {len(victims)} replies before the kill, {len(before)} rows in "
        f"PostgreSQL at once, {len(after)} after its restart replayed the spool, "
        f"{len(lost)} lost (completed {sorted(round(age, 3) for age in lost.values())} s "
        f"before the kill); survivors: {len(survivors)} replies, {len(after_kill)} after "
        f"the kill, every one booked, RSS {rss} MiB; connection errors on the killed "
        f"replica: {run.errors[2]}"
    )
    assert before <= after
    # Lost rows are only those whose reply came within the flush interval before the kill.
    assert all(age <= FLUSH_S + SCHEDULING_SLACK_S for age in lost.values()), lost
