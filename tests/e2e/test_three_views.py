"""Every number is what happened: plan, upstream and ledger agree, per family, tier and mode.

For each backend family (OpenAI, Anthropic through litellm, vLLM, SGLang) x speed tier x
thinking mode (off, a rule's budget, the client's effort), streamed and whole, one request
goes through the official SDK to a gateway in front of the simulator, and three views of
it are compared:

    planned   `farebox policy explain --json` for the same body, headers and config
    upstream  the body and headers the simulator received, the usage and tier it reported
    billed    the ledger row: tiers, tokens, cost components, enforcement, TTFT

A mismatch fails with the three side by side (`tests/e2e/three_views.py`). Tiers a family
does not offer are either served at standard and said so (`tier_requested` kept), or, for
the tiers that change what is bought (batch, ultrafast), refused with a 400 naming
`X-Speed-Tier` before anything reaches the upstream; `explain` refuses them too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.app import create_app
from gateway.policy.cli import policy_explain
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.e2e.three_views import (
    BLANK,
    COMPONENTS,
    Comparison,
    billed_usage,
    messages_view,
    priced,
    received_body,
    reported_tier,
    reported_usage,
)
from tests.servers import ServerThread

KEY_ENV = "THREE_VIEWS_ANTHROPIC_KEY"  # not FAREBOX_*: the autouse scrub would remove it
BUDGET = 16  # the rule's thinking budget, under the simulator's 40 reasoning tokens
QUESTION = [{"role": "user", "content": "Plan the migration of the billing tables."}]
ABSENT = "(absent)"

# USD per million tokens. Each component has its own price, so tokens booked under the
# wrong one change the total; reasoning is priced apart where the family reports it.
PRICES: dict[str, dict[str, Any]] = {
    "gpt": {
        "input": 2, "cached_input": "0.5", "output": 8, "reasoning": 10,
        "tiers": {"flex": {"multiplier": "0.5"}, "priority": {"multiplier": 2}},
    },
    "claude": {
        "input": 5, "cached_input": "0.5", "cache_write": "6.25", "output": 25,
        "tiers": {"priority": {"multiplier": "1.5"}, "fast": {"multiplier": 2}},
    },
    "vllm": {"input": 1, "cached_input": "0.1", "output": 3, "reasoning": 4},
    "sglang": {"input": "1.5", "cached_input": "0.2", "output": "3.5", "reasoning": "4.5"},
}  # fmt: skip


def _config(sim_url: str) -> dict[str, Any]:
    openai_wire = {"provider": "openai", "base_url": f"{sim_url}/v1"}
    claude = {"provider": "anthropic", "base_url": sim_url, "api_key_env": KEY_ENV}
    return {
        "models": {
            "gpt": {**openai_wire, "model": "sim-thinker", "family": "openai"},
            "claude": {**claude, "model": "claude-sim"},
            "vllm": {**openai_wire, "model": "sim-thinker", "family": "vllm"},
            "sglang": {**openai_wire, "model": "sim-sglang-thinker", "family": "sglang"},
        },
        "prices": PRICES,
        "rules": [{"name": "budgeted", "match": {"tags": ["budget"]}, "thinking_budget": BUDGET}],
        # The simulator's models are not in litellm's map: say what each can do.
        "routing": {
            "gpt": {"capabilities": {"supports_reasoning": True}},
            "claude": {"capabilities": {"supports_reasoning": True}},
            "vllm": {
                "capabilities": {"supports_reasoning": True, "supports_thinking_budget": True}
            },
            "sglang": {"capabilities": {"supports_reasoning": True}},
        },
    }


FAMILIES = {"openai": "gpt", "anthropic": "claude", "vllm": "vllm", "sglang": "sglang"}
# Tiers each family serves natively, plus one it does not offer (served at standard).
TIERS = {
    "openai": ("standard", "flex", "priority"),
    "anthropic": ("standard", "priority", "fast", "flex"),
    "vllm": ("standard", "priority"),
    "sglang": ("standard", "flex"),
}
REFUSED = {"openai": "batch", "anthropic": "ultrafast", "vllm": "batch", "sglang": "ultrafast"}
MODES = ("off", "budget", "effort")


@dataclass(frozen=True)
class Case:
    """One request of the matrix; `via_body` asks for the tier in the client's own field."""

    family: str
    tier: str
    mode: str
    stream: bool
    via_body: bool = False
    cache_round: int = 0  # 1, 2: a long prompt with a cache breakpoint, written then read

    def __str__(self) -> str:
        how = "body" if self.via_body else "header"
        name = f"{self.family}-{self.tier}-{how}-{self.mode}-{'stream' if self.stream else 'whole'}"
        return name + ("", "-cache-write", "-cache-read")[self.cache_round]

    @property
    def alias(self) -> str:
        return FAMILIES[self.family]

    @property
    def task(self) -> str:
        return f"three-views-{self}"

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.alias, "messages": self.messages()}
        if self.mode != "budget":
            body["reasoning_effort"] = "none" if self.mode == "off" else "low"
        if self.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        if self.via_body:  # Anthropic's fast mode is its own field; other tiers are OpenAI's
            fast = self.family == "anthropic" and self.tier == "fast"
            body |= {"speed": "fast"} if fast else {"service_tier": self.tier}
        return body

    def messages(self) -> list[dict[str, Any]]:
        if not self.cache_round:
            return QUESTION
        # Over the simulator's 1024-token minimum; one prompt per stream flag, so each
        # pair starts with a write.
        text = " ".join(f"clause {i} of contract {self.stream};" for i in range(400))
        mark = {"type": "ephemeral"}
        question = {"type": "text", "text": QUESTION[0]["content"]}
        content = [{"type": "text", "text": text, "cache_control": mark}, question]
        return [{"role": "user", "content": content}]

    def headers(self) -> dict[str, str]:
        headers = {"X-Task-Id": self.task} | ({} if self.via_body else {"X-Speed-Tier": self.tier})
        return headers | ({"X-Farebox-Tags": "budget"} if self.mode == "budget" else {})


