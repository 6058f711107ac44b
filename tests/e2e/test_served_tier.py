"""The tier billed is the tier served: policy plan, simulator, reply and ledger agree.

Each test sends through the official SDK to a gateway in front of the simulator, then reads
three views side by side: the body (and headers) the simulator received, the tier it
reported in its reply, and the ledger row (`tier_requested`, `tier_served`,
`tier_confirmed`, cost). A mismatch fails with all three printed.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.ledger.models import MONEY_SCALE
from gateway.pipeline.context import RequestContext
from gateway.settings import Settings
from tests.conftest import SimControl
from tests.hostile_upstream import HostileUpstream, ask, hostile_upstream
from tests.servers import ServerThread

ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Summarise the quarterly report."}
]
# USD per million tokens; flex halves, priority doubles, Claude's fast mode doubles.
GPT_IN, GPT_OUT = Decimal(2), Decimal(8)
CLAUDE_IN, CLAUDE_OUT = Decimal(5), Decimal(25)
MULTIPLIERS = {"standard": Decimal(1), "flex": Decimal("0.5"), "priority": Decimal(2)}


def _config(sim_url: str, quiet_url: str) -> dict[str, Any]:
    claude = {"provider": "anthropic", "model": "claude-sim", "base_url": sim_url}
    return {
        "models": {
            "gpt": {"model": "sim-chat", "base_url": f"{sim_url}/v1", "family": "openai"},
            "claude": {**claude, "api_key_env": "FAREBOX_TEST_ANTHROPIC_KEY"},
            "claude-no-fast": {**claude, "api_key_env": "FAREBOX_TEST_ANTHROPIC_KEY"},
            "local": {"model": "sim-chat", "base_url": f"{sim_url}/v1", "family": "vllm"},
            "local-unpriced": {"model": "sim-chat", "base_url": f"{sim_url}/v1", "family": "vllm"},
            # An OpenAI-compatible upstream that never says which tier served it.
            "quiet": {"base_url": quiet_url, "model": "quiet", "family": "openai"},
            "local-batch": {"model": "sim-thinker", "base_url": f"{sim_url}/v1", "family": "vllm"},
        },
        "prices": {
            "gpt": {
                "input": str(GPT_IN),
                "output": str(GPT_OUT),
                "tiers": {"flex": {"multiplier": "0.5"}, "priority": {"multiplier": 2}},
            },
            "claude": {
                "input": str(CLAUDE_IN),
                "output": str(CLAUDE_OUT),
                "tiers": {"fast": {"multiplier": 2}, "priority": {"multiplier": "1.5"}},
            },
            "local": {"input": 1, "output": 1, "tiers": {"batch": {"multiplier": "0.5"}}},
            "quiet": {"input": 1, "output": 1, "tiers": {"flex": {"multiplier": "0.5"}}},
        },
        "rules": [
            {"name": "no-priority", "match": {"team": "cheap"}, "tier": {"forbid": ["priority"]}},
            {
                "name": "strict-no-priority",
                "match": {"team": "strict"},
                "strict": True,
                "tier": {"forbid": ["priority"]},
            },
        ],
        "routing": {
            "local": {"tiers": {"batch": {"alias": "local-batch"}}},
            "local-unpriced": {"tiers": {"batch": {"alias": "local-batch"}}},
            "claude-no-fast": {"capabilities": {"supports_speed": False}},
        },
    }


class TierGateway:
    """A gateway on the tier test configuration, its ledger, and the simulator behind it."""

    def __init__(self, sim: SimControl, quiet: HostileUpstream, data_dir: Path) -> None:
        self.sim = sim
        self.seen: list[RequestContext] = []
        self.settings = Settings(data_dir=data_dir)
        config = GatewayConfig.model_validate(_config(sim.url, quiet.base_url))
        app = create_app(self.settings, config, observers=[self.seen.append])
        self.server = ServerThread(app, self.settings).start()
        self.sdk = openai.OpenAI(
            base_url=f"{self.server.url}/v1", api_key="sk-client", max_retries=0
        )

    def create(
        self, team: str = "default", headers: dict[str, str] | None = None, **body: Any
    ) -> Any:
        """A chat completion through the SDK, with its raw response (headers)."""
        extra = {"X-Farebox-Team": team, "X-Task-Id": f"t-{time.monotonic_ns()}"}
        body.setdefault("model", "gpt")
        body.setdefault("messages", MESSAGES)
        return self.sdk.chat.completions.with_raw_response.create(
            extra_headers={**extra, **(headers or {})}, **body
        )

    def received(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The last request the simulator received: its JSON body and its log record."""
        record = self.sim.requests()[-1]
        assert isinstance(record, dict)
        return json.loads(base64.b64decode(str(record["body_b64"]))), record

    def row(self, task: str) -> dict[str, Any]:
        """The ledger row of `task`, once committed."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            path = self.settings.data_dir / "farebox.db"
            if path.exists():
                with sqlite3.connect(path) as db:
                    db.row_factory = sqlite3.Row
                    try:
                        rows = db.execute("SELECT * FROM requests WHERE task_id = ?", (task,))
                        found = [dict(row) for row in rows.fetchall()]
                    except sqlite3.OperationalError:
                        found = []
                if found:
                    return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"no ledger row for task {task}")

    def stop(self) -> None:
        self.sdk.close()
        self.server.stop()


@pytest.fixture(scope="module")
def quiet() -> Iterator[HostileUpstream]:
    with hostile_upstream() as server:
        yield server


@pytest.fixture
def tiers(
    sim: SimControl, quiet: HostileUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TierGateway]:
    monkeypatch.setenv("FAREBOX_TEST_ANTHROPIC_KEY", ANTHROPIC_KEY)
    gateway = TierGateway(sim, quiet, tmp_path)
    yield gateway
    gateway.stop()


def _three_views(sent: dict[str, Any], reply: dict[str, Any], row: dict[str, Any]) -> str:
    view = {"simulator received": sent, "upstream reported": reply, "ledger": row}
    return json.dumps(view, indent=1, default=str)


def _money(row: dict[str, Any]) -> Decimal:
    """The row's total in USD (SQLite keeps money as an integer of fixed scale)."""
    return Decimal(int(row["cost_total"])).scaleb(-MONEY_SCALE)


