"""Prometheus metrics, every name prefixed `farebox_`, on a registry of the app's own.

Labels have bounded cardinality: model aliases and backends come from the configuration,
tiers and kinds are fixed sets, and free-form values (teams from a header) are capped by
`BoundedLabel`. A task id or user id is never a label.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.values import MutexValue

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
SPEED_BUCKETS = (5, 10, 20, 40, 60, 80, 100, 150, 200, 300, 500, 1000)
# The prefix check's own cost per request: the design target is 2 ms for a 1 MB prompt.
CHECK_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)
# The loop's lag: no request should hold it more than 20 ms.
LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
TASK_COST_BUCKETS = (0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # set by gateway.workers for its workers
TOKEN_KINDS = ("input", "cached", "cache_write", "output", "reasoning")
BREAKER_STATES = ("closed", "open", "half_open")
MAX_CHILDREN = 4096
"""Labelled children kept per `Metrics` (its `children`, through `Metrics.keep`)."""
_TASK_COST = object()  # the key of a `task_cost` child, beside `gateway.pipeline.record`'s
T = TypeVar("T")


def _plain_float_value() -> type[MutexValue] | None:
    """prometheus_client's in-process value class, if it is still a float in `_value`
    beside its lock (0.20-0.26 are); None otherwise, and `add` then always calls `inc`."""
    try:
        probe = MutexValue("counter", "probe", "probe_total", (), (), "")
    except TypeError:  # another constructor: a version this shortcut was not written for
        return None
    plain = type(getattr(probe, "_value", None)) is float and hasattr(probe, "_lock")
    return MutexValue if plain else None


_PLAIN = _plain_float_value()


def add(child: Any, amount: float) -> None:
    """`child.inc(amount)` of a labelled Counter's child (`labels()` made it, so it is
    observable), without prometheus_client's per-call checks; a negative amount still
    goes through `inc`, which refuses it.

    Call it on the event loop's thread only (as `gateway.pipeline.record` and
    `Metrics.observe_task` do): in one process a value then has one writer, and the
    lock `inc` takes around `_value += amount` guards nothing, yet costs ten times the
    addition (~0.5 against ~0.06 µs; ~20 a streamed request). A scrape reads the float
    under the lock, whole either way. Under `--workers` the value is a file's, written
    by its `bump` (gateway.metric_files), without the lock for the same reason.
    """
    if amount < 0:
        child.inc(amount)
        return
    value = child._value
    if type(value) is _PLAIN:
        value._value += amount
    else:
        _file_add(value, amount)


def observe(child: Any, amount: float) -> None:
    """`child.observe(amount)` of a labelled Histogram's child: the same sum and bucket
    (the first bound `amount` is at most, found by bisection instead of a walk over the
    bounds), without the per-call checks; NaN counts in no bucket, as `observe` has it.
    Like `add`, on the event loop's thread only: in one process, without the locks."""
    total = child._sum
    if type(total) is _PLAIN:
        total._value += amount
        if amount == amount:
            child._buckets[bisect_left(child._upper_bounds, amount)]._value += 1.0
        return
    _file_add(total, amount)
    if amount == amount:
        _file_add(child._buckets[bisect_left(child._upper_bounds, amount)], 1.0)


def _file_add(value: Any, amount: float) -> None:
    """Add to a value kept in a file (`--workers`): gateway.metric_files' `bump` (no
    lock: this is the loop's thread), else the library's `inc` (its own class, where
    PROMETHEUS_MULTIPROC_DIR was set from outside)."""
    kind = type(value)
    bumps = _BUMPS.get(kind)
    if bumps is None:
        bumps = _BUMPS[kind] = hasattr(kind, "bump")
    if bumps:
        value.bump(amount)
    else:
        value.inc(amount)


_BUMPS: dict[type, bool] = {}
"""Whether each value class has a lock-free `bump` (a look-up, not an AttributeError
raised and caught at each add where it has none)."""


