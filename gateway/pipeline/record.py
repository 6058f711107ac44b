"""Stage 8: book the request: a ledger row, the metrics, the task's running cost.

Costs are rounded once, to the ledger's ten places, so the cost a client is told, the
row in the ledger and the task's total all agree to the digit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from functools import lru_cache
from operator import attrgetter
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gateway.config import ModelRoute
from gateway.frozen import mutable_twin
from gateway.ledger import RequestRecord
from gateway.ledger.records import (
    MONEY_LIMIT,
    MONEY_QUANTUM,
    TOKEN_FIELDS,
    ZERO,
    ZERO_MONEY,
    as_money,
    open_row,
    seal_row,
)
from gateway.metrics import Metrics, add, observe, observe_alike
from gateway.pipeline.context import RequestContext
from gateway.pricing import COMPONENTS, CostBreakdown
from gateway.usage import Usage

# No component of one call is booked above this, so the row's total always fits the
# ledger's columns; only a price written per token instead of per million gets near it.
COMPONENT_CEILING = MONEY_LIMIT / 10 - MONEY_QUANTUM
_CEILING, _FLOOR = COMPONENT_CEILING, -COMPONENT_CEILING

log = logging.getLogger("farebox.record")


@dataclass(frozen=True, slots=True)
class BookedCost:
    """A request's cost as booked: each component rounded, and their exact sum."""

    components: dict[str, Decimal]
    total: Decimal = field(init=False)
    # Built by `of`: every component is what `as_money` returns and the total, their sum,
    # is too (under MONEY_LIMIT, ten places), so a ledger row need not round them again.
    rounded: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", sum(self.components.values(), ZERO))

    @classmethod
    def of(cls, cost: CostBreakdown | None) -> BookedCost:
        if cost is None:
            return _BOOKED(_ZERO_COMPONENTS.copy(), sum(_ZERO_COMPONENTS.values(), ZERO), True)
        components = {}
        total = ZERO_MONEY
        for name, value in zip(COMPONENTS, _COMPONENT_VALUES(cost), strict=True):
            # `_bounded(value, name)` for the usual amounts, inline: a zero is the one
            # rounded zero (most components of most calls), any other one is quantized.
            if type(value) is Decimal and value.is_finite() and _FLOOR <= value <= _CEILING:
                if value or value.is_signed():
                    value = value.quantize(MONEY_QUANTUM, rounding=ROUND_HALF_EVEN)
                else:
                    value = ZERO_MONEY
            else:
                value = _bounded(value, name)
            components[name] = value
            if value:
                # Every component has ten places, so their sum has too, whatever the
                # order: adding only the non-zero ones to the rounded zero gives the digits
                # (and exponent and sign) of `sum(components.values(), ZERO)`.
                total += value
        return _BOOKED(components, total, True)


_COMPONENT_VALUES = attrgetter(*COMPONENTS)
_ZERO_COMPONENTS = dict.fromkeys(COMPONENTS, ZERO_MONEY)  # `as_money(ZERO, name)` for each
# `BookedCost(components, rounded=True)` with its `total` given (their sum, as its
# `__post_init__` makes it: the one check it skips), a store per field (`gateway.frozen`).
_BOOKED = mutable_twin(BookedCost, unchecked=True)


def booked_cost(ctx: RequestContext) -> BookedCost:
    """`BookedCost.of(ctx.cost)`, rounded once per cost: the ledger row, the response's
    `usage.cost` and its headers all read it."""
    held = ctx.booked
    if held is not None and held[0] is ctx.cost:
        return held[1]
    booked = BookedCost.of(ctx.cost)
    ctx.booked = (ctx.cost, booked)
    return booked


def _bounded(value: Decimal, name: str) -> Decimal:
    """The component as booked: capped (with an error logged) rather than refused."""
    if type(value) is Decimal and value.is_finite() and _FLOOR <= value <= _CEILING:
        # `as_money(value, name)`: its checks just passed (the ceiling is under its limit).
        return value.quantize(MONEY_QUANTUM, rounding=ROUND_HALF_EVEN)
    if value.is_finite() and abs(value) <= COMPONENT_CEILING:
        return as_money(value, name)
    log.error(
        "cost component %s of %s USD is beyond any real price; booked as %s (check `prices:`)",
        name, value, COMPONENT_CEILING,
    )  # fmt: skip
    return as_money(COMPONENT_CEILING, name)


def backend_of(route: ModelRoute) -> str:
    """The backend a ledger row and a metric label both name: the route's base URL
    (`sim` for the bundled simulator), without credentials or query, else its provider."""
    return _backend(route.base_url, route.provider) if route.base_url else route.provider


