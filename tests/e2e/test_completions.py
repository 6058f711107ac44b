"""`/v1/completions` and `/v1/embeddings` with the real `openai` SDK: SDK -> gateway ->
simulator -> ledger. Checked: the bytes the simulator received (the SDK's, only the
model renamed and Farebox's metadata removed), what the client got, what the ledger
billed (an embeddings price with input only), the step kinds, one task across both APIs,
the budget hold and refusals, and what the real API refuses.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.rawjson import patch_object
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway, GatewayFactory

CONFIG = """
models:
  text: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  embed: {{model: sim-embed, base_url: "{sim}/v1", family: vllm}}
  capped: {{model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  claude: {{provider: anthropic, model: claude-sim, base_url: "{sim}"}}
rules:
  - name: capped-output
    match: {{model: capped}}
    max_tokens: {{default: 6, ceiling: 6}}
prices:
  text: {{input: 1.00, cached_input: 0.10, output: 4.00}}
  embed: {{input: 0.02}}
tenants:
  teams:
    broke: {{budget: {{daily_usd: 0.0000001}}}}
    funded: {{budget: {{daily_usd: 10}}}}
"""
INPUT, CACHED, OUTPUT = Decimal("1e-6"), Decimal("1e-7"), Decimal("4e-6")
EMBED_INPUT = Decimal("0.02") / 1_000_000


class Recorded:
    """The bodies the SDK sent, as bytes on the wire."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> None:
        self.bodies.append(request.read())


@pytest.fixture
def gateway(make_gateway: GatewayFactory, sim: SimControl, tmp_path: Path) -> Gateway:
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(sim=sim.url))
    return make_gateway(config=config)


def _client(gateway: Gateway) -> tuple[openai.OpenAI, Recorded]:
    recorded = Recorded()
    return gateway.sdk(http_client=httpx.Client(event_hooks={"request": [recorded]})), recorded


def _sent(sim: SimControl) -> list[dict[str, Any]]:
    return [r for r in sim.requests() if str(r["path"]).startswith("/v1/")]


def _body(record: dict[str, Any]) -> bytes:
    return base64.b64decode(str(record["body_b64"]))


def _task(gateway: Gateway, task: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}/tasks/{task}", timeout=30)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_whole_completion_is_forwarded_as_sent_and_billed(
    gateway: Gateway, sim: SimControl
) -> None:
    client, recorded = _client(gateway)
    raw = client.completions.with_raw_response.create(
        model="text",
        prompt="Once upon a time, a fare box",
        max_tokens=5,
        extra_body={"metadata": {"task_id": "cmpl-whole"}},
    )
    completion = raw.parse()
    assert (
        completion.object == "text_completion" and completion.choices[0].finish_reason == "length"
    )
    usage = completion.usage
    assert usage is not None and usage.completion_tokens == 5
    (record,) = _sent(sim)
    assert record["path"] == "/v1/completions"
    # The SDK's bytes, with the alias renamed and Farebox's metadata removed.
    assert _body(record) == patch_object(recorded.bodies[0], {"model": "sim-chat"}, {"metadata"})
    ctx = gateway.last()
    assert ctx.task is not None and ctx.task.task_id == "cmpl-whole"
    assert ctx.task.step_kind == "completion"
    assert ctx.usage is not None and ctx.usage.prompt_tokens == record["prompt_tokens"]
    expected = usage.prompt_tokens * INPUT + 5 * OUTPUT
    assert ctx.cost is not None and ctx.cost.total == expected
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == expected
    assert (usage.model_extra or {})["cost"]["total"] == str(expected.normalize())


