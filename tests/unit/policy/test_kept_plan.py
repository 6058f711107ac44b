"""Plans kept by what they read: always the plan `plan_route` makes afresh.

`kept_plan` keeps a decision with every body field and header the plan read; these tests
send the shipped policies' models runs of requests that share or differ in those reads
(same values of other types, absent against present, other headers and callers) and
assert each answer equals a fresh `plan_route` of the same request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import load_config
from gateway.policy import RequestFacts
from gateway.policy import kept as kept_module
from gateway.policy.kept import kept_plan
from gateway.policy.planner import plan_route
from gateway.pricing import load_model_map

POLICIES = Path(__file__).resolve().parents[3] / "policies"
CONFIGS = [load_config(path) for path in sorted(POLICIES.glob("*.yaml"))]
MODEL_MAP = load_model_map()

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 16, 900, 5000, 100_000, 1.0, 16.0, -3]),
    st.sampled_from(["low", "high", "none", "priority", "flex", "auto", "default", ""]),
)
FIELDS = {
    "max_tokens": SCALARS,
    "max_completion_tokens": SCALARS,
    "reasoning_effort": SCALARS,
    "service_tier": SCALARS,
    "speed": SCALARS,
    "stream": st.sampled_from([True, False, 1, None]),
    "stream_options": st.sampled_from(
        [{"include_usage": True}, {"include_usage": 1}, {}, {"include_usage": False}]
    ),
    "thinking": st.sampled_from(
        [
            {"type": "enabled", "budget_tokens": 2048},
            {"budget_tokens": 2048, "type": "enabled"},
            {"type": "disabled"},
            None,
            {"type": 1},
        ]
    ),
    "thinking_token_budget": SCALARS,
    "chat_template_kwargs": st.sampled_from(
        [
            {"enable_thinking": False},
            {"enable_thinking": True},
            {"reasoning_effort": "low", "enable_thinking": True},
            {"enable_thinking": True, "reasoning_effort": "low"},
        ]
    ),
}
LAST = st.sampled_from(
    [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Sure,"},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
)
HEADERS = st.dictionaries(
    st.sampled_from(
        ["x-plan", "x-farebox-tags", "x-speed-tier", "x-task-step-kind", "x-other", "X-Plan"]
    ),
    st.sampled_from(["free", "pro", "pro-annual", "reason", "interactive, reason", "priority",
                     "flex", "fast", "deadline", "user_turn", "continuation", ""]),
    max_size=3,
)  # fmt: skip


@st.composite
def requests(draw: st.DrawFn, config: Any) -> tuple[Any, str, dict[str, Any], RequestFacts]:
    alias = draw(st.sampled_from(sorted(config.models)))
    fields = draw(st.fixed_dictionaries({}, optional=FIELDS))
    body = {"model": alias, "messages": [{"role": "user", "content": "x"}, draw(LAST)], **fields}
    facts = RequestFacts.from_headers(
        alias,
        draw(HEADERS),
        caller=draw(st.sampled_from([None, "key-a", "key-b"])),
        task_effort=draw(st.sampled_from([None, "low", "high"])),
    )
    team = draw(st.sampled_from([None, "evals", "core"]))
    project = draw(st.sampled_from([None, "ci-nightly", "web"]))
    facts = RequestFacts(
        alias=alias, caller=facts.caller, team=team, project=project, headers=facts.headers,
        step_kind=facts.step_kind, task_effort=facts.task_effort,
    )  # fmt: skip
    return config, alias, body, facts


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CONFIGS).flatmap(lambda c: st.lists(requests(c), min_size=1, max_size=12)))
def test_a_kept_plan_is_the_fresh_plan(run: list[Any]) -> None:
    for config, _alias, body, facts in run + run:  # the second pass mostly hits
        kept = kept_plan(config, MODEL_MAP, facts, body)
        fresh = plan_route(config, MODEL_MAP, facts, body)
        assert kept == fresh
        # The edits render the same bytes: the same keys in the same order, nested too.
        assert json.dumps(kept.set_fields) == json.dumps(fresh.set_fields)
        assert json.dumps(kept.headers) == json.dumps(fresh.headers)


def test_a_repeated_shape_is_planned_once_and_another_value_again() -> None:
    config = CONFIGS[0]
    alias = sorted(config.models)[0]
    facts = RequestFacts.from_headers(alias, {"x-plan": "free"})

    def body(text: str, max_tokens: Any) -> dict[str, Any]:
        messages = [{"role": "user", "content": text}]
        return {"model": alias, "max_tokens": max_tokens, "messages": messages}

    first = kept_plan(config, MODEL_MAP, facts, body("a", 16))
    # Other messages: the plan never reads them, so the kept decision comes back.
    assert kept_plan(config, MODEL_MAP, facts, body("b", 16)) is first
    assert kept_plan(config, MODEL_MAP, facts, body("b", 16.0)) is not first
    assert kept_plan(config, MODEL_MAP, facts, body("b", True)) is not first
    assert kept_module._same({"a": 1, "b": [True]}, {"a": 1, "b": [True]})
    assert not kept_module._same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # order kept in edits
    assert not kept_module._same({"a": [1]}, {"a": [1.0]})
    other = RequestFacts.from_headers(alias, {"x-plan": "pro"})
    assert kept_plan(config, MODEL_MAP, other, body("a", 16)).rule != first.rule


def test_a_reloaded_configuration_is_planned_afresh() -> None:
    path = sorted(POLICIES.glob("*.yaml"))[0]
    old, new = load_config(path), load_config(path)
    alias = sorted(old.models)[0]
    facts = RequestFacts.from_headers(alias, {})
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}]}
    planned = kept_plan(old, MODEL_MAP, facts, body)
    assert kept_plan(old, MODEL_MAP, facts, body) is planned
    assert kept_plan(new, MODEL_MAP, facts, body) is not planned


def test_a_plan_that_reads_every_header_is_not_kept() -> None:
    seen = kept_module._HeaderReads({"x-plan": "free", "x-other": "1"})
    assert dict(seen) == {"x-plan": "free", "x-other": "1"} and seen.whole
    body = kept_module._BodyReads({"model": "m", "stream": True})
    assert body.get("stream") is True and "speed" not in body and not body.whole
    assert body.reads == {"stream": True, "speed": kept_module._ABSENT}
    assert list(body.items()) == [("model", "m"), ("stream", True)] and body.whole


def test_a_reload_lets_go_of_the_old_configurations_plans() -> None:
    path = sorted(POLICIES.glob("*.yaml"))[0]
    old, new = load_config(path), load_config(path)
    alias = sorted(old.models)[0]
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}]}
    kept_plan(old, MODEL_MAP, RequestFacts.from_headers(alias, {}), body)
    kept_plan(new, MODEL_MAP, RequestFacts.from_headers(alias, {}), body)
    assert all(entry[0] is new for entry in kept_module._KEPT.values())