# The client's own tier field, under the policy like the header: honoured where the family
# serves the tier, dropped (and the standard tier said) where it does not.
BODY_TIERS = {"openai": "flex", "anthropic": "fast", "vllm": "priority", "sglang": "flex"}


def _param(case: Case) -> Any:
    return pytest.param(case, id=str(case))


def _cases() -> list[Any]:
    by_header = [
        _param(Case(family, tier, mode, stream))
        for family, tiers in TIERS.items()
        for tier in tiers
        for mode in MODES
        for stream in (False, True)
    ]
    by_body = [
        _param(Case(family, tier, "budget", stream, via_body=True))
        for family, tier in BODY_TIERS.items()
        for stream in (False, True)
    ]
    return by_header + by_body


class Stack:
    """One gateway on the four-family configuration file, its simulator and an SDK client."""

    def __init__(self, sim_url: str, workdir: Path) -> None:
        self.sim = SimControl(sim_url)
        self.sim.reset()
        self._give_claude_priority_capacity()
        self.config = workdir / "farebox.yaml"
        self.config.write_text(yaml.safe_dump(_config(sim_url), sort_keys=False))
        settings = Settings(data_dir=workdir / "data", config=self.config)
        self.server = ServerThread(create_app(settings, None), settings).start()
        self.url = self.server.url
        self.sdk = openai.OpenAI(base_url=f"{self.url}/v1", api_key="sk-client", max_retries=0)
        deadline = time.monotonic() + 120
        while httpx.get(f"{self.url}/readyz", timeout=10).json()["status"] == "warming":
            assert time.monotonic() < deadline, "the gateway never finished warming up"
            time.sleep(0.05)

    def _give_claude_priority_capacity(self) -> None:
        """Let `service_tier: auto` be served at priority, so priority is really bought."""
        models = self.sim.http.get("/sim/config").json()["models"]
        for model in models:
            model["priority_capacity"] = model["name"] == "claude-sim"
        self.sim.http.post("/sim/config", json={"models": models}).raise_for_status()

    def claude_has_priority_capacity(self) -> bool:
        """Whether the simulator's Claude serves `auto` at priority (read, not assumed)."""
        models = self.sim.http.get("/sim/config").json()["models"]
        return any(m["name"] == "claude-sim" and m["priority_capacity"] for m in models)

    def explain(self, case: Case, into: Path, capsys: pytest.CaptureFixture[str]) -> Any:
        """`farebox policy explain --json` for the case: exit status and its JSON."""
        request = into / "request.json"
        request.write_text(json.dumps(case.body()))
        headers = [f"{k}: {v}" for k, v in case.headers().items()]
        capsys.readouterr()
        status = policy_explain(request, self.config, headers, json_output=True)
        return status, json.loads(capsys.readouterr().out)

    def send(self, case: Case) -> tuple[Mapping[str, str], dict[str, Any]]:
        """Send through the SDK; the response headers and the usage the client was given."""
        fields = case.body()
        speed = {"speed": fields.pop("speed")} if "speed" in fields else {}  # not an SDK field
        raw = self.sdk.chat.completions.with_raw_response.create(
            extra_headers=case.headers(), extra_body=speed or None, **fields
        )
        parsed = raw.parse()
        if case.stream:
            usages = [chunk.usage for chunk in parsed if chunk.usage is not None]
            usage = usages[-1]
        else:
            usage = parsed.usage
        return raw.headers, usage.model_dump()

    def records(self) -> list[dict[str, Any]]:
        return [dict(record) for record in self.sim.requests()]

    def row(self, task: str) -> dict[str, Any]:
        """The task's one ledger row, once written (a stream's after its relay closes)."""
        deadline = time.monotonic() + 15
        while True:
            reply = httpx.get(f"{self.url}/v1/tasks/{task}", timeout=30)
            if reply.status_code == 200 and reply.json()["requests"]:
                rows = reply.json()["requests"]
                assert len(rows) == 1, rows
                return dict(rows[0])
            assert time.monotonic() < deadline, f"no ledger row for {task}: {reply.text}"
            time.sleep(0.05)

    def stop(self) -> None:
        self.sdk.close()
        self.server.stop()
        self.sim.reset()  # the shared simulator's capacity change ends with the module
        self.sim.close()


