"""Budget overshoot through the gateway: two replicas on one Redis, 64 SDK clients.

Two `farebox serve` processes share one real Redis and forward to one simulator process.
Each run gives a fresh team a daily budget in the configuration; 64 concurrent clients
(the real openai SDK, async) spend it through both replicas with random prompts and
random output caps, retrying a 429 while other requests still hold money (a refusal with
nothing held ends the client). Overshoot is what the ledgers (both replicas', read after
they stopped) booked for the team past its limit; the issue's bound is the largest single
request's worst case, read from the `x-farebox-budget-reserved-usd` header of each served
request and from each refusal's message. The engine's spent is compared with the ledger.

    .venv/bin/python bench/gateway_overshoot.py [--runs 10] [--clients 64] [--json] [--no-write]

writes bench/results/gateway_overshoot.md unless told not to. Exits 1 when a run passes
the bound or the engine and the ledger disagree, 2 when Redis is unreachable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import openai
import orjson
from sqlalchemy import func, select

from gateway.ledger import make_engine
from gateway.ledger.models import RequestRow
from gateway.settings import RedisLimits
from gateway.tenants import Scope
from gateway.tenants.redis import RedisLimiter

RESULTS = Path(__file__).resolve().parent / "results" / "gateway_overshoot.md"
REDIS_URL = os.environ.get("FAREBOX_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RESERVED, COST = "x-farebox-budget-reserved-usd", "x-farebox-cost-usd"
MAY_COST = re.compile(r"may cost up to \$([0-9]+(?:\.[0-9]+)?)")
HELD = re.compile(r"\$([0-9]+(?:\.[0-9]+)?) held by requests in flight")
INPUT_PER_M, OUTPUT_PER_M = 2, 10  # USD per million tokens
WORDS = [
    "budget",
    "ledger",
    "replica",
    "token",
    "reserve",
    "settle",
    "window",
    "limit",
    "spend",
    "quota",
]


@dataclass
class Run:
    """One run: what the ledger booked for the team against its limit, and the bound."""

    limit_usd: str
    ledger_usd: str = "0"
    engine_spent_usd: str = "0"
    overshoot_usd: str = "0"
    max_worst_case_usd: str = "0"
    served: int = 0
    refused: int = 0
    connection_errors: int = 0
    above_reservation: int = 0  # served requests that cost more than they held
    seconds: float = 0.0
    team: str = ""
    worst_cases: list[Decimal] = field(default_factory=list, repr=False)

    @property
    def within_bound(self) -> bool:
        return Decimal(self.overshoot_usd) <= Decimal(self.max_worst_case_usd)

    @property
    def books_agree(self) -> bool:
        return Decimal(self.ledger_usd) == Decimal(self.engine_spent_usd)

    def report(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("worst_cases")
        return data


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def config_text(sim_url: str, teams: dict[str, Decimal]) -> str:
    lines = [
        "models:",
        f'  chat: {{provider: openai, model: sim-chat, base_url: "{sim_url}/v1", family: openai}}',
        "prices:",
        f"  chat: {{input: {INPUT_PER_M}, output: {OUTPUT_PER_M}}}",
        "tenants:",
        "  teams:",
    ]
    lines += [f"    {team}: {{budget: {{daily_usd: {limit}}}}}" for team, limit in teams.items()]
    return "\n".join(lines) + "\n"


def _wait(url: str, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAREBOX_")}
    env.update(extra)
    return env


@dataclass
class Deployment:
    """A simulator and two gateway replicas on one Redis, each with its own ledger."""

    urls: list[str]
    ledgers: list[str]


@contextmanager
def deployment(workdir: Path, teams: dict[str, Decimal], replicas: int = 2) -> Iterator[Deployment]:
    """Start the simulator and the replicas; stop them (ledgers flushed) on the way out."""
    python = sys.executable
    processes: list[subprocess.Popen[bytes]] = []
    try:
        sim_port = free_port()
        command = [python, "-m", "gateway", "sim", "--port", str(sim_port)]
        sim = subprocess.Popen(
            command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        processes.append(sim)
        _wait(f"http://127.0.0.1:{sim_port}/sim/config", sim)
        config = workdir / "farebox.yaml"
        config.write_text(config_text(f"http://127.0.0.1:{sim_port}", teams))
        urls, ledgers = [], []
        for index in range(replicas):
            port, data = free_port(), workdir / f"replica-{index}"
            env = _env(
                FAREBOX_CONFIG=str(config),
                FAREBOX_DATA_DIR=str(data),
                FAREBOX_REDIS_URL=REDIS_URL,
                FAREBOX_REDIS_TIMEOUT_S="5",
                FAREBOX_REDIS_CONNECT_TIMEOUT_S="5",
                FAREBOX_REDIS_POOL_WAIT_S="10",
            )
            command = [python, "-m", "gateway", "serve", "--port", str(port)]
            with (workdir / f"replica-{index}.log").open("wb") as log:  # the child keeps it
                processes.append(
                    subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)
                )
            urls.append(f"http://127.0.0.1:{port}")
            ledgers.append(f"sqlite+aiosqlite:///{data / 'farebox.db'}")
        for url, process in zip(urls, processes[1:], strict=True):
            _wait(f"{url}/readyz", process)
        yield Deployment(urls, ledgers)
    finally:
        for process in reversed(processes):  # SIGTERM: the replicas flush their ledgers
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def _prompt(rng: random.Random) -> list[dict[str, str]]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 400)))
    return [{"role": "user", "content": words}]


async def _client(
    sdk: openai.AsyncOpenAI, team: str, run: Run, rng: random.Random, attempts: int
) -> None:
    for _ in range(attempts):
        cap = rng.randint(16, 2000)
        try:
            raw = await sdk.chat.completions.with_raw_response.create(
                model="chat",
                messages=_prompt(rng),  # type: ignore[arg-type]
                max_tokens=cap,
                extra_headers={"X-Farebox-Team": team},
            )
        except openai.APIConnectionError:
            # A kept-alive connection the replica closed as it was reused: the request may
            # or may not have been served; the ledger knows, and the overshoot is read there.
            run.connection_errors += 1
            continue
        except openai.RateLimitError as exc:
            run.refused += 1
            found = MAY_COST.search(exc.message)
            if found:
                run.worst_cases.append(Decimal(found.group(1)))
            held = HELD.search(exc.message)
            if held is None or Decimal(held.group(1)) == 0:
                return  # nothing in flight and it does not fit: the budget is spent
            await asyncio.sleep(0.05)  # as a client backing off after a 429
            continue
        run.served += 1
        reserved, cost = Decimal(raw.headers[RESERVED]), Decimal(raw.headers[COST])
        run.worst_cases.append(reserved)
        run.above_reservation += cost > reserved  # the worst case was estimated too low


async def spend(
    deploy: Deployment, team: str, limit: Decimal, clients: int, attempts: int, seed: int
) -> Run:
    """`clients` SDK clients, spread over the replicas, spend the team's budget."""
    run = Run(str(limit), team=team)
    sdks = [
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0, timeout=60)
        for url in deploy.urls
    ]
    started = time.perf_counter()
    try:
        await asyncio.gather(
            *(
                _client(sdks[i % len(sdks)], team, run, random.Random(seed * 1000 + i), attempts)
                for i in range(clients)
            )
        )
    finally:
        for sdk in sdks:
            await sdk.close()
    run.seconds = round(time.perf_counter() - started, 2)
    run.max_worst_case_usd = str(max(run.worst_cases, default=Decimal(0)))
    limiter = RedisLimiter.from_url(REDIS_URL, "farebox", RedisLimits(timeout_s=5))
    try:
        usage = await limiter.usage(Scope("team", team), "day", datetime.now(UTC))
    finally:
        await limiter.aclose()
    run.engine_spent_usd = str(usage.spent_usd)
    return run