def _task(raw: Any) -> str:
    return str(raw.http_response.request.headers["x-task-id"])


def _cost(usage: Any, price_in: Decimal, price_out: Decimal, multiplier: Decimal) -> Decimal:
    per_token = Decimal(1) / Decimal(1_000_000)
    tokens_cost = usage.prompt_tokens * price_in + usage.completion_tokens * price_out
    return tokens_cost * per_token * multiplier


# (route, tier asked) -> what the simulator must receive, the tier billed, its multiplier.
# `service_tier` is as the simulator received it: litellm sends OpenAI's `default` to
# Anthropic as `standard_only`. Anthropic serves `auto` at standard without a priority
# commitment and says so in `usage.service_tier`, so priority asked there bills standard.
MATRIX = [
    ("gpt", "standard", {"service_tier": None, "speed": None}, "standard", "1"),
    ("gpt", "flex", {"service_tier": "flex", "speed": None}, "flex", "0.5"),
    ("gpt", "priority", {"service_tier": "priority", "speed": None}, "priority", "2"),
    ("gpt", "fast", {"service_tier": None, "speed": None}, "standard", "1"),  # not offered
    ("claude", "standard", {"service_tier": "standard_only", "speed": None}, "standard", "1"),
    ("claude", "flex", {"service_tier": "standard_only", "speed": None}, "standard", "1"),
    ("claude", "priority", {"service_tier": "auto", "speed": None}, "standard", "1"),
    ("claude", "fast", {"service_tier": None, "speed": "fast"}, "fast", "2"),
]
PRICES = {"gpt": (GPT_IN, GPT_OUT), "claude": (CLAUDE_IN, CLAUDE_OUT)}


@pytest.mark.parametrize(("model", "tier", "sent_fields", "served", "multiplier"), MATRIX)
def test_plan_upstream_and_ledger_agree_per_route_and_tier(
    tiers: TierGateway,
    model: str,
    tier: str,
    sent_fields: dict[str, str | None],
    served: str,
    multiplier: str,
) -> None:
    raw = tiers.create(model=model, headers={"X-Speed-Tier": tier})
    completion = raw.parse()
    sent, record = tiers.received()
    row = tiers.row(_task(raw))
    reported = {"service_tier": completion.service_tier, "usage": completion.usage.model_dump()}
    views = _three_views(sent, reported, row)
    assert {key: sent.get(key) for key in sent_fields} == sent_fields, views
    assert (row["tier_requested"], row["tier_served"], row["tier_confirmed"]) == (
        tier,
        served,
        1,
    ), views
    price_in, price_out = PRICES[model]
    assert _money(row) == _cost(completion.usage, price_in, price_out, Decimal(multiplier)), views
    assert raw.headers["x-farebox-tier"] == served
    assert raw.headers["x-farebox-tier-confirmed"] == "true"
    assert raw.headers.get("x-farebox-tier-requested") == (None if served == tier else tier)
    if model == "gpt":
        assert completion.service_tier == (sent_fields["service_tier"] or "default"), views
    else:
        assert record["speed"] == ("fast" if served == "fast" else "standard"), views


