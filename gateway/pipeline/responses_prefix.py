"""The prefix check on a Responses request, on the Responses layout (`wire_prefix`).

The checker reads the request in chat terms (`responses_request.policy_view`): tools,
then `instructions` as the leading system message, then the input items in order, the
earlier turns of a `previous_response_id` chain included (the gateway expands the chain
itself, so what is checked is what the upstream receives). History is kept under the
task, which a chain carries along, so a changed tool or instruction between two calls
of one chain is a break.

Translated to chat completions, that view is the chat body sent (`chat_body` builds the
same messages and tools from the same items), so every action of the route applies to it
(`normalize`, `sticky_cache_key`, `anthropic_cache_control` on a litellm Anthropic route,
`strict`) and `wire_prefix.translated_fields` lays what they rewrote over the chat body.
To a `wire: responses` route the client's bytes are sent: `observe` and `strict` apply.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gateway.pipeline.prefix import PrefixOutcome
from gateway.pipeline.prefix_pending import PendingPrefix
from gateway.pipeline.responses_request import ResponsesContext
from gateway.pipeline.wire_prefix import View, check_wire_prefix, start_wire_prefix
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.checker import PrefixChecker
from gateway.state import SharedState


def _as_viewed(body: dict[str, Any]) -> dict[str, Any]:
    return body  # `ctx.body` is already the chat-shaped view


def check_responses_prefix(
    ctx: ResponsesContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    native: bool,
) -> Awaitable[PrefixOutcome]:
    """Check the prompt the upstream will receive; refuse it where the route is strict.

    The check itself, to await: no coroutine of its own around it."""
    return check_wire_prefix(ctx, checker, state, rule, _view(ctx, native))


def start_responses_prefix(
    ctx: ResponsesContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    native: bool,
) -> Awaitable[PendingPrefix]:
    """`check_responses_prefix`, its CPU part left pending where it changes nothing sent
    (`wire_prefix.start_wire_prefix`): the check itself, to await."""
    return start_wire_prefix(ctx, checker, state, rule, _view(ctx, native))


def _view(ctx: ResponsesContext, native: bool) -> View | None:
    """The checker's view of a body forwarded as the client wrote it; None: translated,
    the body the stages see is the chat body sent."""
    if native:
        return _as_viewed
    key = ctx.native.get("prompt_cache_key")
    if isinstance(key, str) and key:  # the client's own key wins over a sticky one
        ctx.body["prompt_cache_key"] = key
    return None
