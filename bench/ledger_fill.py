"""Fill a PostgreSQL ledger with realistic generated rows, fast, for the 10M-row benchmark.

Run: `python bench/ledger_fill.py --rows 10000000 [--url postgresql://postgres@127.0.0.1/farebox_bench]`
(the database is dropped and created again; `--keep` appends instead).

The rows are generated inside PostgreSQL (`generate_series`, seeded `random()`), which is
several times faster than sending them from Python (COPY included): 16 teams with 1 to 4
projects each, 8 routes (model, backend, provider, prices; two reasoning models), three
tiers, agent tasks of 1 to 25 steps whose prompts grow and are mostly served from the
cache after the first step, about 3% of calls retried on another backend, 6% of calls
sent without a task id (the gateway's `task-<hex>` wrapper), task outcomes (success,
failed, abandoned, open for the last day), over the `--days` days before now. The
request indexes are dropped during the load and built once after it.

The rollups (by team, project, model, backend and tier; by step; by model, tier and prefix
verdict) and task rows are then built from the request rows with the same sums the writer
keeps (migrations 0005, 0007 and 0008 backfill the same way), and the tasks table is
vacuumed as autovacuum would; `--check` compares every rollup row with a GROUP BY of the
base table and fails on any difference. The schema is the head migration's, so a fresh
fill has every rollup and index the dashboards read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gateway.ledger import migrate
from gateway.ledger.partitions import create_partition_sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/farebox_bench"
INDEXES = {
    "ix_requests_created_at": "(created_at)",
    "ix_requests_task_id": "(task_id)",
    "ix_requests_team_created_at": "(team, created_at)",
    "ix_requests_request_id": "(request_id)",
}
# alias, backend, provider, upstream model, $/M input, cached, cache write, output, reasoning?
ROUTES = """(VALUES
 (0, 'smart', 'openai', 'openai', 'gpt-5', 1.25, 0.125, 1.25, 10.0, true),
 (1, 'smart', 'azure', 'azure', 'gpt-5', 1.25, 0.125, 1.25, 10.0, true),
 (2, 'claude', 'anthropic', 'anthropic', 'claude-sonnet-4-5', 3.0, 0.30, 3.75, 15.0, false),
 (3, 'claude', 'bedrock', 'bedrock', 'claude-sonnet-4-5', 3.0, 0.30, 3.75, 15.0, false),
 (4, 'fast', 'openai', 'openai', 'gpt-5-mini', 0.25, 0.025, 0.25, 2.0, false),
 (5, 'fast', 'groq', 'groq', 'llama-4-scout', 0.11, 0.11, 0.11, 0.34, false),
 (6, 'think', 'deepseek', 'deepseek', 'deepseek-reasoner', 0.28, 0.028, 0.28, 0.42, true),
 (7, 'local', 'vllm', 'vllm', 'qwen3-32b', 0.05, 0.01, 0.05, 0.10, false)
) AS r(n, alias, backend, provider, upstream, p_in, p_cached, p_write, p_out, reasons)"""

TASKS_SQL = """
CREATE UNLOGGED TABLE gen_tasks AS
SELECT n,
       floor(16 * random() ^ 1.6)::int AS team_no,
       floor(4 * random())::int AS project_no,
       (ARRAY[0,0,1,2,2,3,4,4,5,6,7])[1 + floor(11 * random())::int] AS route,
       $1::timestamptz + random() * $2::interval AS started_at,
       1 + floor(25 * random() ^ 2.2)::int AS steps,
       random() AS outcome_draw,
       random() < 0.06 AS untasked,
       (ARRAY['standard','standard','standard','standard','flex','priority'])
           [1 + floor(6 * random())::int] AS tier
