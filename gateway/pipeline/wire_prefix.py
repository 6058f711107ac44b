"""The prefix check of the Messages and Responses wires: one code path for both.

Each wire shows the checker a chat-shaped body, tools, then system, then the turns. Two
cases:

* Translated to chat completions (a Messages request to an OpenAI-wire route, a Responses
  request to a route without `wire: responses`): the body the stages see is the chat
  body the upstream receives (Messages), or maps onto it field for field (Responses,
  `translated_fields`). So the check is the chat path's own (`pipeline.prefix`), every
  action of the route's `prefix:` included: `normalize` (tools in canonical order and
  key order), `sticky_cache_key` (`prompt_cache_key` on OpenAI-family routes),
  `anthropic_cache_control` (breakpoints, on an Anthropic-family route reached through
  litellm) and `strict`.
* Forwarded in the client's own wire (Messages to Anthropic, `wire: responses`): the
  client's bytes go upstream with only the policy's edits, so nothing here rewrites
  them; `observe` and `strict` apply, on the `view` the wire gives the checker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import on_loop, sized
from gateway.pipeline.prefix import (
    PrefixOutcome,
    check_prefix,
    history_keys,
    prefix_headers,
    records_of,
)
from gateway.pipeline.prefix_pending import OBSERVING, PendingPrefix, start_prefix_check
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.cacheability import uncacheable
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.strict import strict_error_message, strict_violations
from gateway.state import SharedState

View = Callable[[dict[str, Any]], dict[str, Any]]
"""The forwarded body in the chat layout the checker reads (never sent anywhere)."""

REWRITTEN = ("tools", "response_format", "messages", "prompt_cache_key")
"""The chat fields the prefix actions set (`normalize`, breakpoints, `sticky_cache_key`)."""


async def check_wire_prefix(
    ctx: RequestContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    view: View | None,
) -> PrefixOutcome:
    """Check the prompt the upstream will receive; `view` None: the body is chat, act on it."""
    if view is None:
        return await check_prefix(ctx, checker, state, rule)
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)
    return await sized(len(ctx.raw_body), observe_wire, ctx, checker, rule, raw_history, keys, view)


async def start_wire_prefix(
    ctx: RequestContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    view: View | None,
) -> PendingPrefix:
    """`check_wire_prefix`, its CPU part left pending where it changes nothing sent
    (`prefix_pending`: it runs while the upstream reads the request). `view` None, the body
    is the chat body sent: chat's rule (`start_prefix_check`). Forwarded in the client's own
    wire: on a route that only observes, a body small enough for the loop. Else, strict or
    megabytes, it runs now, as before."""
    if view is None:
        return await start_prefix_check(ctx, checker, state, rule, parsed=False)
    route = ctx.route
    if route is None or not OBSERVING.issuperset(route.prefix) or not on_loop(len(ctx.raw_body)):
        ctx.prefix = await check_wire_prefix(ctx, checker, state, rule, view)
        return PendingPrefix(ctx, None)
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)  # a shared store's round trip: before the call
    return PendingPrefix(ctx, partial(observe_wire, ctx, checker, rule, raw_history, keys, view))


def translated_fields(ctx: RequestContext) -> dict[str, Any]:
    """The chat fields the actions rewrote, to lay over a chat body built from another wire.

    The client's own `prompt_cache_key`, when the stages' view holds one, travels too.
    """
    body = ctx.forwarded_body()
    fields = {name: body[name] for name in REWRITTEN if name in ctx.edits.set_fields}
    if isinstance(body.get("prompt_cache_key"), str):
        fields["prompt_cache_key"] = body["prompt_cache_key"]
    return fields


def observe_wire(
    ctx: RequestContext,
    checker: PrefixChecker,
    rule: CacheRule,
    raw_history: list[dict[str, Any]],
    keys: list[str],
    view: View,
) -> PrefixOutcome:
    """The check of a forwarded body, shown to the checker through `view`, against the
    history already read; `strict` refuses it here."""
    assert ctx.route is not None
    started = time.perf_counter()
    history = records_of(raw_history)  # the stored dicts' records, rebuilt once each
    check = checker.check(view(ctx.forwarded_body()), rule, history)
    check_seconds = time.perf_counter() - started
    if "strict" in ctx.route.prefix:
        violations = strict_violations(check.findings, check.divergence)
        if violations:
            raise InvalidRequestError(strict_error_message(violations), code="volatile_prefix")
    blocked = uncacheable(check.request, rule)
    ctx.response_headers.update(prefix_headers(check, blocked))
    return PrefixOutcome(check, rule.family, keys, check_seconds, uncacheable=blocked)