@lru_cache(maxsize=1024)  # a handful of routes, asked twice per request
def _backend(base_url: str, provider: str) -> str:
    try:
        parts = urlsplit(base_url)
    except ValueError:  # not a URL: the provider still names the backend
        return provider
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) or provider


def decode_speed(ctx: RequestContext) -> float | None:
    """Output tokens per second after the first token."""
    timings, usage = ctx.timings, ctx.usage
    if usage is None or timings.first_token is None or timings.last_token is None:
        return None
    elapsed = timings.last_token - timings.first_token
    if elapsed <= 0 or usage.completion_tokens < 2:
        return None
    return (usage.completion_tokens - 1) / elapsed


def ledger_record(ctx: RequestContext, booked: BookedCost, attempt: int = 0) -> RequestRecord:
    """The ledger row for this upstream call.

    Filled a store per field (`open_row` / `seal_row`): what `RequestRecord(...)` of the
    same keywords builds, without matching 47 of them to its parameters. Every field is
    set here: a field added to `RequestRecord` is added here too (its test reads them all).
    """
    task, route, identity, prefix = ctx.task, ctx.route, ctx.identity, ctx.prefix
    assert task is not None and route is not None and ctx.alias is not None
    timings = ctx.timings
    finished = timings.finished or timings.received
    # The usage goes in with the rest: `with_usage` would build and check the row twice.
    # No usage is the record's defaults: zero tokens, not estimated, suspect or reported.
    usage = ctx.usage or _NO_USAGE
    costs = booked.components
    row = open_row()
    row.request_id = ctx.request_id
    row.attempt = attempt
    row.task_id = task.task_id
    row.task_step = task.step
    row.step_kind = task.step_kind
    row.team = identity.team or "default"
    row.project = identity.project or "default"
    row.caller = identity.caller
    row.model_alias = ctx.alias
    row.backend = backend_of(route)
    row.provider = route.provider
    row.upstream_model = route.model
    row.tier_requested = ctx.tier_requested or ""
    row.tier_served = ctx.tier_served or ""
    row.tier_confirmed = ctx.tier_confirmed
    row.status_code = ctx.status_code or 0
    row.error_type = ctx.error_type
    row.streamed = ctx.stream
    row.cost_input = costs["input"]
    row.cost_cached = costs["cached"]
    row.cost_cache_write = costs["cache_write"]
    row.cost_output = costs["output"]
    row.cost_reasoning = costs["reasoning"]
    row.cost_total = booked.total
    # `_ms(timings.ms_since_sent(...))`, inline: a whole reply saw no token (both None).
    sent, first, answer = timings.upstream_sent, timings.first_token, timings.first_answer_token
    row.ttft_ms = None if first is None or sent is None else round((first - sent) * 1000.0)
    row.ttfat_ms = None if answer is None or sent is None else round((answer - sent) * 1000.0)
    row.duration_ms = round((finished - timings.received) * 1000)
    row.decode_tps = None if first is None else decode_speed(ctx)  # else None
    row.output_cap_clamped = ctx.clamped
    if prefix is None:
        row.expected_cached_tokens = row.prefix_status = row.prefix_lost_usd = None
    else:  # `prefix_status` is `hit`, `miss`, ... and, when the prefix broke, why
        verdict = prefix.verdict
        row.expected_cached_tokens = None if verdict is None else verdict.expected_cached
        status = "unjudged" if verdict is None else verdict.status
        divergence = prefix.check.divergence
        row.prefix_status = str(status) if divergence is None else f"{status}:{divergence.reason}"
        # `prefix.lost_usd`; no loss as the ledger's own ZERO, which `seal_row`'s `as_money`
        # knows by identity (the same 0E-10 as rounding any zero, without the checks).
        row.prefix_lost_usd = None if verdict is None else verdict.money_lost or ZERO
    row.thinking_enforcement = ctx.response_headers.get("x-farebox-thinking-enforcement")
    row.dropped_params = ctx.dropped_params
    row.estimated = usage.estimated
    row.usage_suspect = usage.suspect
    row.usage_reported = usage.reported
    for name, count in zip(TOKEN_FIELDS, _TOKEN_COUNTS(usage), strict=True):
        setattr(row, name, count)
    # Costs from `BookedCost.of` are rounded already: the row need not round them again.
    return seal_row(row, booked.rounded)


_NO_USAGE = Usage()
_TOKEN_COUNTS = attrgetter(*TOKEN_FIELDS)  # `usage.token_counts()`'s values, in its order