FROM generate_series(1, $3) AS n
"""

REQUESTS_SQL = f"""
INSERT INTO requests
SELECT md5(t.n || '/' || s.s || '/' || a.a)::uuid::text AS id,
       'req-' || md5(t.n || '/' || s.s) AS request_id,
       a.a AS attempt,
       t.started_at + (s.s * interval '47 seconds') + (a.a * interval '2 seconds') AS created_at,
       CASE WHEN t.untasked THEN 'task-' || md5(t.n || '/' || s.s) ELSE 'run-' || t.n END,
       CASE WHEN t.untasked THEN NULL ELSE 'step-' || s.s END,
       CASE WHEN t.untasked THEN NULL
            ELSE (ARRAY['plan','code','test','review','summarize'])[1 + s.s % 5] END,
       'team-' || lpad(t.team_no::text, 2, '0'),
       'team-' || lpad(t.team_no::text, 2, '0') || '-p' || (t.project_no % (1 + t.team_no % 4)),
       'key-' || t.team_no || '-' || (t.n % 3),
       r.alias, r.backend, r.provider, r.upstream, t.tier, t.tier,
       CASE WHEN a.last THEN 200 ELSE 503 END,
       CASE WHEN a.last THEN NULL ELSE 'upstream_unavailable' END,
       random() < 0.8, false,
       u.prompt, u.cached, u.cache_write, 0, u.completion, u.reasoning,
       round((u.prompt - u.cached - u.cache_write) * r.p_in / 1e6, 10),
       round(u.cached * r.p_cached / 1e6, 10),
       round(u.cache_write * r.p_write / 1e6, 10),
       round((u.completion - u.reasoning) * r.p_out / 1e6, 10),
       round(u.reasoning * r.p_out / 1e6, 10),
       round((u.prompt - u.cached - u.cache_write) * r.p_in / 1e6, 10)
         + round(u.cached * r.p_cached / 1e6, 10) + round(u.cache_write * r.p_write / 1e6, 10)
         + round((u.completion - u.reasoning) * r.p_out / 1e6, 10)
         + round(u.reasoning * r.p_out / 1e6, 10),
       u.ttft, u.ttft + u.reasoning / 40, u.ttft + u.completion * 12, 60 + 40 * random(),
       u.expected, CASE WHEN s.s = 1 THEN 'miss:first_call' WHEN u.broke
                        THEN 'miss:volatile_value' ELSE 'hit' END,
       false, false, NULL, random() < 0.9,
       CASE WHEN u.broke THEN round((u.expected - u.cached) * (r.p_in - r.p_cached) / 1e6, 10) END,
       CASE WHEN r.reasons THEN 'backend' END, NULL
FROM gen_tasks t
JOIN {ROUTES} ON r.n = t.route
CROSS JOIN LATERAL generate_series(1, CASE WHEN t.untasked THEN 1 ELSE t.steps END) AS s(s)
CROSS JOIN LATERAL (SELECT g AS a, g = max_a AS last FROM
    (SELECT CASE WHEN random() < 0.03 THEN 1 ELSE 0 END AS max_a) m,
    generate_series(0, m.max_a) AS g) a
