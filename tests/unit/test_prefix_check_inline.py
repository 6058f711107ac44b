"""A parsed prompt of up to `INLINE_BYTES` and `INLINE_CHECK_MESSAGES` messages, with no
task to reuse, is checked on the loop (no thread hop); larger ones still leave it. The
outcome is the same either way."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from gateway.config import ModelRoute
from gateway.pipeline.context import RequestContext, TaskRef
from gateway.pipeline.offload import OFF_LOOP_BYTES
from gateway.pipeline.prefix import INLINE_CHECK_MESSAGES, check_prefix
from gateway.prefix import PrefixChecker, rule_for
from gateway.state.memory import MemoryState


class _Watched(PrefixChecker):
    """A real checker that notes the thread each check runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def check(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.get_ident())
        return super().check(*args, **kwargs)


def _ctx(count: int, size: int, mark: int) -> RequestContext:
    text = "x" * (size // count)
    messages = [{"role": "system", "content": f"prompt {mark}"}]
    messages += [{"role": "user", "content": f"{i} {text}"} for i in range(count)]
    raw = orjson.dumps({"model": "m", "messages": messages})
    ctx = RequestContext(raw_body=raw, headers={}, body=orjson.loads(raw), alias="m")
    ctx.route = ModelRoute(model="m", base_url="http://127.0.0.1:1/v1")
    ctx.task = TaskRef(task_id=f"fresh-{mark}")  # implicit: a task of its own
    return ctx


async def _outcome(ctx: RequestContext, parsed: bool) -> tuple[Any, bool]:
    checker = _Watched()
    outcome = await check_prefix(ctx, checker, MemoryState(), rule_for("openai"), parsed=parsed)
    return outcome, checker.threads == [threading.get_ident()]


async def test_a_fresh_megabyte_prompt_is_checked_on_the_loop_alike() -> None:
    inline, on_loop = await _outcome(_ctx(1200, 1_000_000, 1), parsed=True)
    assert len(_ctx(1200, 1_000_000, 1).raw_body) > OFF_LOOP_BYTES and on_loop
    beside, off_loop = await _outcome(_ctx(1200, 1_000_000, 1), parsed=False)
    assert not off_loop  # a body not parsed from its bytes keeps the thread
    assert inline.check.record.fingerprints == beside.check.record.fingerprints
    assert inline.check.record.segment_digests == beside.check.record.segment_digests


async def test_more_messages_or_bytes_still_leave_the_loop() -> None:
    _, on_loop = await _outcome(_ctx(INLINE_CHECK_MESSAGES + 1, 600_000, 2), parsed=True)
    assert not on_loop
    _, on_loop = await _outcome(_ctx(100, 2_000_000, 3), parsed=True)
    assert not on_loop
