"""Stage 4: check prompt-prefix stability before the call, judge it after the reply.

Before: fingerprint the prompt as the upstream renders it, compare it with this caller's
and this task's recent requests (shared by all replicas through the state backend), find
volatile content in the cacheable part, and apply the route's actions (normalize, sticky
cache key, Anthropic breakpoints, strict). After: compare the expected cached tokens with
what the upstream reported, and remember this prompt for the next request.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import INLINE_BYTES, OFF_LOOP_BYTES, RELEASE_BYTES, on_loop, sized
from gateway.pipeline.parse import keep_messages, message_key
from gateway.prefix import cache_rules
from gateway.prefix.actions import normalize, sticky_cache_key
from gateway.prefix.breakpoints import anthropic_cache_breakpoints, apply_breakpoints
from gateway.prefix.cache_rules import CacheRule
from gateway.prefix.cacheability import Uncacheable, uncacheable
from gateway.prefix.checker import PrefixCheck, PrefixChecker
from gateway.prefix.record import PrefixRecord, with_reported_tokens
from gateway.prefix.strict import strict_error_message, strict_violations
from gateway.prefix.verdict import CacheStatus, Verdict, verdict
from gateway.state import SharedState

# How long a provider keeps a prefix cached, so history expires with the cache itself.
CACHE_LIFETIME_S = {"openai": 600.0, "anthropic": 300.0, "vllm": 3600.0}
HISTORY_PER_KEY = 4
MAX_REMEMBERED_SEGMENTS = 8192
# What one segment weighs against `OFF_LOOP_BYTES` when its record is written: a record of
# over ~4,000 segments (~0.25 µs each to chain and list: ~1 ms) is made ready for the
# store in a worker thread; a 1 MB agent step's 1,245 stay on the loop (a hop cost more).
CHAIN_BYTES_PER_SEGMENT = 64
# Rebuilt history records kept by the identity of their stored dict (see `_record_of`):
# up to PARSED_KEEP records of up to PARSED_SMALL segments, and records of up to
# PARSED_MAX_SEGMENTS, PARSED_LARGE_SEGMENTS of them in all (a kept record keeps its dict:
# ~400 bytes a segment, so ~6.5 MB at most; twelve 1 MB agent steps' records).
PARSED_KEEP = 1024
PARSED_SMALL = 256
PARSED_LARGE_SEGMENTS = 16 * 1024
PARSED_MAX_SEGMENTS = PARSED_LARGE_SEGMENTS // 4
_PARSED_LOCK = threading.Lock()
_PARSED: OrderedDict[int, tuple[dict[str, Any], PrefixRecord]] = OrderedDict()
_PARSED_LARGE: OrderedDict[int, tuple[dict[str, Any], PrefixRecord]] = OrderedDict()
_PARSED_HELD = [0]  # segments of the records in _PARSED_LARGE


@dataclass(slots=True)
class PrefixOutcome:
    """What the check found, carried from before the call to after it."""

    check: PrefixCheck
    family: str
    keys: list[str]
    check_seconds: float = 0.0  # CPU time on the request path, without the store's I/O
    verdict: Verdict | None = None
    uncacheable: Uncacheable | None = None  # the provider can cache nothing of it as sent

    @property
    def lost_usd(self) -> Decimal | None:
        """What the cache miss cost against the forecast; None before the verdict."""
        return self.verdict.money_lost if self.verdict is not None else None


def cache_family(wire_family: str) -> str:
    """The prompt-cache family of a wire dialect (SGLang caches like vLLM)."""
    return _CACHE_FAMILIES.get(wire_family, "openai")


_CACHE_FAMILIES = {"anthropic": "anthropic", "vllm": "vllm", "sglang": "vllm"}


def rule_for_route(ctx: RequestContext, model_info: dict[str, Any]) -> CacheRule:
    """The cache rule of the route, with the model's own minimum from its price-map entry.

    Kept per family and entry: `model_info` is `capabilities`' dict, the same object for
    every request of a price book's model and never changed (building the frozen rule was
    ~4-6 µs a request at concurrency 1). The entry holds the dict, so no id is reused while
    it lives.
    """
    assert ctx.route is not None
    family = cache_family(ctx.route.wire_family)
    key = (family, id(model_info))
    kept = _RULES.get(key)
    if kept is not None and kept[0] is model_info:
        return kept[1]
    rule = cache_rules.rule_from_model_info(family, model_info)
    if len(_RULES) >= MAX_RULES:  # price books replaced by many reloads
        _RULES.clear()
    _RULES[key] = (model_info, rule)
    return rule


_RULES: dict[tuple[str, int], tuple[dict[str, Any], CacheRule]] = {}
MAX_RULES = 1024


def history_keys(ctx: RequestContext) -> list[str]:
    """Where this request's prefix history lives: its task, then its caller and model."""
    assert ctx.task is not None
    keys = [f"task:{ctx.task.task_id}"] if not ctx.task.implicit else []
    return [*keys, f"caller:{ctx.identity.caller or 'anonymous'}:{ctx.alias}"]


