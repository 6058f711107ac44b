"""`plan_route`, kept per route and request shape: the live path's plan without planning again.

A plan is a pure function of the configuration, the model map, the request's facts and
the body fields it reads. The live path sends many requests that differ only in what the
plan never reads (the messages, a request's own headers), so `kept_plan` runs
`plan_route` once on recording views of the body and headers, and keeps the decision with
every field and header it read (the value, or that it was absent). A later request with
the same configuration, map, alias, caller, team, project, step kind, pinned effort and
target gets that decision when each recorded read gives the same value again (the same
types too: `True` is not `1`); otherwise it is planned and kept beside (a few shapes per
key).

Nothing is kept when the plan looked at the whole body or all headers (iterating them), or
read a large value; a kept decision is shared by the requests that get it, which only read
it (as they already share the configuration's objects it holds). Each entry holds its
configuration and map, so a reload (new objects) never gets an old plan.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.config import GatewayConfig
from gateway.policy.decision import Decision
from gateway.policy.facts import LoweredHeaders, RequestFacts
from gateway.policy.planner import plan_route
from gateway.policy.recovery import Target
from gateway.policy.steps import infer_step_kind

_ABSENT: Any = object()
"""A read of a field or header the request did not have."""

MAX_KEYS = 1024
SHAPES_PER_KEY = 4
LARGEST_READ = 32
"""A read container with more items than this is not kept (compared on every hit)."""

_Reads = dict[str, Any]
_Kept = tuple[GatewayConfig, Mapping[str, Any], list[tuple[_Reads, _Reads, Decision]]]
_KEPT: dict[tuple[Any, ...], _Kept] = {}
_SERVING: list[Any] = [None, None]
"""The configuration and map the kept plans are of; another one clears them."""


class _BodyReads(Mapping[str, Any]):
    """The body, recording each field read (its value, or `_ABSENT`)."""

    __slots__ = ("_body", "reads", "whole")

    def __init__(self, body: Mapping[str, Any]) -> None:
        self._body = body
        self.reads: _Reads = {}
        self.whole = False

    def __getitem__(self, key: str) -> Any:
        value = self._body.get(key, _ABSENT)
        self.reads[key] = value
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._body.get(key, _ABSENT)
        self.reads[key] = value
        return default if value is _ABSENT else value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            self.whole = True
            return key in self._body
        return self.get(key, _ABSENT) is not _ABSENT

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._body)

    def __len__(self) -> int:
        self.whole = True
        return len(self._body)


class _HeaderReads(LoweredHeaders):
    """Lower-cased headers (a copy), recording each name read; any iteration marks `whole`."""

    __slots__ = ("reads", "whole")

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__(headers)
        self.reads: _Reads = {}
        self.whole = False

    def get(self, key: str, default: Any = None) -> Any:
        value = super().get(key, _ABSENT)
        self.reads[key] = value
        return default if value is _ABSENT else value

    def __getitem__(self, key: str) -> str:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            self.whole = True
            return super().__contains__(key)
        return self.get(key, _ABSENT) is not _ABSENT

    def _all(self) -> None:
        self.whole = True

    def __iter__(self) -> Iterator[str]:
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()

    def keys(self):  # type: ignore[no-untyped-def]
        self._all()
        return super().keys()

    def values(self):  # type: ignore[no-untyped-def]
        self._all()
        return super().values()

    def items(self):  # type: ignore[no-untyped-def]
        self._all()
        return super().items()

    def copy(self) -> dict[str, str]:
        self._all()
        return dict(super().items())

    def __eq__(self, other: object) -> bool:
        self._all()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (`1`, `1.0` and `True` differ), objects
    with their keys in the same order (a plan may copy one into an edit, order and all)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return len(a) == len(b) and all(
            ka == kb and _same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if type(a) is list:
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _holds(reads: _Reads, source: Mapping[str, Any]) -> bool:
    """Whether every recorded read gives the same value from `source`."""
    get = source.get
    for key, value in reads.items():
        now = get(key, _ABSENT)
        if now is not value and not _same(now, value):
            return False
    return True


def _keepable(reads: _Reads) -> bool:
    return all(
        not isinstance(value, (dict, list)) or len(value) <= LARGEST_READ
        for value in reads.values()
    )


def kept_plan(
    config: GatewayConfig,
    model_map: Mapping[str, Any],
    facts: RequestFacts,
    body: Mapping[str, Any],
    *,
    target: Target | None = None,
) -> Decision:
    """`plan_route(config, model_map, facts, body, target=target)`, kept by what it read."""
    step = infer_step_kind(body, facts.step_kind)
    key = (
        id(config), id(model_map), facts.alias, facts.caller, facts.team, facts.project,
        step, facts.task_effort, target,
    )  # fmt: skip
    entry = _KEPT.get(key)
    if entry is not None and entry[0] is config and entry[1] is model_map:
        for header_reads, body_reads, decision in entry[2]:
            if _holds(header_reads, facts.headers) and _holds(body_reads, body):
                return decision
    headers = _HeaderReads(facts.headers)
    reads = _BodyReads(body)
    seen = RequestFacts(
        alias=facts.alias, caller=facts.caller, team=facts.team, project=facts.project,
        headers=headers, step_kind=step, task_effort=facts.task_effort,
    )  # fmt: skip
    decision = plan_route(config, model_map, seen, reads, target=target)
    if not (headers.whole or reads.whole) and _keepable(reads.reads):
        body_reads = {k: v if v is _ABSENT else copy.deepcopy(v) for k, v in reads.reads.items()}
        _keep(key, config, model_map, (dict(headers.reads), body_reads, decision))
    return decision


def _keep(
    key: tuple[Any, ...],
    config: GatewayConfig,
    model_map: Mapping[str, Any],
    shape: tuple[_Reads, _Reads, Decision],
) -> None:
    if _SERVING[0] is not config or _SERVING[1] is not model_map:
        # A reload (or another app in this process): plans of the old configuration would
        # only keep it and its map alive.
        _KEPT.clear()
        _SERVING[:] = [config, model_map]
    entry = _KEPT.get(key)
    if entry is None or entry[0] is not config or entry[1] is not model_map:
        if len(_KEPT) >= MAX_KEYS:  # many callers, or label values
            _KEPT.clear()
        _KEPT[key] = (config, model_map, [shape])
        return
    shapes = entry[2]
    if len(shapes) >= SHAPES_PER_KEY:
        del shapes[0]
    shapes.append(shape)