async def ledger_total(ledgers: Sequence[str], team: str) -> Decimal:
    """What every replica's ledger booked for `team`."""
    total = Decimal(0)
    for url in ledgers:
        engine = make_engine(url)
        try:
            async with engine.connect() as connection:
                query = select(func.sum(RequestRow.cost_total)).where(RequestRow.team == team)
                total += Decimal((await connection.scalar(query)) or 0)
        finally:
            await engine.dispose()
    return total


def measure(runs: int, clients: int, attempts: int, limit: Decimal, seed: int) -> list[Run]:
    """Start one deployment with a team per run, spend each budget, then read the ledgers."""
    tag = uuid.uuid4().hex[:8]
    teams = {f"bench-{tag}-{n}": limit for n in range(runs)}
    done: list[Run] = []
    folder = Path(tempfile.mkdtemp(prefix="farebox-overshoot-"))
    try:
        with deployment(folder, teams) as deploy:
            for number, team in enumerate(teams):
                done.append(
                    asyncio.run(spend(deploy, team, limit, clients, attempts, seed + number))
                )
    except BaseException:
        print(f"the replicas' logs are kept in {folder}", file=sys.stderr)
        raise
    for run in done:  # the replicas stopped: every row is in its ledger
        booked = asyncio.run(ledger_total(deploy.ledgers, run.team))
        run.ledger_usd = str(booked)
        run.overshoot_usd = str(max(booked - limit, Decimal(0)))
    shutil.rmtree(folder, ignore_errors=True)
    return done


def _markdown(runs: list[Run], clients: int) -> str:
    worst = max(Decimal(run.overshoot_usd) for run in runs)
    lines = [
        "# Budget overshoot through two gateway replicas",
        "",
        f"`.venv/bin/python bench/gateway_overshoot.py --runs {len(runs)} --clients {clients}`"
        f" on {platform.node() or 'this box'} ({os.cpu_count()} cores), "
        f"{datetime.now(UTC):%Y-%m-%d}: two `farebox serve` processes, one Redis, "
        f"{clients} async openai SDK clients, one daily team budget per run.",
        "",
        "| run | limit $ | ledger $ | engine $ | overshoot $ | largest worst case $ "
        "| served | refused | cost > held | conn. errors | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, run in enumerate(runs, 1):
        lines.append(
            f"| {n} | {run.limit_usd} | {run.ledger_usd} | {run.engine_spent_usd} | "
            f"{run.overshoot_usd} | {run.max_worst_case_usd} | {run.served} | {run.refused} "
            f"| {run.above_reservation} | {run.connection_errors} | {run.seconds} |"
        )
    lines += ["", f"Largest overshoot over {len(runs)} runs: ${worst}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--attempts", type=int, default=40, help="requests per client at most")
    parser.add_argument("--limit", type=Decimal, default=Decimal("0.1"), help="USD per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except OSError as exc:
        print(f"Redis at 127.0.0.1:6379 is unreachable ({exc})", file=sys.stderr)
        return 2
    runs = measure(args.runs, args.clients, args.attempts, args.limit, args.seed)
    if args.json:
        print(orjson.dumps([run.report() for run in runs], option=orjson.OPT_INDENT_2).decode())
    else:
        print(_markdown(runs, args.clients))
    if not args.no_write:
        RESULTS.write_text(_markdown(runs, args.clients))
    return 0 if all(run.within_bound and run.books_agree for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
