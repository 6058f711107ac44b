"""`PendingPrefix`: a deferred prefix check runs once, and its error is raised, not lost."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway.pipeline.context import RequestContext
from gateway.pipeline.prefix import PrefixOutcome
from gateway.pipeline.prefix_pending import PendingPrefix


class Ctx:
    prefix: object = None


def _pending(check: Any) -> tuple[Ctx, PendingPrefix]:
    ctx = Ctx()
    return ctx, PendingPrefix(cast(RequestContext, ctx), check)


def test_the_check_runs_once_whoever_asks_first() -> None:
    outcome = cast(PrefixOutcome, object())
    calls: list[int] = []

    def check() -> PrefixOutcome:
        calls.append(1)
        return outcome

    ctx, pending = _pending(check)
    assert pending.waiting and ctx.prefix is None
    pending.run_now()  # the transport's hook
    pending.settle()  # a reader after it
    pending.run_now()
    assert calls == [1] and ctx.prefix is outcome and not pending.waiting


def test_the_hook_keeps_the_error_and_the_pipeline_raises_it_once() -> None:
    def check() -> PrefixOutcome:
        raise ValueError("broken")

    ctx, pending = _pending(check)
    pending.run_now()  # never raises: the connection stays as it is
    with pytest.raises(ValueError, match="broken"):
        pending.settle()
    pending.settle()  # raised once, where the pipeline settled
    assert ctx.prefix is None


def test_a_check_already_run_leaves_nothing_pending() -> None:
    ctx, pending = _pending(None)
    pending.settle()
    assert not pending.waiting and ctx.prefix is None
