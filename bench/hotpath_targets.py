"""The servers bench/hotpath.py compares, each started pinned, with the same one model.

- `mock`: perf-floor's instant upstream (counting its connections), on the load core;
  "direct" runs go straight to it.
- `minproxy`: perf-floor's aiohttp + uvloop pass-through, the floor.
- `farebox`: `farebox serve` with every feature on (prefix check, a policy with rules,
  the ledger), SQLite, or PostgreSQL with Redis state; `--workers N` when it exists.
- `litellm`: LiteLLM's proxy from its own virtual environment, one model routed to the
  mock, no database, no callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hotpath_procs import (
    GATEWAY_CORE,
    Proc,
    RssWatch,
    clean_env,
    free_port,
    launch,
    wait_http,
)

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-chat"  # the alias clients send; the upstream knows it as UPSTREAM_MODEL
UPSTREAM_MODEL = "mock-gpt"
POSTGRES_URL = "postgresql+asyncpg://127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/13"

FAREBOX_CONFIG = """\
# bench/hotpath.py: one model on the instant mock, every feature on.
models:
  {model}: {{provider: openai, model: {upstream}, base_url: "{base}", family: openai}}
prices:
  {model}: {{input: 2, output: 10}}
defaults:
  max_tokens: {{default: 1024, ceiling: 4096}}
rules:
  - name: short-tool-steps
    match: {{step: tool_result}}
    max_tokens: {{default: 512}}
  - name: user-turns
    match: {{step: user_turn}}
    max_tokens: {{default: 1024}}
"""

CLAUDE_MODEL, CLAUDE_UPSTREAM = "bench-claude", "claude-mock"
ANTHROPIC_KEY_ENV = "FAREBOX_BENCH_ANTHROPIC_KEY"
NATIVE_ROUTE = """\
  {model}: {{provider: anthropic, model: {upstream}, base_url: "{base}", api_key_env: {key}}}
"""


def with_native_route(config: str, base: str) -> str:
    """`config` (FAREBOX_CONFIG) plus a `provider: anthropic` route to bench/hotpath_mock.py's
    Messages API at `base` (http://host:port): /v1/messages forwarded natively, as Claude
    Code's requests usually are. The gateway then loads litellm too (for chat requests to
    that route), in the background: wait for /readyz before measuring."""
    route = NATIVE_ROUTE.format(
        model=CLAUDE_MODEL, upstream=CLAUDE_UPSTREAM, base=base, key=ANTHROPIC_KEY_ENV
    )
    price = f"  {CLAUDE_MODEL}: {{input: 3, output: 15}}\n"
    return config.replace("\nprices:\n", f"\n{route}prices:\n{price}", 1)


LITELLM_CONFIG = """\
# bench/hotpath.py: LiteLLM's best case, one model on the mock, no database, no callbacks.
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{upstream}
      api_base: "{base}"
      api_key: sk-bench
"""


@dataclass
class Target:
    """A started server: where to send chat requests, and its process tree's cost."""

    name: str
    url: str
    proc: Proc | None  # None: direct to the mock
    watch: RssWatch | None = None
    ready_s: float | None = None
    database: str | None = None  # its PostgreSQL ledger's database, if any

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.watch:
            self.watch.stop()
        if self.proc:
            self.proc.stop()


def chat_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1/chat/completions"


def popen_mock(port: int, floor: Path, core: str = "0") -> subprocess.Popen[bytes]:
    """bench/hotpath_mock.py on `port`, pinned to `core`, its output dropped (a bench that
    keeps no workdir; `start_mock` logs and waits)."""
    command = [sys.executable, str(ROOT / "bench" / "hotpath_mock.py"), "--port", str(port)]
    return subprocess.Popen(
        ["taskset", "-c", core, *command],
        stdout=subprocess.DEVNULL,
        env=os.environ | {"FAREBOX_PERF_FLOOR": str(floor)},
    )


def start_mock(python: str, floor: Path, workdir: Path, core: str) -> tuple[Proc, str]:
    """The counting mock upstream; returns it and its base URL."""
    port = free_port()
    command = [python, str(ROOT / "bench" / "hotpath_mock.py"), "--port", str(port)]
    command += ["--model-id", UPSTREAM_MODEL]
    proc = launch("mock", command, core, workdir, {"FAREBOX_PERF_FLOOR": str(floor)})
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health", proc)
    return proc, base


def start_minproxy(python: str, floor: Path, workdir: Path, mock: str) -> Target:
    port = free_port()
    command = [python, str(floor / "minproxy.py"), str(port), f"{mock}/v1/chat/completions"]
    proc = launch("minproxy", command, GATEWAY_CORE, workdir, {})
    return Target("minproxy", chat_url(port), proc)


def farebox_workers_flag() -> bool:
    """Whether `farebox serve --workers` exists in this checkout."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(COLUMNS="200"),
    )
    return "--workers" in done.stdout


def start_farebox(
    name: str,
    workdir: Path,
    mock: str,
    core: str,
    postgres: str | None,
    workers: int | None,
    redis: str = REDIS_URL,
) -> Target:
    """`farebox serve` on the mock; SQLite in its own data dir, or PostgreSQL + Redis;
    with `workers` (1 or more, the comparison's runs) Redis state too."""
    config = workdir / f"{name}.yaml"
    config.write_text(
        FAREBOX_CONFIG.format(model=MODEL, upstream=UPSTREAM_MODEL, base=f"{mock}/v1")
    )
    settings = {"FAREBOX_CONFIG": str(config), "FAREBOX_DATA_DIR": str(workdir / f"{name}-data")}
    if postgres:
        settings["FAREBOX_DATABASE_URL"] = postgres
    if postgres or workers:  # workers share budgets and task totals through Redis
        settings["FAREBOX_REDIS_URL"] = redis
    port = free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    if workers:
        command += ["--workers", str(workers)]
    proc = launch(name, command, core, workdir, settings)
    database = urllib.parse.urlsplit(postgres).path.lstrip("/") if postgres else None
    return Target(name, chat_url(port), proc, database=database)


@contextlib.contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A PostgreSQL database of this run's own on `server_url`'s server, dropped afterwards.

    The gateway migrates it from empty, so no stale ledger can stand in the way: the
    shared `test` database once had its Alembic version at head but tables of later
    migrations missing (dropped by hand or by another tool), and the run's rows failed
    with `relation "rollup_steps_hourly" does not exist`.
    """
    import asyncpg
    from sqlalchemy.engine import make_url

    admin = make_url(server_url)
    name = f"farebox_hotpath_{uuid.uuid4().hex[:12]}"

    async def execute(statement: str) -> None:
        connection = await asyncpg.connect(
            host=admin.host,
            port=admin.port,
            user=admin.username or "postgres",
            password=admin.password,
            database=admin.database,
            timeout=10,
        )
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(execute(f'CREATE DATABASE "{name}"'))
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def litellm_version(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None


def start_litellm(venv: Path, workdir: Path, mock: str) -> Target:
    config = workdir / "litellm.yaml"
    config.write_text(
        LITELLM_CONFIG.format(model=MODEL, upstream=UPSTREAM_MODEL, base=f"{mock}/v1")
    )
    port = free_port()
    command = [str(venv / "bin" / "litellm"), "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    # The bundled price map instead of a download: loopback only.
    # Without a master key LiteLLM checks no key, as Farebox's open mode; since 1.108 it
    # refuses to start so unless told this is on purpose (loopback only here).
    settings = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DISABLE_ADMIN_UI": "True",
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    proc = launch("litellm", command, GATEWAY_CORE, workdir, settings)
    return Target("litellm", chat_url(port), proc)
