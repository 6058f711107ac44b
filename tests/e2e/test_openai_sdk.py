"""The official openai SDK, sync and async, streaming and not, through the gateway."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.conftest import Gateway

MESSAGES = [{"role": "user", "content": "Say hello to the gateway."}]


def _client(gateway: Gateway) -> openai.OpenAI:
    return gateway.sdk()


def _async_client(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.base_url, api_key="sk-client-key", max_retries=0)


@pytest.mark.parametrize("model", ["chat", "claude"])
def test_sync_non_streaming(gateway: Gateway, model: str) -> None:
    completion = _client(gateway).chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    ctx = gateway.last()
    assert ctx.alias == model and ctx.status_code == 200
    assert ctx.usage is not None and ctx.usage.prompt_tokens == completion.usage.prompt_tokens
    # A whole reply arrives at once: no token time was seen, only the whole duration.
    assert ctx.timings.first_token is None and ctx.timings.first_answer_token is None
    assert ctx.timings.finished is not None


@pytest.mark.parametrize("model", ["chat", "claude"])
def test_sync_streaming_hides_usage_unless_asked(gateway: Gateway, model: str) -> None:
    client = _client(gateway)
    chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, stream=True))  # type: ignore[arg-type]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert all(c.usage is None for c in chunks)
    # The gateway still metered the stream: it asked the upstream for usage itself.
    ctx = gateway.last()
    assert ctx.usage is not None and ctx.usage.completion_tokens > 0
    assert ctx.timings.first_token is not None

    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens > 0


@pytest.mark.parametrize("model", ["chat", "claude"])
async def test_async_streaming_and_not(gateway: Gateway, model: str) -> None:
    client = _async_client(gateway)
    completion = await client.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    assert completion.choices[0].message.content
    stream = await client.chat.completions.create(
        model=model,
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
    assert pieces[-1].usage is not None
    await client.close()


@pytest.mark.parametrize(
    ("model", "field"), [("thinker", "reasoning"), ("sglang-thinker", "reasoning_content")]
)
def test_reasoning_in_either_field_is_measured(gateway: Gateway, model: str, field: str) -> None:
    client = _client(gateway)
    completion = client.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    message = completion.choices[0].message.model_dump()
    assert message.get(field)
    assert completion.usage is not None and completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens

    list(client.chat.completions.create(model=model, messages=MESSAGES, stream=True))  # type: ignore[arg-type]
    ctx = gateway.last(2)
    assert ctx.usage is not None and ctx.usage.reasoning_tokens > 0
    first, answer = ctx.timings.first_token, ctx.timings.first_answer_token
    assert first is not None and answer is not None and answer >= first


def test_models_endpoint_lists_the_aliases(gateway: Gateway) -> None:
    ids = [model.id for model in _client(gateway).models.list()]
    assert ids[:6] == ["sim-chat", "chat", "thinker", "sglang-thinker", "embed", "claude"]
    assert "strict-chat" in ids


def test_context_carries_identity_task_and_timings(gateway: Gateway) -> None:
    client = _client(gateway)
    client.chat.completions.create(
        model="chat",
        messages=MESSAGES,  # type: ignore[arg-type]
        extra_headers={"X-Task-Id": "task-42", "X-Task-Step": "1", "X-Farebox-Team": "search"},
    )
    ctx = gateway.last()
    assert ctx.task is not None and ctx.task.task_id == "task-42" and ctx.task.step == "1"
    assert ctx.identity.team == "search"
    assert ctx.identity.caller is not None and "sk-client-key" not in ctx.identity.caller
    timings = ctx.timings
    assert timings.upstream_sent is not None and timings.finished is not None
    assert timings.received <= timings.upstream_sent <= timings.finished
