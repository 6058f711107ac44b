"""The prefix check on a Messages request, on Anthropic's layout (`wire_prefix`).

The checker reads a chat-shaped body (tools, then system messages, then the turns): the
Messages body is shown to it in that shape, `system` as the leading system message, the
tools and turns as they are (content blocks and `cache_control` markers included).
Fingerprints, volatile content, the expected cached tokens, the `X-Farebox-Prefix`
headers and the verdict after the reply are the chat path's.

Forwarded to Anthropic, the client's bytes are sent: `observe` and `strict` apply, the
body-rewriting actions do not (a Messages client places its own breakpoints). Translated
to an OpenAI-wire route, the body is the chat body sent, and every action applies to it
(`normalize`, `sticky_cache_key`, `strict`), as on /v1/chat/completions.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gateway.pipeline.messages_request import MessagesContext
from gateway.pipeline.prefix import PrefixOutcome
from gateway.pipeline.prefix_pending import PendingPrefix
from gateway.pipeline.wire_prefix import check_wire_prefix, start_wire_prefix
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.checker import PrefixChecker
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


def check_messages_prefix(
    ctx: MessagesContext, checker: PrefixChecker, state: SharedState, rule: CacheRule
) -> Awaitable[PrefixOutcome]:
    """Check the prompt the upstream will receive; refuse it where the route is strict.

    The check itself, to await: no coroutine of its own around it."""
    view = None if ctx.translated else chat_view  # translated: ctx.body is the chat body
    return check_wire_prefix(ctx, checker, state, rule, view)


def start_messages_prefix(
    ctx: MessagesContext, checker: PrefixChecker, state: SharedState, rule: CacheRule
) -> Awaitable[PendingPrefix]:
    """`check_messages_prefix`, its CPU part left pending where it changes nothing sent
    (`wire_prefix.start_wire_prefix`): the check itself, to await."""
    view = None if ctx.translated else chat_view  # translated: ctx.body is the chat body
    return start_wire_prefix(ctx, checker, state, rule, view)