def _labels(metrics: Metrics, metric: Any, *values: str, **named: str) -> Any:
    """`metric.labels(...)`, looked up once per label values."""
    children = metrics.children
    key = (id(metric), values, *named.items())
    child = children.get(key)
    if child is None:
        child = metrics.keep(key, metric.labels(*values, **named))
    return child


def _by_kind(metrics: Metrics, metric: Any, model: str) -> tuple[Any, ...]:
    """The model's child of `metric` for each cost component, in `COMPONENTS` order: one
    lookup instead of five `_labels` calls (tokens and cost are counted by kind)."""
    children = metrics.children
    key = (id(metric), model, COMPONENTS)
    kinds = children.get(key)
    if kinds is None:
        kinds = metrics.keep(
            key, tuple(_labels(metrics, metric, model=model, kind=kind) for kind in COMPONENTS)
        )
    return kinds


def _by_name(metrics: Metrics, model: str, metric: tuple[Any, ...]) -> tuple[Any, ...]:
    """The model's child of each metric in `metric` (labelled by model alone), one lookup."""
    children = metrics.children
    key = (*map(id, metric), model)
    found = children.get(key)
    if found is None:
        found = metrics.keep(key, tuple(_labels(metrics, each, model=model) for each in metric))
    return found


def _series(metrics: Metrics, model: str, backend: str, tier: str, status: int) -> tuple[Any, ...]:
    """The children every finished request counts in: its request count by backend, tier
    and status, its model's tokens and cost by kind and its duration; one lookup (by the
    status code itself: its label, `str(status)`, is made only for a new bundle)."""
    children = metrics.children
    key = (_SERIES, model, backend, tier, status)
    series = children.get(key)
    if series is None:
        series = (
            _labels(
                metrics,
                metrics.requests,
                model=model,
                backend=backend,
                tier=tier,
                status=str(status),
            ),
            _by_kind(metrics, metrics.tokens, model),
            _by_kind(metrics, metrics.cost, model),
            _labels(metrics, metrics.duration, model=model),
        )
        metrics.keep(key, series)
    return series


_SERIES = object()  # the key of a `_series` bundle, beside `id(metric)` keys


def observe_metrics(metrics: Metrics, ctx: RequestContext, booked: BookedCost) -> None:
    """Count the request, its tokens and cost, and its latencies."""
    assert ctx.route is not None
    model = ctx.alias or "unknown"
    tier = ctx.tier_served or "standard"
    backend = backend_of(ctx.route)
    requests, tokens, costs, duration = _series(metrics, model, backend, tier, ctx.status_code or 0)
    add(requests, 1)
    usage = ctx.usage
    if usage is not None and usage.suspect:
        _labels(metrics, metrics.usage_suspect, model=model).inc()
    if usage is not None:
        counts = (
            usage.uncached_input_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens + usage.cache_write_1h_tokens,
            usage.answer_tokens,
            usage.reasoning_tokens,
        )
        # Every series is looked up (so it exists at 0); adding zero would only take its lock.
        for child, count in zip(tokens, counts, strict=True):
            if count:
                add(child, count)
    amounts = booked.components
    if tuple(amounts) == COMPONENTS:  # always, from `BookedCost.of`
        for child, amount in zip(costs, amounts.values(), strict=True):
            if amount:
                add(child, float(amount))
    else:
        for kind, amount in amounts.items():
            child = _labels(metrics, metrics.cost, model=model, kind=kind)
            if amount:
                child.inc(float(amount))
    timings = ctx.timings
    if timings.finished is not None:
        observe(duration, timings.finished - timings.received)
    _observe_latencies(metrics, ctx, model, (backend, tier))
    _observe_prefix(metrics, ctx, model)
    enforcement = ctx.response_headers.get("x-farebox-thinking-enforcement")
    if enforcement is not None:
        _count(metrics, metrics.thinking_enforcement, "enforcement", model, enforcement)
    if ctx.tier_confirmed is False:
        _count(metrics, metrics.tier_unconfirmed, "tier", model, tier)
    if ctx.clamped:
        rule = ctx.response_headers.get("x-farebox-rule", "defaults")
        _count(metrics, metrics.clamps, "rule", model, rule[:64])


def _count(
    metrics: Metrics, metric: Any, label: str, model: str, value: Any, amount: float = 1
) -> None:
    """`_labels(metrics, metric, model=model, **{label: value}).inc(amount)` of a counter
    labelled by model and one more label, its child looked up by a key of the call's own
    values (no dict of keyword arguments to build) and added to without `inc`'s checks."""
    key = (metric, model, value)  # the metric itself: never equal to another bundle's key
    child = metrics.children.get(key)
    if child is None:
        child = metrics.keep(key, _labels(metrics, metric, model=model, **{label: value}))
    add(child, amount)


