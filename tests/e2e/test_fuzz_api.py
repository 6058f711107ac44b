"""Schema-driven fuzzing of the HTTP API: no generated request gets a 5xx, every error is OpenAI's.

schemathesis reads the gateway's own /openapi.json and generates requests that fit it
(positive) and requests that break it (negative) for every route; a share of the chat
requests name a configured model, so they run the whole pipeline against the simulator
and reach the ledger. `FUZZ_REQUESTS` sets how many (`make fuzz` runs 10,000).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import httpx
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from gateway.anthropic_errors import is_messages_path
from tests.e2e.conftest import GatewayFactory

REQUESTS = int(os.environ.get("FUZZ_REQUESTS", "200"))
ROUND = 1000
ALIASES = ["chat", "sim-chat", "thinker", "claude", "strict-chat", "tidy-chat"]
ERROR_KEYS = {"message", "type", "param", "code"}


def _aim_at_a_model(case: Case, alias: str | None) -> Case:
    """Point a generated chat or lint body at a configured model, so the pipeline runs."""
    if alias is not None and isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = alias
    return case


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
TEXT = st.text(max_size=200)
PART = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"])},
    optional={
        "content": TEXT | st.lists(PART, min_size=1, max_size=3),
        "name": st.text(max_size=8),
    },
)


def _valid_chats(operation: Any) -> st.SearchStrategy[Case]:
    """Chat requests the gateway accepts, for a configured model, with fuzzed contents."""
    user = st.fixed_dictionaries({"role": st.just("user"), "content": TEXT})
    body = st.fixed_dictionaries(
        {
            "model": st.sampled_from(ALIASES),
            "messages": st.lists(MESSAGE, max_size=4).flatmap(
                lambda head: user.map(lambda last: [*head, last])
            ),
        },
        optional={
            "stream": st.booleans(),
            "max_tokens": st.integers(1, 64),
            "service_tier": st.sampled_from(["auto", "default", "flex", "priority"]),
            "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
            "metadata": st.dictionaries(st.sampled_from(["team", "project", "note"]), TEXT),
            "x_extra": JSON,
        },
    )
    return body.map(lambda b: operation.Case(body=b, media_type="application/json"))


def _check(case: Case, response: schemathesis.Response) -> str | None:
    """What is wrong with the gateway's answer to `case`, if anything."""
    sent = response.request.body or b""
    where = f"{case.method} {response.request.url} {sent[:2000]!r}"  # enough to reproduce it
    if response.status_code >= 500:
        return f"{where}\n  -> {response.status_code} {response.content[:2000]!r}"
    if response.status_code >= 400 and is_messages_path(case.operation.path):
        body = response.json()  # Anthropic's shape, for Anthropic's clients
        if body.get("type") != "error" or set(body["error"]) != {"type", "message"}:
            return f"{where}: {response.status_code} not in Anthropic's error shape: {body}"
        return None
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            return f"{where}: {response.status_code} not in OpenAI's error shape: {response.content[:300]!r}"
        if set(error) != ERROR_KEYS or len(response.content) > 10_000:
            return f"{where}: {response.status_code} error shape {sorted(error)}, {len(response.content)} bytes"
    return None


def test_no_generated_request_gets_a_5xx(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    schema = schemathesis.openapi.from_url(f"{gateway.server.url}/openapi.json")
    assert "/v1/chat/completions" in schema  # described, body schema included
    fuzzer = Fuzzer(gateway.server.url)
    started = time.monotonic()
    try:
        # Rounds of at most ROUND cases, with progress; a case the client refused to send
        # is made up in a later round (bounded).
        for _ in range(REQUESTS // ROUND + 3):
            missing = REQUESTS - fuzzer.sent
            if missing <= 0:
                break
            fuzzer.run(schema, min(missing, ROUND))
            elapsed = time.monotonic() - started
            print(f"fuzz: {fuzzer.sent} sent in {elapsed:.0f} s, {len(fuzzer.problems)} problems")
    finally:
        fuzzer.session.close()
    print(
        f"fuzz: {fuzzer.sent} requests, {fuzzer.chat_ok} model calls answered 200, statuses {dict(sorted(fuzzer.statuses.items()))}"
    )
    for line in fuzzer.slow[:10]:
        print(f"fuzz: slow: {line}")
    assert not fuzzer.problems, "\n".join(fuzzer.problems[:20])
    assert fuzzer.sent >= REQUESTS
    assert fuzzer.chat_ok > 0  # some model calls reached the simulator and back
    # Every model call answered 200 was billed: the ledger holds at least that many rows.
    spend = httpx.get(f"{gateway.base_url}/spend", params={"group_by": "model"}, timeout=60)
    assert sum(row["request_count"] for row in spend.json()["data"]) >= fuzzer.chat_ok


# Model calls that reach an upstream and book a ledger row when answered 200.
BOOKED = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"}
)


class Fuzzer:
    """Sends generated cases to the gateway and keeps what went wrong."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.statuses: Counter[int] = Counter()
        self.problems: list[str] = []
        self.slow: list[str] = []  # reported, not failed: timing is not asserted
        self.chat_ok = 0

    @property
    def sent(self) -> int:
        return sum(self.statuses.values())

    def run(self, schema: Any, count: int) -> None:
        """Send `count` generated cases: a fifth valid chats, the rest any route, either mode."""
        chats = max(10, count // 5)
        # Valid chat requests with fuzzed contents get their own pass: the route with the
        # most behind it (policy, prefix check, upstream, ledger) only runs for those, and
        # inside one_of a draw of 200 could hold none of them.
        self._pass(_valid_chats(schema["/v1/chat/completions"]["POST"]), chats)
        mixed = st.one_of(
            schema.as_strategy(GenerationMode.POSITIVE),
            schema.as_strategy(GenerationMode.NEGATIVE),
        )
        self._pass(mixed, max(0, count - chats))

    def _pass(self, cases: st.SearchStrategy[Case], count: int) -> None:
        if count == 0:
            return

        @settings(
            max_examples=count,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=cases, alias=st.none() | st.sampled_from(ALIASES))
        def fuzz(case: Case, alias: str | None) -> None:
            self.send(_aim_at_a_model(case, alias))

        fuzz()

    def send(self, case: Case) -> None:
        started = time.monotonic()
        try:
            response = case.call(base_url=self.base_url, session=self.session, timeout=60)
        except (requests.exceptions.InvalidHeader, UnicodeEncodeError):
            return  # the client refused to send it: a header no HTTP library puts on the wire
        took = time.monotonic() - started
        if took > 2:
            self.slow.append(
                f"{took:.1f} s {case.method} {case.formatted_path} {response.status_code}"
            )
        self.statuses[response.status_code] += 1
        if case.operation.path in BOOKED and response.status_code == 200:
            self.chat_ok += 1
        problem = _check(case, response)
        if problem is not None:
            self.problems.append(problem)
