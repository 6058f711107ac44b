"""Budgets and rate limits on the request path: a real gateway, the simulator, real Redis
and the real openai SDK. Teams come from `X-Farebox-Team` (open mode: no keys needed),
their limits from the YAML configuration; each test uses a team name of its own, so the
shared Redis never mixes two tests' counters."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from sqlalchemy import func, select

from gateway.ledger import make_engine
from gateway.ledger.models import RequestRow
from gateway.settings import RedisLimits
from gateway.tenants import Scope
from gateway.tenants.redis import RedisLimiter
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory
from tests.redis_service import require_redis
from tests.servers import free_port

pytestmark = pytest.mark.redis

INPUT_PER_M, OUTPUT_PER_M = Decimal(2), Decimal(10)  # USD per million tokens
CAP = 200  # max_tokens of every request: its output costs at most $0.002
MESSAGES = [{"role": "user", "content": "Count the ways a budget can hold."}]
ADMIN_KEY = "adm-quota-0123456789abcdef"
PATIENT = RedisLimits(timeout_s=2, connect_timeout_s=2, pool_wait_s=5)


def _config(sim: SimControl, tenants: str) -> str:
    return f"""
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim.base_url}", family: openai}}
prices:
  chat:
    input: {INPUT_PER_M}
    output: {OUTPUT_PER_M}
    tiers: {{flex: {{multiplier: 0.5}}}}
routing:
  chat:
    tiers:
      flex: {{set: {{service_tier: flex}}}}
    fallbacks:
      - {{from_tier: flex, statuses: [503], tier: standard}}
    retry: {{attempts: 0}}
tenants:
{tenants}
"""


def _start(
    make_gateway: GatewayFactory,
    sim: SimControl,
    tmp_path: Path,
    tenants: str,
    redis_url: str | None = None,
    **settings: object,
) -> Gateway:
    path = tmp_path / "farebox.yaml"
    path.write_text(_config(sim, tenants))
    url = redis_url or require_redis()
    return make_gateway(config=path, redis_url=url, redis_limits=PATIENT, **settings)


def _new_key(gateway: Gateway, **attributes: object) -> dict[str, str]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    made = httpx.post(f"{gateway.server.url}/admin/keys", json=attributes, headers=admin)
    assert made.status_code == 201, made.text
    return dict(made.json())


def _team() -> str:
    return f"team-{uuid.uuid4().hex[:12]}"


def _ask(client: openai.OpenAI, team: str, tier: str | None = None) -> ChatCompletion:
    return client.chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=CAP,
        extra_headers={"X-Farebox-Team": team},
        extra_body={"service_tier": tier} if tier else None,
    )


def _usage(team: str) -> tuple[Decimal, Decimal]:
    """The team's day window in Redis: (spent, held)."""

    async def read() -> tuple[Decimal, Decimal]:
        limiter = RedisLimiter.from_url(require_redis(), "farebox", PATIENT)
        try:
            used = await limiter.usage(Scope("team", team), "day", datetime.now(UTC))
        finally:
            await limiter.aclose()
        return used.spent_usd, used.held_usd

    return asyncio.run(read())


def _ledger(gateway: Gateway) -> tuple[int, Decimal]:
    """Rows in the ledger and their summed cost (after the gateway stopped: all flushed)."""

    async def read() -> tuple[int, Decimal]:
        engine = make_engine(gateway.settings.ledger_url())
        try:
            async with engine.connect() as connection:
                count = select(func.count(), func.sum(RequestRow.cost_total))
                rows, total = (await connection.execute(count)).one()
        finally:
            await engine.dispose()
        return int(rows or 0), Decimal(total or 0)

    return asyncio.run(read())


def _sent(sim: SimControl) -> list[dict[str, object]]:
    return [json.loads(base64.b64decode(str(r["body_b64"]))) for r in sim.requests()]


def _spend_until_refused(
    client: openai.OpenAI, team: str, limit: int = 50
) -> tuple[int, Exception]:
    for served in range(limit):
        try:
            _ask(client, team)
        except openai.RateLimitError as exc:
            return served, exc
    raise AssertionError(f"{limit} requests and no refusal")


