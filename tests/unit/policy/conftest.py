"""Fixtures of the policy tests: plan a body under a policy given as a dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway.policy import Decision, Family, RequestFacts, plan, validate_policy
from tests.unit.policy.helpers import Planner


@pytest.fixture
def make_plan() -> Planner:
    """Plan `body` under `policy` (a dict) for `family`, with optional headers and facts."""

    def run(
        policy: Mapping[str, Any],
        body: Mapping[str, Any],
        family: Family = "vllm",
        capabilities: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        alias: str = "m",
        **facts: Any,
    ) -> Decision:
        request = RequestFacts.from_headers(alias, headers or {}, **facts)
        return plan(validate_policy(policy), request, body, family, capabilities)

    return run