def forget_parsed_for_litellm(ctx: RequestContext, checker: PrefixChecker) -> None:
    """A fallback attempt routed through litellm hands it the parsed messages, which it may
    change: the task's next step must parse its own, not take those (`check_prefix` keeps
    them only for a route that is not litellm's; a fallback replans after it ran)."""
    route, task = ctx.route, ctx.task
    if route is not None and route.via_litellm and task is not None and not task.implicit:
        checker.reuse.forget_parsed(history_keys(ctx)[0])
    shared = checker.reuse.messages
    if route is not None and route.via_litellm and len(ctx.raw_body) >= shared.min_bytes:
        # its messages may be shared, or kept by the first attempt: this attempt's own
        shared.forget_body(message_key(ctx.headers), ctx.raw_body)
        _own_messages(ctx)


def _keep_or_unshare(ctx: RequestContext, checker: PrefixChecker, keep: bool) -> None:
    """Keep a large body's parsed messages for its caller's next parse (`keep`: unedited,
    no task), or, where litellm is handed them (it may change them), give this request
    its own copies of any it shares (`_parse_sharing`, `_parse_reusing`) instead."""
    assert ctx.route is not None
    shared = checker.reuse.messages
    if ctx.route.via_litellm:
        if shared.release(ctx.raw_body):
            _own_messages(ctx)
        return
    if keep:
        keep_messages(ctx, checker.reuse)
    shared.release(ctx.raw_body)


def _own_messages(ctx: RequestContext) -> None:
    """Give the request copies of its messages, so what litellm changes is its own."""
    messages = ctx.body.get("messages")
    if isinstance(messages, list):
        ctx.body = {**ctx.body, "messages": orjson.loads(orjson.dumps(messages))}
    edited = ctx.edits.set_fields.get("messages")
    if isinstance(edited, list):
        ctx.edits.set_fields["messages"] = orjson.loads(orjson.dumps(edited))


async def check_prefix(
    ctx: RequestContext,
    checker: PrefixChecker,
    state: SharedState,
    rule: CacheRule,
    *,
    parsed: bool = False,
) -> PrefixOutcome:
    """Check the prompt the upstream will receive; apply the route's actions.

    `parsed`: `ctx.body` is `ctx.raw_body` as parsed (chat), not a body translated from
    another wire, so a task's repeated messages can be recognised by their bytes.
    """
    keys = history_keys(ctx)
    raw_history = await state.prefix_history(keys)
    size = check_weight(ctx, checker, keys, parsed)
    if size is None:
        return _check(ctx, checker, rule, raw_history, keys, parsed)
    return await sized(size, _check, ctx, checker, rule, raw_history, keys, parsed)


def check_weight(
    ctx: RequestContext, checker: PrefixChecker, keys: list[str], parsed: bool
) -> int | None:
    """What `_check` of this request weighs for `sized`; None: checked on the loop, whatever
    its size (`_checks_inline`).

    A prompt of megabytes is fingerprinted and scanned beside the loop, not on it; an agent
    step whose history the task's previous request showed weighs its new part.
    """
    size = len(ctx.raw_body)
    if parsed and ctx.task is not None and not ctx.task.implicit:
        return checker.reuse.unseen(keys[0], ctx.raw_body)
    if parsed and size > OFF_LOOP_BYTES and _checks_inline(ctx):
        return None
    return size


INLINE_CHECK_MESSAGES = 2048
"""A parsed prompt of at most this many messages and `INLINE_BYTES` is checked on the loop."""


def _checks_inline(ctx: RequestContext) -> bool:
    """Whether a prompt with nothing to reuse is checked on the loop, not in a thread.

    A 1 MB fresh prompt of 1,245 messages is now checked in ~1.4 ms, about what its parse
    on the loop takes. The check is native code holding the interpreter lock for most of
    that time, so in a worker thread it held up the loop all the same, and the hop cost
    a thread's wake-up, two switches and the loop's wake-up on top.
    """
    messages = ctx.body.get("messages")
    return (
        len(ctx.raw_body) <= INLINE_BYTES
        and type(messages) is list
        and len(messages) <= INLINE_CHECK_MESSAGES
    )