def test_a_team_budget_refuses_with_insufficient_quota_and_settles_to_the_ledger(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(
        make_gateway, sim, tmp_path, f"  teams:\n    {team}: {{budget: {{daily_usd: 0.01}}}}"
    )
    served, refused = _spend_until_refused(gateway.sdk(), team)
    assert served >= 3  # each reserves about $0.002 and settles less
    assert isinstance(refused, openai.RateLimitError)
    assert refused.status_code == 429 and refused.code == "insufficient_quota"
    body = refused.body
    assert isinstance(body, dict) and body["type"] == "insufficient_quota"
    message = refused.message
    assert f"team '{team}' may spend $0.01 a day (UTC)" in message
    assert "is spent and" in message and "held by requests in flight" in message
    assert "It resets at " in message and "T00:00:00Z" in message
    # Nothing is held (one client, one request at a time): only the reset makes room, so
    # the SDKs are told not to retry.
    assert refused.response.headers["x-should-retry"] == "false"
    # Refused requests reach neither the upstream nor the ledger.
    assert len(sim.requests()) == served
    spent, held = _usage(team)
    assert held == 0
    gateway.stop()
    rows, booked = _ledger(gateway)
    assert rows == served
    assert spent == booked  # the engine's count is the ledger's, to 1e-10 USD
    assert Decimal("0.01") - Decimal("0.0021") < spent <= Decimal("0.01")


def test_a_rate_limit_answers_429_with_retry_after(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    tenants = f"  teams:\n    {team}: {{rate_limit: {{requests_per_min: 2}}}}"
    gateway = _start(make_gateway, sim, tmp_path, tenants)
    client = gateway.sdk()
    _ask(client, team)
    _ask(client, team)
    with pytest.raises(openai.RateLimitError) as caught:
        _ask(client, team)
    error = caught.value
    assert error.code == "rate_limit_exceeded"
    assert isinstance(error.body, dict) and error.body["type"] == "requests"
    assert f"Rate limit reached for team '{team}' on requests per min" in error.message
    retry_after = int(error.response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert len(sim.requests()) == 2
    # Another team has no limit and is not slowed by this one's.
    _ask(client, _team())


def test_an_upstream_failure_gives_the_hold_back(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(
        make_gateway, sim, tmp_path, f"  teams:\n    {team}: {{budget: {{daily_usd: 1}}}}"
    )
    sim.fault(status=500, count=1)
    with pytest.raises(openai.InternalServerError):
        _ask(gateway.sdk(), team)
    assert _usage(team) == (Decimal(0), Decimal(0))  # nothing billed, nothing held


def test_a_fallback_to_a_dearer_tier_tops_up_or_is_refused(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    # On flex a request's worst case is about $0.001; on standard about $0.002.
    roomy, tight = _team(), _team()
    tenants = (
        f"  teams:\n    {roomy}: {{budget: {{daily_usd: 1}}}}\n"
        f"    {tight}: {{budget: {{daily_usd: 0.0015}}}}"
    )
    gateway = _start(make_gateway, sim, tmp_path, tenants)
    client = gateway.sdk()
    sim.fault(status=503, count=1, match={"service_tier": "flex"})
    reply = _ask(client, roomy, tier="flex")
    assert reply.choices[0].message.content
    flex, standard = _sent(sim)
    assert flex["service_tier"] == "flex" and standard.get("service_tier") != "flex"
    spent, held = _usage(roomy)
    assert held == 0 and spent > 0
    sim.reset()
    sim.fault(status=503, count=1, match={"service_tier": "flex"})
    task = f"task-{uuid.uuid4().hex[:8]}"
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="chat",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=CAP,
            extra_headers={"X-Farebox-Team": tight, "X-Task-Id": task, "X-Task-Done": "true"},
            extra_body={"service_tier": "flex"},
        )
    assert caught.value.code == "insufficient_quota"
    assert len(sim.requests()) == 1  # the flex attempt only: the fallback was never sent
    assert _usage(tight) == (Decimal(0), Decimal(0))
    # The task still ends with its last request: as failed.
    shown = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=10).json()
    assert (shown["ended"], shown["status"]) == ("finished", "failed"), shown
    gateway.stop()
    _, booked = _ledger(gateway)
    assert booked == spent  # the failed flex attempts cost nothing; the fallback its cost


def test_crossing_a_soft_limit_counts_an_alert(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    tenants = f"  teams:\n    {team}: {{budget: {{daily_usd: 0.01, soft_ratio: 0.1}}}}"
    gateway = _start(make_gateway, sim, tmp_path, tenants)
    client = gateway.sdk()
    name = "farebox_budget_soft_limit_crossed_total"
    series = f'{name}{{period="day",scope="team",scope_id="{team}"}}'
    for _ in range(4):
        _ask(client, team)
    metrics = httpx.get(f"{gateway.server.url}/metrics", timeout=10).text
    assert f"{series} 1.0" in metrics  # once per window, however many settles pass it


def test_with_redis_unreachable_fail_closed_refuses_and_fail_open_serves(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    closed, opened = _team(), _team()
    tenants = (
        f"  teams:\n    {closed}: {{budget: {{daily_usd: 1}}}}\n"
        f"    {opened}: {{budget: {{daily_usd: 1, on_state_outage: fail_open}}}}"
    )
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gateway = _start(make_gateway, sim, tmp_path, tenants, redis_url=nowhere)
    client = gateway.sdk()
    with pytest.raises(openai.InternalServerError) as caught:
        _ask(client, closed)
    error = caught.value
    assert error.status_code == 503 and error.code == "budget_state_unavailable"
    assert f"The budget of team '{closed}' (day budget) cannot be checked" in error.message
    assert int(error.response.headers["retry-after"]) >= 1
    assert _ask(client, opened).choices[0].message.content
    for _ in range(PATIENT.failures):  # the limiter counts Redis away after this many calls
        with pytest.raises(openai.InternalServerError):
            _ask(client, closed)
    assert len(sim.requests()) == 1
    ready = httpx.get(f"{gateway.server.url}/readyz", timeout=10).json()
    assert ready["status"] == "degraded"
    assert ready["budgets"]["status"] == "degraded"
    assert ready["budgets"]["refusing"] == [f"team '{closed}'"]
    assert "fail_closed" in ready["budgets"]["fail_closed"]


def test_a_bad_budget_in_the_configuration_is_refused_naming_the_field(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    from gateway.config import ConfigError, parse_config

    text = _config(sim, "  teams:\n    acme: {budget: {daily_usd: -1}}")
    with pytest.raises(ConfigError, match=r"tenants\.teams\.acme\.budget\.daily_usd"):
        parse_config(text)
    text = _config(sim, "  teams:\n    acme: {budget: {dayly_usd: 1}}")
    with pytest.raises(ConfigError, match=r"tenants\.teams\.acme\.budget\.dayly_usd"):
        parse_config(text)


def test_a_key_budget_from_its_attributes_refuses_that_key_only(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(make_gateway, sim, tmp_path, "  teams: {}", admin_key=ADMIN_KEY)
    tight = _new_key(gateway, team=team, budget={"daily_usd": "0.005"})
    other = _new_key(gateway, team=team)
    served, refused = _spend_until_refused(gateway.sdk(api_key=tight["key"]), team)
    assert served >= 1 and isinstance(refused, openai.RateLimitError)
    assert refused.code == "insufficient_quota"
    assert f"key '{tight['id']}' may spend $0.005 a day (UTC)" in refused.message
    assert tight["key"] not in refused.message  # the id, never the secret
    assert len(sim.requests()) == served
    _ask(gateway.sdk(api_key=other["key"]), team)  # the team has no budget of its own
    gateway.stop()
    rows, _ = _ledger(gateway)
    assert rows == served + 1


def test_a_key_rate_limit_answers_429_with_retry_after(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(make_gateway, sim, tmp_path, "  teams: {}", admin_key=ADMIN_KEY)
    key = _new_key(gateway, team=team, rate_limit={"requests_per_min": 1})
    client = gateway.sdk(api_key=key["key"])
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=CAP,
    )
    assert raw.headers["x-farebox-budget-reserved-usd"]  # what the request held
    with pytest.raises(openai.RateLimitError) as caught:
        _ask(client, team)
    assert caught.value.code == "rate_limit_exceeded"
    assert f"key '{key['id']}'" in caught.value.message
    assert 1 <= int(caught.value.response.headers["retry-after"]) <= 60
    assert len(sim.requests()) == 1


def test_a_stream_settles_when_its_last_byte_is_booked(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(
        make_gateway, sim, tmp_path, f"  teams:\n    {team}: {{budget: {{daily_usd: 1}}}}"
    )
    stream = gateway.sdk().chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=CAP,
        stream=True,
        extra_headers={"X-Farebox-Team": team},
    )
    chunks = [chunk for chunk in stream if isinstance(chunk, ChatCompletionChunk)]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text
    gateway.last(1)  # booked, and settled before the observers hear of it
    spent, held = _usage(team)
    assert held == 0 and spent > 0
    gateway.stop()
    _, booked = _ledger(gateway)
    assert booked == spent


def test_an_uncapped_request_reserves_the_model_maximum_or_32768_tokens(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(
        make_gateway, sim, tmp_path, f"  teams:\n    {team}: {{budget: {{daily_usd: 0.3}}}}"
    )
    client = gateway.sdk()
    # sim-chat is not in the price map: 32,768 tokens at $10 per million, over $0.3.
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="chat",
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_headers={"X-Farebox-Team": team},
        )
    assert "this request may cost up to $0.3277" in caught.value.message
    raw = client.chat.completions.with_raw_response.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=CAP,
        extra_headers={"X-Farebox-Team": team},
    )
    reserved = Decimal(raw.headers["x-farebox-budget-reserved-usd"])
    assert CAP * OUTPUT_PER_M / 10**6 < reserved < Decimal("0.0025")
    assert len(sim.requests()) == 1


def test_a_reload_with_a_bad_budget_is_refused_and_the_old_one_holds(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    team = _team()
    gateway = _start(
        make_gateway, sim, tmp_path, f"  teams:\n    {team}: {{budget: {{daily_usd: 0.001}}}}"
    )
    path = tmp_path / "farebox.yaml"
    path.write_text(_config(sim, f"  teams:\n    {team}: {{budget: {{daily_usd: lots}}}}"))
    refused = httpx.post(f"{gateway.server.url}/admin/reload", timeout=10)
    assert refused.status_code == 400
    assert f"tenants.teams.{team}.budget.daily_usd" in refused.json()["error"]["message"]
    with pytest.raises(openai.RateLimitError):  # the old $0.001 still holds
        _ask(gateway.sdk(), team)


def test_the_budgets_page_yaml_is_a_valid_configuration() -> None:
    from gateway.config import parse_config

    page = (Path(__file__).resolve().parents[2] / "docs" / "budgets.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", page, re.S)
    assert block is not None
    tenants = parse_config(block.group(1)).tenants
    research = tenants.teams["research"]
    assert research.budget is not None and research.budget.daily_usd == Decimal(50)
    assert research.rate_limit is not None and research.rate_limit.requests_per_min == 600
    assert tenants.teams["batch-jobs"].budget is not None
    assert tenants.teams["batch-jobs"].budget.on_state_outage == "fail_open"
    assert tenants.projects["search-eval"].rate_limit is not None


def test_a_project_token_limit_refuses_a_request_larger_than_its_minute(
    make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path
) -> None:
    project = f"project-{uuid.uuid4().hex[:12]}"
    tenants = f"  projects:\n    {project}: {{rate_limit: {{tokens_per_min: 150}}}}"
    gateway = _start(make_gateway, sim, tmp_path, tenants)
    with pytest.raises(openai.RateLimitError) as caught:
        gateway.sdk().chat.completions.create(
            model="chat",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=CAP,  # with its input, more than 150 tokens
            extra_headers={"X-Farebox-Project": project},
        )
    error = caught.value
    assert error.code == "rate_limit_exceeded"
    assert isinstance(error.body, dict) and error.body["type"] == "tokens"
    assert f"project '{project}' on tokens per min" in error.message
    assert "larger than the whole limit" in error.message
    assert error.response.headers["retry-after"] == "60"
    assert sim.requests() == []