def test_a_stream_hides_the_usage_chunk_it_asked_for_and_books_the_default_cap(
    gateway: Gateway, sim: SimControl
) -> None:
    client, _ = _client(gateway)
    stream = client.completions.create(model="text", prompt=[9906, 1917, 0], stream=True)
    chunks = list(stream)
    assert all(chunk.choices for chunk in chunks)  # no usage chunk: the client asked none
    text = "".join(chunk.choices[0].text for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"
    (record,) = _sent(sim)
    sent = httpx.Response(200, content=_body(record)).json()
    assert sent["stream_options"] == {"include_usage": True} and sent["prompt"] == [9906, 1917, 0]
    assert record["prompt_tokens"] == 3 and record["completion_tokens"] == 16  # OpenAI's default
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.usage.completion_tokens == 16 == len(text.split())
    assert ctx.cost is not None and ctx.cost.total == 3 * INPUT + 16 * OUTPUT
    assert ctx.timings.first_token is not None and ctx.task is not None
    assert ctx.task.step_kind == "completion"


def test_a_stream_that_asks_for_usage_gets_it_with_its_cost(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    chunks = list(
        client.completions.create(
            model="text",
            prompt="Stream it",
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None and usage.completion_tokens == 4
    assert (usage.model_extra or {})["cost"]["output"] == str((4 * OUTPUT).normalize())


def test_embeddings_float_and_base64_are_priced_at_the_input_price(
    gateway: Gateway, sim: SimControl
) -> None:
    client, _ = _client(gateway)
    task = {"X-Task-Id": "embed-task"}
    floats = client.embeddings.create(
        model="embed",
        input=["fare box", "ticket machine"],
        encoding_format="float",
        dimensions=8,
        extra_headers=task,
    )
    # The SDK's default: base64 on the wire, decoded by the SDK into the same floats.
    decoded = client.embeddings.create(
        model="embed", input=["fare box", "ticket machine"], dimensions=8, extra_headers=task
    )
    raw = client.embeddings.with_raw_response.create(
        model="embed", input=[[1, 2, 3], [4, 5]], extra_headers=task | {"X-Task-Done": "true"}
    )
    assert [len(item.embedding) for item in floats.data] == [8, 8]
    assert [item.embedding for item in decoded.data] == [item.embedding for item in floats.data]
    tokens = raw.parse()
    assert len(tokens.data[0].embedding) == 1536 and tokens.usage.prompt_tokens == 5
    records = _sent(sim)
    assert [r["path"] for r in records] == ["/v1/embeddings"] * 3
    wire = [httpx.Response(200, content=_body(r)).json() for r in records]
    assert wire[0]["encoding_format"] == "float" and wire[1]["encoding_format"] == "base64"
    assert Decimal(raw.headers["x-farebox-cost-usd"]) == 5 * EMBED_INPUT
    task_row = _task(gateway, "embed-task")
    assert task_row["request_count"] == 3 and task_row["completion_tokens"] == 0
    prompt_tokens = floats.usage.prompt_tokens * 2 + 5
    assert task_row["prompt_tokens"] == prompt_tokens
    assert Decimal(task_row["cost"]["total"]) == prompt_tokens * EMBED_INPUT
    assert {row["step_kind"] for row in task_row["requests"]} == {"embedding"}


def test_one_task_spans_completions_and_embeddings(gateway: Gateway) -> None:
    client, _ = _client(gateway)
    headers = {"X-Task-Id": "mixed-task"}
    client.embeddings.create(model="embed", input="where is the depot", extra_headers=headers)
    client.completions.create(
        model="text", prompt="The depot is", max_tokens=3, extra_headers=headers
    )
    headers |= {"X-Task-Done": "true", "X-Task-Step-Kind": "summary"}
    list(client.completions.create(model="text", prompt="So", stream=True, extra_headers=headers))
    row = _task(gateway, "mixed-task")
    assert row["status"] == "success" and row["request_count"] == 3
    kinds = [r["step_kind"] for r in sorted(row["requests"], key=lambda r: r["created_at"])]
    assert kinds == ["embedding", "completion", "summary"]
    costs = sum(Decimal(r["cost_total"]) for r in row["requests"])
    assert Decimal(row["cost"]["total"]) == costs > 0


def test_budgets_hold_the_worst_case_and_refuse(gateway: Gateway, sim: SimControl) -> None:
    client, _ = _client(gateway)
    funded = {"X-Farebox-Team": "funded"}
    raw = client.completions.with_raw_response.create(
        model="text", prompt="Hold it", max_tokens=7, extra_headers=funded
    )
    held = Decimal(raw.headers["x-farebox-budget-reserved-usd"])
    assert held >= 7 * OUTPUT  # the output cap at the output price, plus the input
    raw = client.embeddings.with_raw_response.create(
        model="embed", input="hold", extra_headers=funded
    )
    assert Decimal(raw.headers["x-farebox-budget-reserved-usd"]) < Decimal("0.000001")
    for call in (
        lambda: client.completions.create(
            model="text", prompt="x", extra_headers={"X-Farebox-Team": "broke"}
        ),
        lambda: client.embeddings.create(
            model="embed", input="x" * 400, extra_headers={"X-Farebox-Team": "broke"}
        ),
    ):
        with pytest.raises(openai.RateLimitError) as refused:
            call()
        assert refused.value.code == "insufficient_quota"
    assert len(_sent(sim)) == 2  # refused requests never reach the upstream


def test_what_the_real_api_refuses_is_refused(gateway: Gateway, sim: SimControl) -> None:
    client, _ = _client(gateway)
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model="embed", input="", encoding_format="float")
    assert "'$.input' is invalid" in empty.value.message
    with pytest.raises(openai.BadRequestError) as too_many:
        client.embeddings.create(model="embed", input=["a"] * 2049, encoding_format="float")
    assert "at most 2048 inputs" in too_many.value.message
    with pytest.raises(openai.BadRequestError) as wide:
        client.embeddings.create(model="embed", input="a", dimensions=4096)
    assert "dimensions" in wide.value.message
    with pytest.raises(openai.BadRequestError) as wrong:
        client.embeddings.create(model="text", input="a")
    assert "Embeddings API" in wrong.value.message
    with pytest.raises(openai.BadRequestError) as litellm_route:
        client.completions.create(model="claude", prompt="hi")
    assert "OpenAI-compatible routes only" in litellm_route.value.message
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi")
    # Refused by the upstream: each is one failed row; never by the gateway's own checks.
    assert len(_sent(sim)) == 4
    row = gateway.last(4)
    assert row.status_code == 400 and row.task is not None


def test_a_rule_caps_max_tokens_in_the_completion_body(gateway: Gateway, sim: SimControl) -> None:
    client, recorded = _client(gateway)
    capped = client.completions.create(model="capped", prompt="Go on and on", max_tokens=50)
    assert capped.usage is not None and capped.usage.completion_tokens == 6
    client.completions.create(model="capped", prompt="Short", max_tokens=3)
    first, second = (httpx.Response(200, content=_body(r)).json() for r in _sent(sim))
    assert first["max_tokens"] == 6 and first["model"] == "sim-chat"
    assert "max_completion_tokens" not in first  # chat's field has no place here
    # Under the ceiling: the client's bytes, only the model renamed.
    assert _body(_sent(sim)[1]) == patch_object(recorded.bodies[1], {"model": "sim-chat"}, set())
    assert second["max_tokens"] == 3
    assert gateway.last(2).response_headers.get("x-farebox-rule") == "capped-output"