CROSS JOIN LATERAL (
    SELECT p.prompt, p.cached, p.cache_write, p.completion, p.reasoning, p.ttft,
           p.expected, p.broke
    FROM (SELECT x.prompt,
                 CASE WHEN s.s = 1 OR x.broke THEN 0
                      ELSE (x.prompt * (0.55 + 0.4 * random()))::bigint END AS cached,
                 CASE WHEN s.s = 1 OR x.broke THEN (x.prompt * 0.8)::bigint
                      ELSE (x.prompt * 0.02)::bigint END AS cache_write,
                 x.completion,
                 CASE WHEN r.reasons THEN (x.completion * 0.6)::bigint ELSE 0 END AS reasoning,
                 (150 + 900 * random() ^ 3)::bigint AS ttft,
                 CASE WHEN s.s = 1 THEN 0 ELSE (x.prompt * 0.85)::bigint END AS expected,
                 x.broke
          FROM (SELECT (1500 + s.s * 2600 + 6000 * random())::bigint AS prompt,
                       (40 + 3500 * random() ^ 2.5)::bigint AS completion,
                       s.s > 1 AND random() < 0.07 AS broke) x) p
) u
LIMIT $1
"""

UNTASKED = (
    "substr(task_id, 1, 5) = 'task-' AND substr(request_id, 1, 4) = 'req-' "
    "AND substr(task_id, 6) = substr(request_id, 5)"
)
DIMS = "team, project, model_alias, backend, tier_served"
# Step rollups: a missing step or kind is '' in the key, a present one ':' + it (as the writer).
STEP_KEYS = {
    "team, project, task_step, step_kind": "team, project, "
    "CASE WHEN task_step IS NULL THEN '' ELSE ':' || task_step END, "
    "CASE WHEN step_kind IS NULL THEN '' ELSE ':' || step_kind END",
}
# Prefix rollups (migrations 0007, 0008): the verdict encoded as a step, and two more sums.
PREFIX_NAMES = "team, project, model_alias, tier_served, prefix_status"
PREFIX_KEYS = (
    "team, project, model_alias, tier_served, "
    "CASE WHEN prefix_status IS NULL THEN '' ELSE ':' || prefix_status END"
)
PREFIX_EXTRA = ("expected_cached_tokens", "prefix_lost_usd")
ROLLUPS: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("rollup_hourly", "hour", DIMS, DIMS, ()),
    ("rollup_daily", "day", DIMS, DIMS, ()),
    *(("rollup_steps_hourly", "hour", k, v, ()) for k, v in STEP_KEYS.items()),
    *(("rollup_steps_daily", "day", k, v, ()) for k, v in STEP_KEYS.items()),
    ("rollup_prefix_hourly", "hour", PREFIX_NAMES, PREFIX_KEYS, PREFIX_EXTRA),
    ("rollup_prefix_daily", "day", PREFIX_NAMES, PREFIX_KEYS, PREFIX_EXTRA),
)
TOKENS = (
    "prompt_tokens, cached_tokens, cache_write_tokens, cache_write_1h_tokens, "
    "completion_tokens, reasoning_tokens"
)
COSTS = "cost_input, cost_cached, cost_cache_write, cost_output, cost_reasoning, cost_total"


def _sums(columns: str) -> str:
    return ", ".join(f"SUM({c.strip()})" for c in columns.split(","))


def rollup_sql(
    table: str, unit: str, names: str = DIMS, keys: str = DIMS, extra: tuple[str, ...] = ()
) -> str:
    """Fill one rollup from the request rows: the writer's sums, per bucket and key (and
    `extra` nullable columns summed with NULL as 0)."""
    bucket = f"date_trunc('{unit}', created_at, 'UTC')"
    extra_names = "".join(f", {name}" for name in extra)
    extra_sums = "".join(f", COALESCE(SUM({name}), 0)" for name in extra)
    return (
        f"INSERT INTO {table} (bucket, {names}, request_count, {TOKENS}, {COSTS}, "
        f"untasked_requests, untasked_cost{extra_names}) SELECT {bucket}, {keys}, COUNT(*), "
        f"{_sums(TOKENS)}, {_sums(COSTS)}, "
        f"SUM(CASE WHEN {UNTASKED} AND attempt = 0 THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {UNTASKED} THEN cost_total ELSE 0 END){extra_sums} FROM requests "
        f"GROUP BY {bucket}, {keys}"
    )


_TASK_SUMS = ", ".join(f"SUM({c.strip()}) AS {c.strip()}" for c in f"{TOKENS},{COSTS}".split(","))
TASK_ROWS_SQL = f"""
INSERT INTO tasks
SELECT task_id, team, project, status, first_at, last_at,
       CASE WHEN status = 'open' THEN NULL ELSE last_at + interval '5 seconds' END,
       n, {TOKENS}, {COSTS}, first_ttft_ms, untasked
FROM (SELECT q.*,
             CASE WHEN q.untasked THEN 'untasked'
                  WHEN q.last_at > $1::timestamptz - interval '1 day' AND g.outcome_draw < 0.5
                       THEN 'open'
                  WHEN g.outcome_draw < 0.66 THEN 'success'
                  WHEN g.outcome_draw < 0.86 THEN 'failed'
                  ELSE 'abandoned' END AS status
      FROM (SELECT task_id, min(team) AS team, min(project) AS project,
                   min(created_at) AS first_at, max(created_at) AS last_at, count(*) AS n,
                   {_TASK_SUMS},
                   (array_agg(ttft_ms ORDER BY created_at, attempt))[1] AS first_ttft_ms,
                   bool_or({UNTASKED}) AS untasked,
                   min(CASE WHEN task_id LIKE 'run-%' THEN substr(task_id, 5)::bigint END)
                       AS run_no
            FROM requests GROUP BY task_id) q
      LEFT JOIN gen_tasks g ON g.n = q.run_no) t
ORDER BY last_at  -- the heap order a live ledger has: a task row moves as it is updated
"""

CHECK_SQL = """
SELECT count(*) FROM (
  (SELECT * FROM {table} EXCEPT SELECT * FROM check_{table})
  UNION ALL
  (SELECT * FROM check_{table} EXCEPT SELECT * FROM {table})) d
