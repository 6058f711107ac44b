"""The prefix check on a Responses request: observe and strict, on the Responses layout.

The checker reads the request in chat terms (`responses_request.policy_view`): tools,
then `instructions` as the leading system message, then the input items in order, the
earlier turns of a `previous_response_id` chain included (the gateway expands the chain
itself, so what is checked is what the upstream receives). History is kept under the
task, which a chain carries along, so a changed tool or instruction between two calls
of one chain is a break. `strict` applies; the actions that rewrite a chat body
(`normalize`, `sticky_cache_key`, `anthropic_cache_control`) are not applied here.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.pipeline.offload import sized
from gateway.pipeline.prefix import PrefixOutcome, history_keys, prefix_headers
from gateway.pipeline.responses_request import ResponsesContext
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.cacheability import uncacheable
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.record import PrefixRecord
from gateway.prefix.strict import strict_error_message, strict_violations
from gateway.state import SharedState


async def check_responses_prefix(
    ctx: ResponsesContext, checker: PrefixChecker, state: SharedState, rule: CacheRule
) -> PrefixOutcome:
    """Check the prompt the upstream will receive; refuse it where the route is strict."""
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)
    return await sized(len(ctx.raw_body), _check, ctx, checker, rule, raw_history, keys)


def _check(
    ctx: ResponsesContext,
    checker: PrefixChecker,
    rule: CacheRule,
    raw_history: list[dict[str, Any]],
    keys: list[str],
) -> PrefixOutcome:
    assert ctx.route is not None
    started = time.perf_counter()
    history = [PrefixRecord.from_dict(item) for item in raw_history]
    check = checker.check(ctx.forwarded_body(), rule, history)
    check_seconds = time.perf_counter() - started
    if "strict" in ctx.route.prefix:
        violations = strict_violations(check.findings, check.divergence)
        if violations:
            raise InvalidRequestError(strict_error_message(violations), code="volatile_prefix")
    blocked = uncacheable(check.request, rule)
    ctx.response_headers.update(prefix_headers(check, blocked))
    return PrefixOutcome(check, rule.family, keys, check_seconds, uncacheable=blocked)
