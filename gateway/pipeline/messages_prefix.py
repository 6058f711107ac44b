"""The prefix check on a Messages request: observe and strict, on Anthropic's layout.

The checker reads a chat-shaped body (tools, then system messages, then the turns): the
Messages body is shown to it in that shape, `system` as the leading system message, the
tools and turns as they are (content blocks and `cache_control` markers included). Only
the check reads this view; nothing of it is sent. Fingerprints, volatile content, the
expected cached tokens, the `X-Farebox-Prefix` headers and the verdict after the reply are
the chat path's. Of a route's `prefix:` actions, `strict` applies; `normalize`,
`sticky_cache_key` and `anthropic_cache_control` rewrite a chat body and are not applied
here (a Messages client places its own breakpoints).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.pipeline.messages_request import MessagesContext
from gateway.pipeline.offload import sized
from gateway.pipeline.prefix import PrefixOutcome, history_keys, prefix_headers
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.cacheability import uncacheable
from gateway.prefix.checker import PrefixChecker
from gateway.prefix.record import PrefixRecord
from gateway.prefix.strict import strict_error_message, strict_violations
from gateway.state import SharedState


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages body in the chat layout the checker reads (never sent anywhere)."""
    view = {k: v for k, v in body.items() if k not in ("system", "messages")}
    messages = body.get("messages")
    turns = list(messages) if isinstance(messages, list) else []
    system = body.get("system")
    if system:
        turns.insert(0, {"role": "system", "content": system})
    view["messages"] = turns
    return view


async def check_messages_prefix(
    ctx: MessagesContext, checker: PrefixChecker, state: SharedState, rule: CacheRule
) -> PrefixOutcome:
    """Check the prompt the upstream will receive; refuse it where the route is strict."""
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)
    return await sized(len(ctx.raw_body), _check, ctx, checker, rule, raw_history, keys)


def _check(
    ctx: MessagesContext,
    checker: PrefixChecker,
    rule: CacheRule,
    raw_history: list[dict[str, Any]],
    keys: list[str],
) -> PrefixOutcome:
    assert ctx.route is not None
    started = time.perf_counter()
    history = [PrefixRecord.from_dict(item) for item in raw_history]
    check = checker.check(chat_view(ctx.forwarded_body()), rule, history)
    check_seconds = time.perf_counter() - started
    if "strict" in ctx.route.prefix:
        violations = strict_violations(check.findings, check.divergence)
        if violations:
            raise InvalidRequestError(strict_error_message(violations), code="volatile_prefix")
    blocked = uncacheable(check.request, rule)
    ctx.response_headers.update(prefix_headers(check, blocked))
    return PrefixOutcome(check, rule.family, keys, check_seconds, uncacheable=blocked)