"""


async def _connect(url: str, database: str | None = None) -> asyncpg.Connection:
    dsn = url if database is None else url.rsplit("/", 1)[0] + "/" + database
    return await asyncpg.connect(dsn.replace("postgresql+asyncpg://", "postgresql://"))


async def recreate(url: str) -> None:
    """Drop and create the benchmark database."""
    name = url.rsplit("/", 1)[1]
    admin = await _connect(url, "test")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


async def _step(db: asyncpg.Connection, label: str, sql: str, *args: object) -> float:
    started = time.perf_counter()
    await db.execute(sql, *args)
    took = time.perf_counter() - started
    print(f"  {label}: {took:.1f} s", flush=True)
    return took


async def fill(url: str, rows: int, days: int, seed: float = 0.14) -> dict[str, float]:
    """Generate `rows` request rows over the `days` before now; return each step's seconds."""
    await migrate(url.replace("postgresql://", "postgresql+asyncpg://"))
    now = datetime.now(UTC)
    start = (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)
    db = await _connect(url)
    timings: dict[str, float] = {}
    try:
        await db.execute("SET synchronous_commit = off")
        # This loading session's sorts and index builds only; the timed queries use defaults.
        await db.execute("SET maintenance_work_mem = '512MB'")
        await db.execute("SET work_mem = '256MB'")
        day = start.date()
        while day <= now.date() + timedelta(days=2):
            await db.execute(create_partition_sql(day))
            day += timedelta(days=1)
        for name in INDEXES:
            await db.execute(f"DROP INDEX IF EXISTS {name}")
        await db.execute("ALTER TABLE requests DROP CONSTRAINT IF EXISTS requests_pkey")
        await db.execute("DROP TABLE IF EXISTS gen_tasks")
        await db.execute("SELECT setseed($1)", seed)
        timings["tasks generated"] = await _step(
            db, "generate tasks", TASKS_SQL, start, timedelta(days=days), rows // 6
        )
        timings["request rows"] = await _step(db, "insert request rows", REQUESTS_SQL, rows)
        timings["primary key and indexes"] = await _step(
            db, "primary key and indexes",
            "ALTER TABLE requests ADD CONSTRAINT requests_pkey PRIMARY KEY (id, created_at); "
            + "; ".join(f"CREATE INDEX {n} ON requests {c}" for n, c in INDEXES.items()),
        )  # fmt: skip
        timings["rollups"] = await _step(
            db, "rollups", "; ".join(rollup_sql(*rollup) for rollup in ROLLUPS)
        )
        timings["task rows"] = await _step(db, "task rows", TASK_ROWS_SQL, now)
        await db.execute("DROP TABLE gen_tasks")
        timings["analyze"] = await _step(db, "analyze", "ANALYZE")
        # What autovacuum does to a live ledger's finished tasks (rows no longer updated):
        # the visibility map set, so ix_tasks_finished_at_cover answers index-only.
        timings["vacuum tasks"] = await _step(db, "vacuum tasks", "VACUUM tasks")
    finally:
        await db.close()
    return timings


async def check(url: str) -> int:
    """Rebuild both rollups from the rows in scratch tables; return the differing rows."""
    db = await _connect(url)
    differences = 0
    try:
        for table, unit, names, keys, extra in ROLLUPS:
            await db.execute(f"DROP TABLE IF EXISTS check_{table}")
            await db.execute(f"CREATE TEMP TABLE check_{table} (LIKE {table})")
            await db.execute(rollup_sql(f"check_{table}", unit, names, keys, extra))
            differences += await db.fetchval(CHECK_SQL.format(table=table))
    finally:
        await db.close()
    return differences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--keep", action="store_true", help="do not recreate the database")
    parser.add_argument("--check", action="store_true", help="compare rollups with the rows")
    args = parser.parse_args()

    async def run() -> int:
        if not args.keep:
            await recreate(args.url)
        started = time.perf_counter()
        await fill(args.url, args.rows, args.days)
        print(f"filled {args.rows:,} rows in {time.perf_counter() - started:.1f} s")
        if args.check:
            differences = await check(args.url)
            print(f"rollup rows differing from the base table: {differences}")
            return 1 if differences else 0
        return 0

    raise SystemExit(asyncio.run(run()))


if __name__ == "__main__":
    main()
