"""Facts built from headers lowered once: the same facts, without a second copy.

`lowered_headers` gives a `LoweredHeaders` copy; `RequestFacts` keeps that copy as it is and
still lowers (and copies) any other mapping, so the facts never share a caller's dict.
"""

from __future__ import annotations

from gateway.pipeline.context import Identity, RequestContext, TaskRef
from gateway.pipeline.policy import facts_of
from gateway.policy.facts import LoweredHeaders, RequestFacts, lowered_headers


def test_lowered_headers_are_kept_and_others_lowered() -> None:
    given = {"X-Plan": "pro", "x-speed-tier": "Priority"}
    lowered = lowered_headers(given)
    assert type(lowered) is LoweredHeaders and lowered == {
        "x-plan": "pro",
        "x-speed-tier": "Priority",
    }
    facts = RequestFacts("m", headers=lowered)
    assert facts.headers is lowered and facts.tier_header == "priority"
    plain = RequestFacts("m", headers=given)
    assert plain.headers == lowered and plain.headers is not given
    given["x-plan"] = "free"  # the caller's dict changes later: the facts do not
    assert plain.headers["x-plan"] == "pro"
    assert RequestFacts.from_headers("m", given).headers == {
        "x-plan": "free", "x-speed-tier": "Priority"
    }  # fmt: skip


def test_facts_of_a_request() -> None:
    ctx = RequestContext(
        raw_body=b"{}",
        headers={"x-task-step-kind": "Tool_Result", "x-farebox-tags": "A, b", "x-plan": "pro"},
    )
    ctx.identity = Identity(caller="key-1", team="t", project="p")
    ctx.task = TaskRef(task_id="task-1", step="1")
    facts = facts_of(ctx, "m")
    assert facts.headers == ctx.headers and facts.headers is not ctx.headers
    assert (facts.alias, facts.caller, facts.team, facts.project) == ("m", "key-1", "t", "p")
    assert facts.step_kind == "Tool_Result" and facts.tags == frozenset({"a", "b"})