@pytest.fixture(scope="module")
def stack(sim_server: ServerThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, "sk-ant-test-0123456789abcdef")
        running = Stack(sim_server.url, tmp_path_factory.mktemp("three-views"))
        yield running
        running.stop()


def _compare_bodies(views: Comparison, family: str, planned: dict[str, Any], sent: Any) -> None:
    expected = messages_view(planned) if family == "anthropic" else planned
    label = "messages body" if family == "anthropic" else "body"
    for key in sorted(expected.keys() | sent.keys()):
        views.add(f"{label}.{key}", expected.get(key, ABSENT), sent.get(key, ABSENT), BLANK)


def _compare_headers(views: Comparison, planned: dict[str, str], received: Any) -> None:
    """Each header the planner sets arrives (litellm may add beta values of its own)."""
    for name, value in planned.items():
        got = received.get(name.lower(), ABSENT)
        arrived = {v.strip() for v in str(got).split(",")}
        wanted = {v.strip() for v in value.split(",")}
        views.note(f"header {name}", value, got, BLANK, wanted <= arrived)


def _compare_thinking(views: Comparison, case: Case, explained: Any, record: Any) -> None:
    """The thinking asked for happened, and a budget said to be held was held."""
    reasoning, held = int(record["reasoning_tokens"]), explained["thinking_enforcement"]
    if case.mode == "off":
        agree, rule = reasoning == 0, "none (thinking off)"
    elif held == "backend":
        budget = explained["thinking_budget"]
        agree, rule = 0 < reasoning <= budget, f"1..{budget} (held by the backend)"
    else:
        agree, rule = reasoning > 0, f"> 0 ({case.mode}, {held or 'no budget'})"
    views.note("reasoning tokens", rule, reasoning, BLANK, agree)


def _compare_billing(
    views: Comparison, case: Case, record: Any, row: dict[str, Any], capacity: bool
) -> None:
    reported, billed = reported_usage(record), billed_usage(row)
    for name in reported:
        views.add(f"usage.{name}", BLANK, reported[name], billed[name])
    tier = reported_tier(case.family, record, capacity)
    views.add("tier_served", BLANK, tier, row["tier_served"])
    views.add("tier_confirmed", BLANK, True, row["tier_confirmed"])
    book = priced(reported, PRICES[case.alias], tier)
    for name in (*COMPONENTS, "total"):
        views.add(f"cost.{name} (book x sim)", BLANK, book[name], row[f"cost_{name}"])


