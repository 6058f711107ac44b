"""The prefix check of a chat request, run while the upstream computes where it may.

On a route with no prefix action but observing, the check changes nothing that is sent:
its outcome only feeds the reply's headers, the quota's estimate, the pricing and the
ledger row. So its CPU part (`prefix._check`, ~0.1-0.2 ms of a small request at c=1) may
run after the upstream request is written: h1 calls `PendingPrefix.run_now` between the
write and the wait for the reply (`UpstreamCall.while_waiting`), and the pipeline settles
it itself at each point where it did not run (after the call returns or fails, before a
limit's hold, on an error path). The history read stays before the call.

A task's step is deferred too: its check reuses the segments (and the parse, the parsed
messages) of the task's previous request only where this body repeats its bytes, so what
it finds does not depend on which step's check ran first; a 1 MB agent step's ~0.7 ms
check then runs while the upstream reads and parses the megabyte. A check that would run
in a worker thread (megabytes not seen before) still runs there, before the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import OFF_LOOP_BYTES, sized
from gateway.pipeline.prefix import (
    PrefixOutcome,
    _check,
    check_prefix,
    check_weight,
    history_keys,
)
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.message_reuse import MIN_BYTES
from gateway.state import SharedState
from gateway.upstream.base import HANDS_OVER, UpstreamCall

T = TypeVar("T")
OBSERVING = frozenset({"observe"})
"""Route actions that change nothing sent: a check with only these may wait."""


class PendingPrefix:
    """A check that sets `ctx.prefix` once, on first need; its error is kept, not lost."""

    __slots__ = ("_check", "_ctx", "_error")

    def __init__(self, ctx: RequestContext, check: Callable[[], PrefixOutcome] | None) -> None:
        self._ctx = ctx
        self._check = check
        self._error: Exception | None = None

    def run_now(self) -> None:
        """Run the check if it has not run; never raises (h1 calls it between the write and
        the wait: an error there must not close the connection). A second call does nothing."""
        check = self._check
        if check is None:
            return
        self._check = None
        try:
            self._ctx.prefix = check()
        except Exception as error:  # raised where the pipeline settles (`settle`)
            self._error = error

    def while_waiting_for(self, call: UpstreamCall, adapter: object) -> None:
        """Leave the check to the transport, between the request's write and the reply's
        wait, where the adapter hands it over (`HANDS_OVER`: OpenAI-compatible, Anthropic's
        Messages); else run it now."""
        if self._check is None:
            return
        if getattr(adapter, HANDS_OVER, False):
            call.while_waiting = self.run_now
        else:
            self.settle()

    def settle(self) -> None:
        """`ctx.prefix` set, or the check's error raised (once: it is not kept after)."""
        self.run_now()
        error, self._error = self._error, None
        if error is not None:
            raise error

    @property
    def waiting(self) -> bool:
        """Whether the check has yet to run (an upstream call may run it meanwhile)."""
        return self._check is not None


async def start_prefix_check(
    ctx: RequestContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    *,
    parsed: bool = True,
) -> PendingPrefix:
    """`check_prefix(..., parsed=parsed)`, its CPU part left pending where it may run in the
    upstream's shadow (`can_wait`); else run now, as before. `parsed`: the body checked is
    the client's own, as parsed (chat), not one translated from another wire (Messages)."""
    if not can_wait(ctx):
        ctx.prefix = await check_prefix(ctx, checker, state, rule, parsed=parsed)
        return PendingPrefix(ctx, None)
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)  # a Redis round trip: before the call
    check = partial(_check, ctx, checker, rule, raw_history, keys, parsed)
    if len(ctx.raw_body) >= MIN_BYTES:  # small bodies: on the loop whatever the task
        size = check_weight(ctx, checker, keys, parsed)
        if size is not None and size > OFF_LOOP_BYTES:  # beside the loop, as `check_prefix`
            ctx.prefix = await sized(size, check)
            return PendingPrefix(ctx, None)
    return PendingPrefix(ctx, check)


async def sent_with(
    pending: PendingPrefix,
    call: UpstreamCall,
    adapter: object,
    send: Callable[[UpstreamCall], Awaitable[T]],
) -> T:
    """`send(call)` with the pending check left to run in the upstream's shadow; a failed
    or cut call runs it all the same (the failure's row and a retry have its outcome)."""
    pending.while_waiting_for(call, adapter)
    try:
        return await send(call)
    except BaseException:
        pending.run_now()
        raise


def can_wait(ctx: RequestContext) -> bool:
    """Whether the check may run after the request is written: a route that only observes,
    not litellm's (it may be handed the parsed messages the check keeps or copies)."""
    route = ctx.route
    return (
        route is not None
        and not route.via_litellm
        and OBSERVING.issuperset(route.prefix)
        and ctx.task is not None
    )
