"""Where a SQLite ledger flush's CPU goes, per row and per part, with the gateway's ids.

Run: `python bench/ledger_parts.py [--src CHECKOUT] [-n 200] [--rounds 30] [--fill 20000]`.

bench/ledger_flush.py times whole steps on records whose ids are random; this one builds
records as the gateway does now (request ids in time order, `task-` + the id's hex for an
untasked request, row ids from `new_row_id`), fills a SQLite ledger with `--fill` of them,
then per round times, on fresh records, each part of the writer's path as it runs them:
`encode` (`encode_line` of each record: the spool line made in `submit`, on the request's
own time), `spool` (`Spool.write_encoded` of the batch and the segment's delete: file I/O,
fsyncs), `plan` (`batch.plan`: the rows built on the loop), `write` (the transaction:
`batch.apply` in aiosqlite's thread, commit included) and `all` (the four together, the
way the writer runs them: `submit` each, then `flush()`). CPU is `time.process_time()`
(every thread). Prints one JSON object: per part the median and best round, microseconds
per row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from checkout import use_checkout  # bench/ is the script folder: sys.path[0]


def gateway_records(n: int, keys: int = 4) -> list[Any]:
    """`n` records of small untasked requests with the gateway's own kinds of ids."""
    from gateway.ledger.records import RequestRecord
    from gateway.request_id import new_request_id

    now = datetime.now(UTC)
    cost = Decimal("0.0000120000")
    rows = []
    for index in range(n):
        request_id = new_request_id()
        rows.append(
            RequestRecord(
                request_id=request_id, task_id=f"task-{request_id[4:]}", team="default",
                project="default", model_alias=f"bench-gpt-{index % keys}", backend="openai",
                provider="openai", upstream_model="mock-model", tier_requested="standard",
                tier_served="standard", prompt_tokens=12, completion_tokens=9,
                cost_input=cost, cost_output=cost, cost_total=cost * 2, duration_ms=3,
                ttft_ms=2, prefix_status="fresh", expected_cached_tokens=0,
                usage_reported="upstream", tier_confirmed=False, created_at=now,
            )
        )  # fmt: skip
    return rows


async def _cpu(step: Callable[[], Awaitable[object]]) -> float:
    started = time.process_time()
    await step()
    return time.process_time() - started


async def _run(directory: Path, n: int, rounds: int, fill: int) -> dict[str, Any]:
    from gateway.ledger import LedgerWriter, WriterConfig, batch, make_engine, migrate
    from gateway.ledger.spool import Spool, encode_line

    url = f"sqlite+aiosqlite:///{directory / 'ledger.db'}"
    await migrate(url)
    engine = make_engine(url)
    spool = Spool(directory / "direct")
    writer = LedgerWriter(
        engine, WriterConfig(spool_dir=directory / "writer", flush_interval=3600.0)
    )
    await writer.start()
    times: dict[str, list[float]] = {"encode": [], "spool": [], "plan": [], "write": [], "all": []}

    async def encode(records: list[Any]) -> list[bytes]:
        return [line for line in map(encode_line, records) if isinstance(line, bytes)]

    async def write_spool(lines: list[bytes]) -> None:
        segment = await asyncio.to_thread(spool.write_encoded, lines, [])
        await asyncio.to_thread(spool.delete, segment)

    async def apply(plan: Any) -> None:
        async with engine.begin() as connection:
            await batch.apply(connection, plan)

    async def whole(records: list[Any]) -> None:
        for record in records:
            writer.submit(record)
        await writer.flush()

    try:
        for start in range(0, fill, 1000):
            await whole(gateway_records(min(1000, fill - start)))
        for round_ in range(rounds + 3):
            records = gateway_records(n)
            spent: dict[str, float] = {}
            started = time.process_time()
            lines = await encode(records)
            spent["encode"] = time.process_time() - started
            spent["spool"] = await _cpu(lambda: write_spool(lines))  # noqa: B023
            started = time.process_time()
            plan = await batch.plan(engine.dialect, records)
            spent["plan"] = time.process_time() - started
            spent["write"] = await _cpu(lambda: apply(plan))  # noqa: B023
            spent["all"] = await _cpu(lambda: whole(gateway_records(n)))
            if round_ >= 3:  # three warm-up rounds
                for name, seconds in spent.items():
                    times[name].append(seconds / n * 1e6)
    finally:
        await writer.close()
        await engine.dispose()
    return {
        name: {"median": round(statistics.median(v), 1), "best": round(min(v), 1)}
        for name, v in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", help="import the gateway from this checkout")
    parser.add_argument("-n", type=int, default=200, help="rows per flush")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--fill", type=int, default=20_000, help="rows stored before")
    args = parser.parse_args()
    use_checkout(args.src)
    import gateway

    with tempfile.TemporaryDirectory(prefix="ledger-parts-") as tmp:
        result = asyncio.run(_run(Path(tmp), args.n, args.rounds, args.fill))
    print(json.dumps({"gateway": gateway.__file__, "n": args.n, "us_per_row": result}))


if __name__ == "__main__":
    main()