def _check(
    ctx: RequestContext,
    checker: PrefixChecker,
    rule: CacheRule,
    raw_history: list[dict[str, Any]],
    keys: list[str],
    parsed: bool = False,
) -> PrefixOutcome:
    assert ctx.route is not None
    actions = set(ctx.route.prefix)
    if "normalize" in actions:
        _apply(ctx, normalize(ctx.forwarded_body()))
    started = time.perf_counter()
    history = records_of(raw_history)
    body = ctx.forwarded_body()
    # The messages as parsed from the client's bytes: their segments' bytes are taken from
    # those where canonical; a task's next step reuses its repeated messages' segments.
    explicit = ctx.task is not None and not ctx.task.implicit
    unedited = parsed and body.get("messages") is ctx.body.get("messages")
    reuse_key = keys[0] if explicit and unedited else None
    # What the parse validated, for the next step's (only what `release` leaves whole); the
    # parsed messages too, but not where litellm is handed them: it may change them.
    shared = ctx.request is not None and len(ctx.raw_body) <= RELEASE_BYTES
    validated = ctx.request.messages if shared and ctx.request is not None else None
    check = checker.check(
        body,
        rule,
        history,
        raw=ctx.raw_body if unedited else None,
        reuse_key=reuse_key,
        validated=validated,
        keep_parsed=validated is not None and not ctx.route.via_litellm,
    )
    if len(ctx.raw_body) >= checker.reuse.messages.min_bytes:  # else nothing is shared
        _keep_or_unshare(ctx, checker, keep=unedited and not explicit)
    check_seconds = time.perf_counter() - started
    if "strict" in actions:
        violations = strict_violations(check.findings, check.divergence)
        if violations:
            raise InvalidRequestError(strict_error_message(violations), code="volatile_prefix")
    if "sticky_cache_key" in actions and rule.family == "openai" and ctx.identity.caller:
        key = sticky_cache_key(ctx.body, ctx.identity.caller, check.record.head_fingerprint)
        if ctx.body.get("prompt_cache_key") != key:
            ctx.edits.set_fields["prompt_cache_key"] = key
    placed = False
    if "anthropic_cache_control" in actions and rule.family == "anthropic":
        placed = _place_breakpoints(ctx, check, rule)
    blocked = None if placed else uncacheable(check.request, rule)
    ctx.response_headers.update(prefix_headers(check, blocked))
    return PrefixOutcome(check, rule.family, keys, check_seconds, uncacheable=blocked)


def _record_of(item: dict[str, Any]) -> PrefixRecord:
    """The record of a stored history dict, rebuilt once per dict.

    The in-process state hands back the very dicts it stores, request after request, and
    they are not changed once stored; rebuilding their tuples each time was ~4% of a small
    request's CPU, and ~0.5 ms of a 1 MB agent step's (four records of 1,245 segments).
    Keyed by identity, the cache holds the dict itself, so an id is never reused while its
    entry lives; dicts fresh from Redis simply miss and age out. Small records are kept by
    count, large ones by their segments (`PARSED_LARGE_SEGMENTS`): an entry keeps its dict
    alive after the store dropped it, and a 1 MB step's weighs ~0.5 MB.
    """
    with _PARSED_LOCK:  # a large request checks in a worker thread
        for kept in (_PARSED, _PARSED_LARGE):
            entry = kept.get(id(item))
            if entry is not None and entry[0] is item:
                kept.move_to_end(id(item))
                return entry[1]
    record = PrefixRecord.from_dict(item)
    _keep_record(item, record)
    return record


def records_of(items: list[dict[str, Any]]) -> list[PrefixRecord]:
    """`[_record_of(item) for item in items]`, the kept ones found under one lock.

    A small request's history is four dicts, each a lock and two lookups apart; those
    not kept are rebuilt and kept as `_record_of` does.
    """
    found: list[PrefixRecord | None] = []
    missing = False  # not `None in found`: that calls each record's dataclass `__eq__`
    with _PARSED_LOCK:
        for item in items:
            key = id(item)
            kept = _PARSED
            entry = kept.get(key)
            if entry is None or entry[0] is not item:
                kept = _PARSED_LARGE
                entry = kept.get(key)
            if entry is not None and entry[0] is item:
                kept.move_to_end(key)
                found.append(entry[1])
            else:
                found.append(None)
                missing = True
    if not missing:
        return found  # type: ignore[return-value]
    return [
        _record_of(item) if record is None else record
        for item, record in zip(items, found, strict=True)
    ]


def _apply(ctx: RequestContext, result: tuple[dict[str, Any], list[str]]) -> None:
    body, changed = result
    for field in changed:
        ctx.edits.set_fields[field] = body[field]