def observe_alike(children: tuple[Any, ...], amount: float) -> None:
    """`observe(child, amount)` for each of `children`, labelled children of histograms of
    the same buckets (a stream's time to first token by model and by backend: both
    `LATENCY_BUCKETS`): the bucket is found once for all."""
    first = children[0]
    if type(first._sum) is not _PLAIN:
        for child in children:
            observe(child, amount)
        return
    if amount != amount:  # NaN: summed, counted in no bucket (as `observe` has it)
        for child in children:
            child._sum._value += amount
        return
    bucket = bisect_left(first._upper_bounds, amount)
    for child in children:
        child._sum._value += amount
        child._buckets[bucket]._value += 1.0


class LedgerStats(Protocol):
    """What the ledger writer reports about its backlog."""

    @property
    def rows_written(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def spooled(self) -> int: ...
    @property
    def flush_failures(self) -> int: ...
    @property
    def rows_rejected(self) -> int: ...


class BoundedLabel:
    """Keeps at most `limit` distinct values of a label; later newcomers become `other`."""

    def __init__(self, limit: int = 100):
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if not value:
            return "none"
        value = value[:64]
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return "other"
        self._seen.add(value)
        return value


class Metrics:
    """The gateway's instruments, registered on one registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.team = BoundedLabel()
        # Labelled children by metric and label values, looked up once per set of values
        # (`observe_task`, `gateway.pipeline.record`): `labels()` checks and renders its
        # values under a lock on every call. Filled through `keep`.
        self.children: dict[tuple[Any, ...], Any] = {}
        r = self.registry
        self.config_reloads = Counter(
            "farebox_config_reloads",
            "Configuration reloads by result: reloaded, unchanged (the file's hash is the one "
            "in force: not parsed), refused.",
            ["result"],
            registry=r,
        )
        self.requests = Counter(
            "farebox_requests",
            "Upstream calls by outcome.",
            ["model", "backend", "tier", "status"],
            registry=r,
        )
        self.tokens = Counter(
            "farebox_tokens",
            "Tokens by kind (input is uncached input).",
            ["model", "kind"],
            registry=r,
        )
        self.cost = Counter(
            "farebox_cost_usd", "Cost in US dollars by kind.", ["model", "kind"], registry=r
        )
        self.ttft = Histogram(
            "farebox_time_to_first_token_seconds",
            "Time to the first token, thinking included (streams only: a whole reply shows none).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfat = Histogram(
            "farebox_time_to_first_answer_token_seconds",
            "Time to the first answer token, after thinking ends (streams only).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decode_speed = Histogram(
            "farebox_decode_tokens_per_second",
            "Output tokens per second after the first token (streams only).",
            ["model"],
            buckets=SPEED_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "farebox_request_duration_seconds",
            "Whole request duration, every request, streamed or not.",
            ["model"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.task_cost = Histogram(
            "farebox_task_cost_usd",
            "Cost of each finished task in US dollars.",
            ["team", "outcome"],
            buckets=TASK_COST_BUCKETS,
            registry=r,
        )
        self.prefix_expected = Counter(
            "farebox_prefix_expected_cached_tokens",
            "Cached tokens the prefix checker expected the upstream to read.",
            ["model"],
            registry=r,
        )
        self.prefix_actual = Counter(
            "farebox_prefix_actual_cached_tokens",
            "Cached tokens the upstream reported, for the same requests.",
            ["model"],
            registry=r,
        )
        self.prefix_breaks = Counter(
            "farebox_prefix_breaks",
            "Prompt prefixes that diverged, by reason.",
            ["model", "reason"],
            registry=r,
        )
        self.prefix_findings = Counter(
            "farebox_prefix_volatile_findings",
            "Volatile spans found in cacheable prompts.",
            ["model", "kind"],
            registry=r,
        )
        self.prefix_lost = Counter(
            "farebox_prefix_lost_usd",
            "Money lost to cache misses: missed tokens x (input - cached input price).",
            ["model"],
            registry=r,
        )
        self.prefix_check = Histogram(
            "farebox_prefix_check_seconds",
            "CPU time of the prefix check per request: history parsed, prompt fingerprinted, "
            "new content scanned, compared.",
            ["model"],
            buckets=CHECK_BUCKETS,
            registry=r,
        )
        self.prefix_unscanned = Counter(
            "farebox_prefix_unscanned_segments",
            "Cacheable segments the per-request scan budget left for later requests.",
            ["model"],
            registry=r,
        )
        self.loop_lag = Histogram(
            "farebox_event_loop_lag_seconds",
            "How late a 5 ms sleep on the event loop woke: time every request waited on "
            "whatever held the loop.",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.busy_poll_spins = Counter(
            "farebox_busy_poll_spins",
            "Times the event loop stayed awake after its I/O instead of sleeping "
            "(FAREBOX_BUSY_POLL_US).",
            registry=r,
        )
        self.busy_poll_idle = Counter(
            "farebox_busy_poll_idle_seconds",
            "Idle time the event loop spent awake polling: the CPU busy-polling burns.",
            registry=r,
        )
        self.busy_poll_backoffs = Counter(
            "farebox_busy_poll_backoffs",
            "Busy-polls stopped because another task wanted the core (none for a second after).",
            registry=r,
        )
        self._busy_poll_seen = (0, 0.0, 0)
        self.clamps = Counter(
            "farebox_policy_clamps",
            "Requests whose output cap or effort the policy lowered.",
            ["model", "rule"],
            registry=r,
        )
        self.thinking_enforcement = Counter(
            "farebox_thinking_enforcement",
            "Requests with a thinking budget, by who held it: backend, stream (the gateway "
            "cut and continued) or hint (nobody: the budget was only asked for).",
            ["model", "enforcement"],
            registry=r,
        )
        self.ledger = Gauge(
            "farebox_ledger_rows",
            "Ledger rows written, waiting in memory, or in the spool.",
            ["state"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.ledger_failures = Gauge(
            "farebox_ledger_flush_failures",
            "Failed ledger flushes since start.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.ledger_rejected = Counter(
            "farebox_ledger_rows_rejected",
            "Ledger entries the database (or the spool's JSON) refused for good, set aside in "
            "<spool_dir>/rejected/.",
            registry=r,
        )
        self._ledger_rejected_seen = 0
        self.usage_suspect = Counter(
            "farebox_usage_suspect",
            "Upstream usage objects that were clamped before billing (see docs/ledger.md).",
            ["model"],
            registry=r,
        )
        self.tier_unconfirmed = Counter(
            "farebox_tier_unconfirmed",
            "Requests billed at the tier they asked for because the upstream did not say "
            "which tier served them (ledger: tier_confirmed = false).",
            ["model", "tier"],
            registry=r,
        )
        self.shared_state_degraded = Gauge(
            "farebox_state_degraded",
            "1 while Redis is unreachable and shared state is per-process, else 0.",
            multiprocess_mode="livemax",
            registry=r,
        )
        self.shared_state_fallbacks = Counter(
            "farebox_state_fallbacks",
            "Shared-state calls answered per-process because Redis failed or was away.",
            ["operation"],
            registry=r,
        )
        self.scope_ids = BoundedLabel()  # keys, teams and projects with a budget
        self.budget_soft_limit = Counter(
            "farebox_budget_soft_limit_crossed",
            "Budgets whose spend passed their soft limit (soft_ratio x limit), once per window.",
            ["scope", "scope_id", "period"],
            registry=r,
        )
        # For the dashboards and alerts (docs/dashboards.md): latency by backend and tier,
        # fallbacks, breaker states and GPU prices, none of which the series above carry.
        self.backend_ttft = Histogram(
            "farebox_backend_time_to_first_token_seconds",
            "Time to the first token by backend and tier served (streams only).",
            ["backend", "tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.backend_ttfat = Histogram(
            "farebox_backend_time_to_first_answer_token_seconds",
            "Time to the first answer token by backend and tier served (streams only).",
            ["backend", "tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.fallbacks = Counter(
            "farebox_fallbacks",
            "Requests sent on to a fallback target after a failure, from (model, tier) to "
            "(to_model, to_tier).",
            ["model", "tier", "to_model", "to_tier"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "farebox_circuit_breaker_state",
            "1 for the state each upstream's circuit breaker is in (closed, open, half_open).",
            ["upstream", "state"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.in_flight = Gauge(
            "farebox_http_requests_in_flight",
            "HTTP requests in progress (a scrape on the API port counts itself).",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.gpu_cost_per_hour = Gauge(
            "farebox_gpu_cost_per_hour_usd",
            "GPU-priced models: what the whole deployment costs per hour, from the prices.",
            ["model"],
            multiprocess_mode="livemax",
            registry=r,
        )

    def observe_ledger(self, stats: LedgerStats) -> None:
        """Copy the ledger writer's counters into gauges, at scrape time."""
        self.ledger.labels(state="written").set(stats.rows_written)
        self.ledger.labels(state="pending").set(stats.pending)
        self.ledger.labels(state="spooled").set(stats.spooled)
        self.ledger_failures.set(stats.flush_failures)
        # A counter only goes up: add what the writer rejected since the last scrape.
        rejected = stats.rows_rejected
        if rejected > self._ledger_rejected_seen:
            self.ledger_rejected.inc(rejected - self._ledger_rejected_seen)
            self._ledger_rejected_seen = rejected

    def observe_busy_poll(self, spins: int, idle_s: float, backoffs: int) -> None:
        """Add what the busy-poller counted since the last scrape (its totals since start)."""
        seen_spins, seen_idle, seen_backoffs = self._busy_poll_seen
        self.busy_poll_spins.inc(max(spins - seen_spins, 0))
        self.busy_poll_idle.inc(max(idle_s - seen_idle, 0.0))
        self.busy_poll_backoffs.inc(max(backoffs - seen_backoffs, 0))
        self._busy_poll_seen = (spins, idle_s, backoffs)

    def observe_breakers(self, states: Mapping[str, str]) -> None:
        """Copy each upstream's breaker state into the gauge, at scrape time."""
        for upstream, current in states.items():
            for state in BREAKER_STATES:
                self.breaker_state.labels(upstream[:128], state).set(int(state == current))

    def observe_gpu_prices(self, hourly: Mapping[str, Decimal]) -> None:
        """Publish each GPU-priced model's hourly cost, at scrape time (prices reload)."""
        if not os.environ.get(MULTIPROC_ENV):  # which cannot clear (a worker's file stays)
            self.gpu_cost_per_hour.clear()  # a model a reload removed leaves the dashboards
        for model, cost in hourly.items():
            self.gpu_cost_per_hour.labels(model).set(float(cost))

    def state_degraded(self, degraded: bool) -> None:
        """Shared state fell back to per-process (True), or Redis is back (False)."""
        self.shared_state_degraded.set(1 if degraded else 0)

    def state_fallback(self, operation: str) -> None:
        """One shared-state call answered per-process."""
        self.shared_state_fallbacks.labels(operation=operation).inc()

    def soft_limit(self, scope: str, scope_id: str, period: str) -> None:
        """A settle took a budget's spend past its soft limit: the alert before the stop."""
        self.budget_soft_limit.labels(scope, self.scope_ids(scope_id), period).inc()

    def observe_task(self, team: str | None, outcome: str, cost: Decimal) -> None:
        """Record one finished task's total cost."""
        key = (_TASK_COST, self.team(team), outcome[:32])
        child = self.children.get(key)
        if child is None:  # outcomes are clients' words: `keep` bounds them
            child = self.keep(key, self.task_cost.labels(team=key[1], outcome=key[2]))
        observe(child, float(cost))

    def keep(self, key: tuple[Any, ...], child: T) -> T:
        """Keep `child` (or a bundle of children) under `key` in `children`: at most
        MAX_CHILDREN, all let go when full (label values the config does not bound)."""
        if len(self.children) >= MAX_CHILDREN:
            self.children.clear()
        self.children[key] = child
        return child

    def render(self) -> bytes:
        """The exposition text for GET /metrics: every worker's sums under `--workers`."""
        if os.environ.get(MULTIPROC_ENV):
            return render_workers()
        return generate_latest(self.registry)


def render_workers() -> bytes:
    """The sums of every worker's metrics (`farebox serve --workers N`, gateway.workers).

    Counters and histograms add up; each gauge says how (`multiprocess_mode`: backlogs
    and requests in flight add up, a flag or a breaker state takes the highest worker).
    """
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return generate_latest(registry)
