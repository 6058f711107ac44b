"""Redis's own CPU per prefix-history read: a Lua script against a plain LRANGE.

Run: `python bench/redis_history.py [--redis-url redis://127.0.0.1:6379/12] [-n 20000]
[--batch 16] [--records 8] [--appended 4] [--rounds 5]`.

The shared state reads a request's prefix history before its upstream call. It used to
read it with a script (LRANGE of each key inside Lua); it now sends LRANGE itself. This
fills one key with `--records` records of a small prompt's size, then reads it `-n` times
each way, in pipelines of `--batch` calls (the state's batch sends the calls of
concurrent requests together), the two ways alternating round by round; Redis's CPU is
`used_cpu_user + used_cpu_sys` from `INFO cpu` around each run, so other clients of the
same Redis count too: run it on a quiet one. Also measured: the remember script (LPUSH,
LTRIM, EXPIRE in Lua), which stays a script, since those three must apply together, with
one record a call (`remember_script`) and with `--appended` records a call, as the batch
sends concurrent requests' records (`remember_appended`, per record); and records of
requests of a task, each pushed to its task's list and the caller's, one a call
(`remember_task_alone`) and `--appended` tasks' records a call (`remember_tasks_appended`,
per record); a request of a task's history read (its task's list and the caller's, the
script), one a call (`history_task_alone`) and `--appended` tasks' reads a call, as the
batch joins concurrent requests' (`history_tasks_gathered`, per read); and the task-cost
script (INCRBY, a floor, EXPIRE) with one task's addition a call (`add_cost_alone`) and
`--appended` tasks' additions a call, as the batch gathers concurrent requests'
(`add_costs_gathered`, per addition).
Prints one JSON object: the median over the rounds, µs of Redis CPU a call (a record).
"""

from __future__ import annotations

import argparse
import json
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import redis

from gateway.state.redis import _ADD_WITH_FLOOR as ADD
from gateway.state.redis import _HISTORY as HISTORY  # the read a task still sends
from gateway.state.redis import _REMEMBER as REMEMBER

# A small prompt's record, as gateway.prefix.record writes it: digests, a chain, tokens.
RECORD = (
    b'{"segment_digests":["'
    + b"a" * 32
    + b'","'
    + b"b" * 32
    + b'"],"chain":["'
    + b"c" * 32
    + b'","'
    + b"d" * 32
    + b'"],"segment_tokens":[12,30],"breakpoints":[],'
    b'"reported_prompt_tokens":42}'
)


def _cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _per_call_us(client: redis.Redis, call: Callable[[Any], Any], n: int, batch: int) -> float:
    before = _cpu_s(client)
    for _ in range(n // batch):
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            call(pipe)
        pipe.execute()
    return (_cpu_s(client) - before) / (n // batch * batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("-n", type=int, default=20_000, help="calls per run")
    parser.add_argument("--batch", type=int, default=16, help="calls per pipeline")
    parser.add_argument("--records", type=int, default=8, help="records in the history")
    parser.add_argument(
        "--appended", type=int, default=4, help="records a remember call carries, appended"
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis_url)
    key = f"farebox-bench:{uuid.uuid4().hex}:prefix:caller:anonymous:bench-chat"
    scratch = key + ":remember"
    # Agents side by side: each push goes to its task's list and the shared caller's.
    tasks = [f"{key}:task:{n}" for n in range(args.appended)]
    task_pushes = [value for n in range(args.appended) for value in (2, n + 2, 1, RECORD)]
    costs = [f"{key}:task-cost:{n}" for n in range(args.appended)]
    read_lists = [f"{key}:task-read:{n}" for n in range(args.appended)]
    read_keys = [name for task in read_lists for name in (task, key)]  # task's, caller's
    additions = [value for _ in costs for value in (1250000, 0, 600)]  # units, floor, TTL
    try:
        client.delete(key)
        for name in (key, *read_lists):
            client.lpush(name, *[RECORD] * args.records)
        history, remember = client.register_script(HISTORY), client.register_script(REMEMBER)
        add = client.register_script(ADD)
        ways: dict[str, Callable[[Any], Any]] = {
            "history_script": lambda pipe: history(keys=[key], client=pipe),
            "history_lrange": lambda pipe: pipe.lrange(key, 0, -1),
            "history_task_alone": lambda pipe: history(keys=read_keys[:2], client=pipe),
            "history_tasks_gathered": lambda pipe: history(keys=read_keys, client=pipe),
            # Each push: its key count, its keys' indices into KEYS, its record.
            "remember_script": lambda pipe: remember(
                keys=[scratch], args=[args.records, 600, 1, 1, RECORD], client=pipe
            ),
            "remember_appended": lambda pipe: remember(
                keys=[scratch],
                args=[args.records, 600, *[1, 1, RECORD] * args.appended],
                client=pipe,
            ),
            "remember_task_alone": lambda pipe: remember(
                keys=[tasks[0], scratch], args=[args.records, 600, 2, 1, 2, RECORD], client=pipe
            ),
            "remember_tasks_appended": lambda pipe: remember(
                keys=[scratch, *tasks], args=[args.records, 600, *task_pushes], client=pipe
            ),
            "add_cost_alone": lambda pipe: add(keys=costs[:1], args=additions[:3], client=pipe),
            "add_costs_gathered": lambda pipe: add(keys=costs, args=additions, client=pipe),
        }
        per = {
            "remember_appended": args.appended,
            "remember_tasks_appended": args.appended,
            "add_costs_gathered": args.appended,
            "history_tasks_gathered": args.appended,
        }
        runs: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, call in ways.items():
                n = args.n // per.get(name, 1)
                runs[name].append(_per_call_us(client, call, n, args.batch) / per.get(name, 1))
    finally:
        client.delete(key, scratch, *tasks, *costs, *read_lists)
    medians = {name: round(statistics.median(values), 2) for name, values in runs.items()}
    shape = {"batch": args.batch, "records": args.records, "appended": args.appended}
    print(json.dumps({**shape, "us_per_call": medians}))


if __name__ == "__main__":
    main()