def _place_breakpoints(ctx: RequestContext, check: PrefixCheck, rule: CacheRule) -> bool:
    """Mark the last stable boundaries; return whether any breakpoint was placed."""
    request = check.request
    positions = anthropic_cache_breakpoints(
        request.segments,
        request.stable_count,
        cumulative_tokens=check.record.cumulative_tokens,
        min_tokens=rule.min_tokens,
    )
    body, changed = apply_breakpoints(ctx.forwarded_body(), request, positions)
    _apply(ctx, (body, changed))
    return bool(changed)


def prefix_headers(check: PrefixCheck, blocked: Uncacheable | None = None) -> dict[str, str]:
    """`X-Farebox-Prefix`: `stable`, or what breaks the cache, where and why."""
    headers = {"x-farebox-expected-cached-tokens": str(check.expected_cached_now)}
    divergence = check.divergence
    if blocked is not None:
        value = f"uncacheable; reason={blocked.reason}; fix={blocked.fix}"
    elif divergence is not None and divergence.avoidable:
        value = f"break; segment={divergence.segment}; reason={divergence.reason}"
    elif check.findings:
        first = check.findings[0]
        value = f"volatile; segment={first.segment}; kind={first.kind}; offset={first.offset}"
    elif check.expectation.below_minimum:
        value = "below_minimum"
    else:
        value = "stable"
    if check.unscanned:  # the scan budget left these for later requests: not yet checked
        value += f"; unscanned={len(check.unscanned)}"
    headers["x-farebox-prefix"] = value
    return headers


def judge(
    outcome: PrefixOutcome, ctx: RequestContext, input_price: Decimal, cached_price: Decimal
) -> Verdict | None:
    """Compare the expected cached tokens with what the upstream reported."""
    if ctx.usage is None or ctx.usage.estimated:
        return None
    usage = ctx.usage
    expected = outcome.check.expected_cached_for(usage.prompt_tokens)
    judged = verdict(expected, usage.cached_tokens, usage.prompt_tokens, input_price, cached_price)
    if outcome.uncacheable is not None and judged.status is CacheStatus.STABLE:
        judged = dataclasses.replace(judged, status=CacheStatus.UNCACHEABLE)
    outcome.verdict = judged
    return judged


async def remember(outcome: PrefixOutcome, state: SharedState) -> None:
    """Keep this prompt's fingerprints for the next requests of the caller and the task.

    A prompt of more than `MAX_REMEMBERED_SEGMENTS` segments is not kept: its record grows
    with the message count (a 2-million-message body would pin hundreds of megabytes in
    the store), and no real conversation is that long; the next request sees no history.
    """
    kept = outcome.check.record
    count = len(kept.segment_digests)
    if count > MAX_REMEMBERED_SEGMENTS:
        return
    ttl = CACHE_LIFETIME_S.get(outcome.family, 600.0)
    # The fingerprint chain is hashed here, ~0.2 µs a segment: thousands leave the loop.
    size = count * CHAIN_BYTES_PER_SEGMENT
    record = kept.to_dict() if on_loop(size) else await sized(size, kept.to_dict)  # no coroutine
    judged = outcome.verdict
    if judged is not None:  # the provider's own count calibrates the next estimate
        record["reported_prompt_tokens"] = judged.prompt_tokens
        kept = with_reported_tokens(kept, judged.prompt_tokens)
    await state.remember_prefix(outcome.keys, record, ttl, HISTORY_PER_KEY)
    _keep_record(record, kept)  # the in-process state hands this very dict back


def _keep_record(item: dict[str, Any], record: PrefixRecord) -> None:
    """Cache `record` as what `item` (its `to_dict()`) rebuilds into (see `_record_of`)."""
    size = len(record.segment_digests)
    if size > PARSED_MAX_SEGMENTS:
        return
    with _PARSED_LOCK:  # a large request checks in a worker thread
        if size <= PARSED_SMALL:
            _PARSED[id(item)] = (item, record)
            while len(_PARSED) > PARSED_KEEP:
                _PARSED.popitem(last=False)
            return
        old = _PARSED_LARGE.pop(id(item), None)
        if old is not None:
            _PARSED_HELD[0] -= len(old[1].segment_digests)
        _PARSED_LARGE[id(item)] = (item, record)
        _PARSED_HELD[0] += size
        while _PARSED_HELD[0] > PARSED_LARGE_SEGMENTS:
            _, (_, dropped) = _PARSED_LARGE.popitem(last=False)
            _PARSED_HELD[0] -= len(dropped.segment_digests)