@pytest.mark.parametrize("model", ["gpt", "claude"])
def test_batch_is_refused_where_no_route_serves_it(tiers: TierGateway, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiers.create(model=model, headers={"X-Speed-Tier": "batch"})
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "X-Speed-Tier"
    assert tiers.sim.requests() == []


def test_a_forbidden_client_service_tier_is_rewritten_and_said(tiers: TierGateway) -> None:
    for asked in ("priority", "scale"):
        raw = tiers.create(team="cheap", service_tier=asked)
        completion = raw.parse()
        sent, _ = tiers.received()
        row = tiers.row(_task(raw))
        views = _three_views(sent, {"service_tier": completion.service_tier}, row)
        assert sent["service_tier"] == "default", views  # never forwarded as sent
        assert completion.service_tier == "default", views
        assert (row["tier_requested"], row["tier_served"]) == ("priority", "standard"), views
        assert row["tier_confirmed"] == 1, views
        assert raw.headers["x-farebox-tier"] == "standard"
        assert raw.headers["x-farebox-tier-requested"] == "priority"
        assert _money(row) == _cost(completion.usage, GPT_IN, GPT_OUT, Decimal(1))


def test_a_strict_rule_refuses_a_forbidden_service_tier(tiers: TierGateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        tiers.create(team="strict", service_tier="priority")
    assert caught.value.status_code == 400
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "service_tier"
    assert tiers.sim.requests() == []  # nothing reached the upstream


def test_an_unknown_service_tier_never_reaches_the_upstream(tiers: TierGateway) -> None:
    raw = tiers.create(service_tier="turbo")
    sent, _ = tiers.received()
    assert sent["service_tier"] == "default"
    assert raw.headers["x-farebox-tier"] == "standard"


def test_anthropic_fast_mode_reaches_the_messages_api(tiers: TierGateway) -> None:
    httpx.post(f"{tiers.sim.url}/sim/config", json={"decode_ms_per_token": 0.01}).raise_for_status()
    standard_raw = tiers.create(model="claude")
    _, standard_record = tiers.received()
    raw = tiers.create(model="claude", headers={"X-Speed-Tier": "fast"})
    completion = raw.parse()
    sent, record = tiers.received()
    row = tiers.row(_task(raw))
    views = _three_views(sent, {"usage": completion.usage.model_dump()}, row)
    assert sent["speed"] == "fast", views
    assert "fast-mode-2026-02-01" in record["headers"]["anthropic-beta"], views
    assert record["speed"] == "fast" and standard_record["speed"] == "standard", views
    # Fast mode decodes faster: the simulator's planned decode time for the same output.
    assert record["planned_decode_ms"] < standard_record["planned_decode_ms"], views
    assert (row["tier_requested"], row["tier_served"], row["tier_confirmed"]) == (
        "fast",
        "fast",
        1,
    ), views
    expected = _cost(completion.usage, CLAUDE_IN, CLAUDE_OUT, Decimal(2))
    assert _money(row) == expected, views
    standard_row = tiers.row(_task(standard_raw))
    assert standard_row["tier_served"] == "standard"


def test_batch_routes_where_offered_and_is_refused_elsewhere(tiers: TierGateway) -> None:
    raw = tiers.create(model="local", headers={"X-Speed-Tier": "batch"})
    completion = raw.parse()
    sent, _ = tiers.received()
    row = tiers.row(_task(raw))
    views = _three_views(sent, {"model": completion.model}, row)
    assert sent["model"] == "sim-thinker", views  # the batch pool's upstream
    assert (row["tier_requested"], row["tier_served"], row["tier_confirmed"]) == (
        "batch",
        "batch",
        1,
    ), views
    with pytest.raises(openai.BadRequestError) as caught:
        tiers.create(model="gpt", headers={"X-Speed-Tier": "batch"})
    assert isinstance(caught.value.body, dict) and caught.value.body.get("param") == "X-Speed-Tier"
    assert "batch" in str(caught.value.body.get("message"))

    with pytest.raises(openai.BadRequestError) as unpriced:
        tiers.create(model="local-unpriced", headers={"X-Speed-Tier": "batch"})
    body = unpriced.value.body
    assert isinstance(body, dict) and body.get("param") == "X-Speed-Tier"
    assert "add prices.local-unpriced.tiers.batch" in str(body.get("message"))


def test_an_upstream_that_says_nothing_is_billed_as_asked_and_flagged(tiers: TierGateway) -> None:
    raw = tiers.create(model="quiet", messages=ask("ok"), headers={"X-Speed-Tier": "flex"})
    completion = raw.parse()
    row = tiers.row(_task(raw))
    views = _three_views({}, {"service_tier": completion.service_tier}, row)
    assert completion.service_tier is None, views
    assert (row["tier_served"], row["tier_confirmed"]) == ("flex", 0), views
    assert raw.headers["x-farebox-tier-confirmed"] == "false"
    assert _money(row) == _cost(completion.usage, Decimal(1), Decimal(1), Decimal("0.5"))
    metrics = httpx.get(f"{tiers.server.url}/metrics", timeout=10).text
    assert 'farebox_tier_unconfirmed_total{model="quiet",tier="flex"} 1.0' in metrics


def test_anthropic_reports_its_service_tier_so_standard_is_confirmed(tiers: TierGateway) -> None:
    raw = tiers.create(model="claude")
    row = tiers.row(_task(raw))
    assert (row["tier_served"], row["tier_confirmed"]) == ("standard", 1), row
    assert raw.headers["x-farebox-tier-confirmed"] == "true"


@pytest.mark.parametrize(
    ("model", "tier"), [("gpt", "priority"), ("claude", "fast"), ("claude", "standard")]
)
def test_a_stream_says_the_tier_in_its_last_usage_chunk(
    tiers: TierGateway, model: str, tier: str
) -> None:
    stream = tiers.sdk.chat.completions.create(
        model=model,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Speed-Tier": tier, "X-Task-Id": f"s-{model}-{tier}"},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None and usage.model_extra is not None
    cost = usage.model_extra["cost"]
    sent, record = tiers.received()
    row = tiers.row(f"s-{model}-{tier}")
    views = _three_views(sent, cost, row)
    assert (cost["tier"], cost["tier_confirmed"]) == (tier, True), views
    assert (row["tier_served"], row["tier_confirmed"], row["streamed"]) == (tier, 1, 1), views
    if model == "claude":
        # Anthropic said it in message_start; litellm's chunks drop it, the relay keeps it.
        assert usage.model_extra["service_tier"] == "standard", views
        fast = tier == "fast"
        assert sent.get("speed") == ("fast" if fast else None), views
        assert record["speed"] == ("fast" if fast else "standard"), views
    else:
        assert sent["service_tier"] == "priority", views
        assert all(c.service_tier == "priority" for c in chunks), views


def test_fast_where_the_model_has_none_is_neither_sent_nor_billed(tiers: TierGateway) -> None:
    raw = tiers.create(model="claude-no-fast", headers={"X-Speed-Tier": "fast"})
    completion = raw.parse()
    sent, record = tiers.received()
    row = tiers.row(_task(raw))
    views = _three_views(sent, {"usage": completion.usage.model_dump()}, row)
    assert "speed" not in sent and record["speed"] == "standard", views
    assert "fast-mode" not in record["headers"].get("anthropic-beta", ""), views
    assert (row["tier_requested"], row["tier_served"], row["tier_confirmed"]) == (
        "fast",
        "standard",
        1,
    ), views
    assert raw.headers["x-farebox-tier"] == "standard"
    assert raw.headers["x-farebox-tier-requested"] == "fast"


def test_anthropic_priority_is_billed_where_the_account_has_priority_capacity(
    tiers: TierGateway,
) -> None:
    config = httpx.get(f"{tiers.sim.url}/sim/config", timeout=10).json()
    models = [
        {**model, "priority_capacity": model["name"] == "claude-sim"} for model in config["models"]
    ]
    httpx.post(f"{tiers.sim.url}/sim/config", json={"models": models}).raise_for_status()
    for asked, sent_tier, served, multiplier in [
        ("priority", "auto", "priority", "1.5"),  # auto may use the capacity: it did
        ("standard", "standard_only", "standard", "1"),  # standard_only declines it
    ]:
        raw = tiers.create(model="claude", headers={"X-Speed-Tier": asked})
        completion = raw.parse()
        sent, _ = tiers.received()
        row = tiers.row(_task(raw))
        views = _three_views(sent, {"usage": completion.usage.model_dump()}, row)
        assert sent["service_tier"] == sent_tier, views
        assert completion.usage.model_extra["service_tier"] == served, views
        assert (row["tier_served"], row["tier_confirmed"]) == (served, 1), views
        expected = _cost(completion.usage, CLAUDE_IN, CLAUDE_OUT, Decimal(multiplier))
        assert _money(row) == expected, views