def _prefix_series(metrics: Metrics, model: str, *, judged: bool) -> tuple[Any, ...]:
    """The model's prefix-check duration child, and with `judged` its expected, actual and
    lost children after it; one lookup (the key is built from constants, not the metrics)."""
    children = metrics.children
    key = (_PREFIX_JUDGED if judged else _PREFIX_CHECKED, model)
    found = children.get(key)
    if found is None:
        named = (metrics.prefix_check, metrics.prefix_expected, metrics.prefix_actual)
        found = _by_name(metrics, model, (*named, metrics.prefix_lost) if judged else named[:1])
        metrics.keep(key, found)
    return found


_PREFIX_CHECKED, _PREFIX_JUDGED = object(), object()  # keys of `_prefix_series` bundles


def _observe_prefix(metrics: Metrics, ctx: RequestContext, model: str) -> None:
    outcome = ctx.prefix
    if outcome is None:
        return
    judged = outcome.verdict
    if judged is None:
        check = _prefix_series(metrics, model, judged=False)[0]
    else:  # one lookup for the four series a judged request reads
        check, expected, actual, lost = _prefix_series(metrics, model, judged=True)
    observe(check, outcome.check_seconds)
    if outcome.check.unscanned:
        _labels(metrics, metrics.prefix_unscanned, model=model).inc(len(outcome.check.unscanned))
    for finding in outcome.check.findings:
        _count(metrics, metrics.prefix_findings, "kind", model, finding.kind)
    divergence = outcome.check.divergence
    if divergence is not None:
        _count(metrics, metrics.prefix_breaks, "reason", model, divergence.reason)
    if judged is not None:
        # Looked up above, so each exists at 0; adding zero would only take its lock.
        if judged.expected_cached:
            add(expected, judged.expected_cached)
        if judged.actual_cached:
            add(actual, judged.actual_cached)
        if judged.money_lost:
            add(lost, float(judged.money_lost))


def _observe_latencies(
    metrics: Metrics, ctx: RequestContext, model: str, where: tuple[str, str]
) -> None:
    """A stream's times to first (answer) token and decode speed; `where` is its backend
    and tier, as farebox_requests_total labels them."""
    timings = ctx.timings
    first, answer, sent = timings.first_token, timings.first_answer_token, timings.upstream_sent
    if first is None and answer is None:
        return  # a whole reply: no token was seen arrive, so no latency to observe
    # `timings.ms_since_sent(...) / 1000` (as the ledger's ttft_ms), the same arithmetic
    # inline: four calls fewer per stream.
    ttft = None if first is None or sent is None else (first - sent) * 1000.0 / 1000
    ttfat = None if answer is None or sent is None else (answer - sent) * 1000.0 / 1000
    speed = decode_speed(ctx)
    by_first, by_answer, by_speed = _latency_series(
        metrics, model, where, (ttft is not None, ttfat is not None, speed is not None)
    )
    if ttft is not None:
        observe_alike(by_first, ttft)
    if ttfat is not None:
        observe_alike(by_answer, ttfat)
    if speed is not None:
        observe(by_speed, speed)


def _latency_series(
    metrics: Metrics, model: str, where: tuple[str, str], observed: tuple[bool, bool, bool]
) -> tuple[Any, Any, Any]:
    """A stream's latency children, one lookup: its time to first token by model and by
    (backend, tier), the same for its first answer token, its decode speed by model; each
    only where `observed` says the stream has it (None else), so that no series shows at 0
    on /metrics before a request observed it."""
    key = (_LATENCIES, model, where, observed)
    found = metrics.children.get(key)
    if found is None:
        first, answer, speed = observed
        found = (
            _pair(metrics, metrics.ttft, metrics.backend_ttft, model, where) if first else None,
            _pair(metrics, metrics.ttfat, metrics.backend_ttfat, model, where) if answer else None,
            _labels(metrics, metrics.decode_speed, model=model) if speed else None,
        )
        metrics.keep(key, found)
    return found


_LATENCIES = object()  # the key of a `_latency_series` bundle


def _pair(
    metrics: Metrics, by_model: Any, by_backend: Any, model: str, where: tuple[str, str]
) -> tuple[Any, Any]:
    """The model's child of `by_model` and the (backend, tier) child of `by_backend` (a
    stream's time to first (answer) token is observed in both), of the same buckets."""
    return (_labels(metrics, by_model, model=model), _labels(metrics, by_backend, *where))
