"""The pipeline's own stages in two versions, timed in one process, interleaved.

Run: `python bench/pipeline_ab.py --base CHECKOUT [--src CHECKOUT] [-n 2000] [--rounds 15]
[--config hot] [--stream]`.

On a shared, loaded box two benchmark processes run minutes apart see different
neighbours; here both versions run in one process, round after round, so the load hits
them alike. The app (`--src`'s checkout, else the installed gateway) serves 50 of
bench/pipeline_inproc.py's requests to the perf floor's mock, as
`bench/pipeline_parts.py --stages` does; the last request's context, meter and reply are
kept. `--base` names another checkout whose copies of the stage modules (`MODULES`:
record, respond, identify and policy of gateway/pipeline, gateway/pricing/cost.py and
tiers.py, gateway/usage.py, gateway/compact_patch.py, gateway/policy/steps.py) are
loaded beside the app's under other names (they import everything else from the app's
checkout). Each stage is then
called `n` times with the app's function and `n` times with the base's (each first in
every other round), `--rounds` times; the minimum per call of each is printed (µs of
process CPU), with their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pipeline_inproc as inproc  # bench/ is the script folder: sys.path[0]
from checkout import use_checkout

MODULES = (
    "gateway.pipeline.record",
    "gateway.pipeline.respond",
    "gateway.pipeline.identify",
    "gateway.pipeline.policy",
    "gateway.pricing.cost",
    "gateway.pricing.tiers",
    "gateway.usage",
    "gateway.compact_patch",
    "gateway.policy.steps",
)


def _shadow(base: Path, name: str) -> ModuleType:
    """The base checkout's copy of module `name`, loaded as `<name>_base`."""
    path = base / (name.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(f"{name}_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _per_call(call: Callable[[], Any], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - start) / n


async def _context(port: int, config_name: str, stream: bool) -> dict[str, Any]:
    async with inproc.last_request(port, config_name, stream, "farebox-ab-") as (_, _, kept):
        return kept


def _stages(kept: dict[str, Any], base: dict[str, ModuleType]) -> dict[str, tuple[Any, Any]]:
    """Each stage as (this checkout's call, the base's call)."""
    import gateway.compact_patch as compact_patch
    import gateway.pipeline.identify as identify
    import gateway.pipeline.policy as policy
    import gateway.pipeline.record as record
    import gateway.pipeline.respond as respond
    import gateway.policy.steps as steps
    import gateway.pricing.cost as cost
    import gateway.pricing.tiers as tiers
    import gateway.usage as usage

    ctx, services = kept["ctx"], kept["services"]
    # A stream whose client asked for no usage chunk has no reply of its own to patch.
    payload, raw = kept.get("payload") or {"usage": {}}, kept.get("raw", b"{}")
    b_record, b_respond = base["gateway.pipeline.record"], base["gateway.pipeline.respond"]
    b_identify, b_cost = base["gateway.pipeline.identify"], base["gateway.pricing.cost"]
    b_tiers, b_usage = base["gateway.pricing.tiers"], base["gateway.usage"]
    b_policy, b_patch = base["gateway.pipeline.policy"], base["gateway.compact_patch"]
    b_steps = base["gateway.policy.steps"]
    edit = {"usage": {**payload["usage"], "cost": respond.cost_object(ctx)}}
    body, edits = ctx.raw_body, ctx.edits
    price = services.prices.price(services.config.price_key(ctx.alias))
    reported, tier = payload["usage"], ctx.tier_served or "standard"
    booked, b_booked = record.BookedCost.of(ctx.cost), b_record.BookedCost.of(ctx.cost)
    metrics = services.metrics
    planned = ctx.tier_planned or ctx.tier_requested

    def with_cost(module: ModuleType) -> Callable[[], Any]:
        def call() -> Any:
            ctx.booked = None  # priced once per request: the cost rendered afresh
            return module.with_cost(payload, raw, ctx)

        return call

    def headers(module: ModuleType) -> Callable[[], Any]:
        def call() -> Any:
            ctx.booked = None
            return module.cost_headers(ctx)

        return call

    return {
        "usage_from_openai": (
            lambda: usage.usage_from_openai(reported),
            lambda: b_usage.usage_from_openai(reported),
        ),
        "settle_served": (
            lambda: tiers.settle_served(planned, None),
            lambda: b_tiers.settle_served(planned, None),
        ),
        "cost_of": (
            lambda: cost.cost_of(price, ctx.usage, tier),
            lambda: b_cost.cost_of(price, ctx.usage, tier),
        ),
        "booked_cost_of": (
            lambda: record.BookedCost.of(ctx.cost),
            lambda: b_record.BookedCost.of(ctx.cost),
        ),
        "ledger_record": (
            lambda: record.ledger_record(ctx, booked),
            lambda: b_record.ledger_record(ctx, b_booked),
        ),
        "observe_metrics": (
            lambda: record.observe_metrics(metrics, ctx, booked),
            lambda: b_record.observe_metrics(metrics, ctx, b_booked),
        ),
        "with_cost": (with_cost(respond), with_cost(b_respond)),
        "cost_headers": (headers(respond), headers(b_respond)),
        "patch_reply": (
            lambda: compact_patch.patch_rendered(raw, payload, edit),
            lambda: b_patch.patch_rendered(raw, payload, edit),
        ),
        "patch_request": (
            lambda: compact_patch.patch_rendered(body, ctx.body, edits.set_fields, edits.remove),
            lambda: b_patch.patch_rendered(body, ctx.body, edits.set_fields, edits.remove),
        ),
        "facts_of": (
            lambda: policy.facts_of(ctx, ctx.alias),
            lambda: b_policy.facts_of(ctx, ctx.alias),
        ),
        "infer_step_kind": (
            lambda: steps.infer_step_kind(ctx.body),
            lambda: b_steps.infer_step_kind(ctx.body),
        ),
        "identity_of": (
            lambda: identify.identity_of(ctx.principal, ctx.headers),
            lambda: b_identify.identity_of(ctx.principal, ctx.headers),
        ),
    }


_OF_THE_REPLY = ("usage_from_openai", "with_cost", "patch_reply")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the other checkout")
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--config", choices=("plain", "hot"), default="hot")
    parser.add_argument("--stream", action="store_true", help="a streamed request's context")
    parser.add_argument("--src", help="import this checkout's gateway (default: installed)")
    args = parser.parse_args()
    use_checkout(args.src)
    floor = Path(
        os.environ.get("FAREBOX_PERF_FLOOR") or inproc.ROOT.parent / "shared" / "perf-floor"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    mock_cmd = [sys.executable, str(floor / "mock_upstream.py"), "--port", str(port)]
    mock = subprocess.Popen(["taskset", "-c", "0", *mock_cmd], stdout=subprocess.DEVNULL)
    try:
        os.sched_setaffinity(0, {1})
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        kept = asyncio.run(_context(port, args.config, args.stream))
    finally:
        mock.terminate()
        mock.wait(10)
    base = {name: _shadow(Path(args.base), name) for name in MODULES}
    result: dict[str, dict[str, float]] = {}
    stages = _stages(kept, base)
    if "payload" not in kept:  # no reply was patched: nothing to read or patch again
        stages = {k: v for k, v in stages.items() if k not in _OF_THE_REPLY}
    for name, (this, other) in stages.items():
        mine, theirs = float("inf"), float("inf")
        for turn in range(args.rounds):  # each version first in every other round
            if turn % 2:
                theirs = min(theirs, _per_call(other, args.n))
            mine = min(mine, _per_call(this, args.n))
            if not turn % 2:
                theirs = min(theirs, _per_call(other, args.n))
        result[name] = {
            "this": round(mine * 1e6, 2),
            "base": round(theirs * 1e6, 2),
            "ratio": round(mine / theirs, 3),
        }
    print(json.dumps({"base": args.base, "us_per_call": result}, indent=1))


if __name__ == "__main__":
    main()