def _three_views(
    case: Case, explained: Any, records: list[dict[str, Any]], row: dict[str, Any], capacity: bool
) -> Comparison:
    views = Comparison(f"{case} (X-Task-Id {case.task})")
    views.note("upstream calls", 1, len(records), BLANK, len(records) == 1)
    record = records[-1]
    _compare_bodies(views, case.family, explained["body"], received_body(record))
    _compare_headers(views, explained["headers"], record["headers"])
    views.add("streamed", case.stream, record["stream"], row["streamed"])
    views.add("tier_requested", explained["tier"]["requested"], BLANK, row["tier_requested"])
    _compare_billing(views, case, record, row, capacity)
    enforcement = explained["thinking_enforcement"]
    views.add("thinking_enforcement", enforcement, BLANK, row["thinking_enforcement"])
    _compare_thinking(views, case, explained, record)
    ttft_ok = (row["ttft_ms"] is not None) == case.stream
    views.note("ttft_ms", "streams only", BLANK, row["ttft_ms"], ttft_ok)
    return views


def _client_view(case: Case, headers: Mapping[str, str], usage: dict[str, Any], row: Any) -> None:
    """What the client was told matches the ledger: the cost, the tier, who held the cap."""
    cost = usage["cost"]
    assert (cost["total"], cost["tier"]) == (row["cost_total"], row["tier_served"]), cost
    assert usage["prompt_tokens"] == row["prompt_tokens"], usage
    assert usage["completion_tokens"] == row["completion_tokens"], usage
    enforcement = headers.get("x-farebox-thinking-enforcement")
    assert enforcement == row["thinking_enforcement"], dict(headers)
    if not case.stream:  # a stream's headers leave before the upstream has said anything
        assert headers["x-farebox-tier"] == row["tier_served"], dict(headers)
        if row["tier_requested"] != row["tier_served"]:
            assert headers["x-farebox-tier-requested"] == row["tier_requested"], dict(headers)


def _agree(stack: Stack, case: Case, into: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """Send `case` and fail with the three views unless they agree; the simulator's record."""
    status, explained = stack.explain(case, into, capsys)
    assert status == 0, explained
    stack.sim.http.delete("/sim/requests").raise_for_status()
    try:
        headers, usage = stack.send(case)
    except openai.APIStatusError as error:
        sent = [received_body(r) for r in stack.records()]
        pytest.fail(f"{case}: {error}\nplanned: {explained['body']}\nreceived: {sent}")
    records = stack.records()
    row = stack.row(case.task)
    capacity = stack.claude_has_priority_capacity()
    views = _three_views(case, explained, records, row, capacity)
    if not views.ok:
        pytest.fail("\n" + views.report())
    _client_view(case, headers, usage, row)
    return records[-1]


@pytest.mark.parametrize("case", _cases())
def test_plan_upstream_and_ledger_agree(
    case: Case, stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _agree(stack, case, tmp_path, capsys)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_cache_writes_and_reads_are_billed_as_reported(
    stream: bool, stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Anthropic reports cache reads and writes beside `input_tokens`; each is priced apart."""
    write = _agree(
        stack, Case("anthropic", "standard", "off", stream, cache_round=1), tmp_path, capsys
    )
    read = _agree(
        stack, Case("anthropic", "standard", "off", stream, cache_round=2), tmp_path, capsys
    )
    assert write["cache_creation_tokens"] > 1024 and write["cached_tokens"] == 0, write
    assert read["cached_tokens"] == write["cache_creation_tokens"], read


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_tier_the_family_cannot_serve_is_refused_naming_the_header(
    family: str, stream: bool, stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = Case(family, REFUSED[family], "effort", stream)
    status, explained = stack.explain(case, tmp_path, capsys)
    assert status == 1 and explained["rejection"]["field"] == "X-Speed-Tier", explained
    stack.sim.http.delete("/sim/requests").raise_for_status()
    with pytest.raises(openai.BadRequestError) as caught:
        stack.send(case)
    body = caught.value.body
    assert isinstance(body, dict), body
    assert body.get("param") == "X-Speed-Tier" and case.tier in str(body.get("message")), body
    assert body.get("type") == "invalid_request_error", body
    assert stack.records() == []  # refused before anything reached the upstream
