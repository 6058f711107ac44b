from __future__ import annotations

import pytest

from gateway.config import parse_config
from gateway.errors import InvalidRequestError, ModelNotFoundError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.decide import decide
from gateway.pipeline.identify import caller_id, identify
from gateway.pipeline.measure import Meter
from gateway.pipeline.parse import parse
from gateway.pipeline.policy import facts_of

CONFIG = parse_config("models:\n  m:\n    model: up\n    base_url: http://h/v1\n")


def _ctx(body: bytes, **headers: str) -> RequestContext:
    ctx = RequestContext(raw_body=body, headers=headers)
    parse(ctx)
    identify(ctx)
    return ctx


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"messages":[{"role":"user","content":"x"}]}', "invalid field 'model': is required"),
        (b'{"model":"m","messages":[]}', "invalid field 'messages'"),
        (b'{"model":"m","messages":[{"role":"bot"}]}', "invalid field 'messages[0].role'"),
        (b'{"model":"m","messages":[{"role":"user"}],"stream":"yes"}', "invalid field 'stream'"),
        (
            b'{"model":"m","messages":[{"role":"user"}],"max_tokens":0}',
            "invalid field 'max_tokens'",
        ),
    ],
)
def test_parse_names_the_field(body: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _ctx(body)


def test_task_from_headers_and_metadata_removal() -> None:
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"task_id":"t1","task_step":"3"}}'
    ctx = _ctx(body)
    assert ctx.task is not None and ctx.task.task_id == "t1" and ctx.task.step == "3"
    assert not ctx.task.implicit and not ctx.task.done
    assert ctx.edits.remove == {"metadata"}

    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"task_id":"t1","app":"a"}}'
    ctx = _ctx(body, **{"x-task-id": "t2", "x-task-done": "true", "x-farebox-team": "growth"})
    assert ctx.task is not None and ctx.task.task_id == "t2" and ctx.task.done
    assert ctx.edits.set_fields["metadata"] == {"app": "a"}
    assert ctx.identity.team == "growth"


def test_request_without_task_is_a_task_of_its_own() -> None:
    ctx = _ctx(b'{"model":"m","messages":[{"role":"user","content":"x"}]}')
    assert ctx.task is not None and ctx.task.implicit and ctx.task.done
    assert not ctx.edits


def test_caller_id_hides_the_key() -> None:
    caller = caller_id("Bearer sk-123456")
    assert caller is not None and "sk-123456" not in caller
    assert caller == caller_id("Bearer sk-123456") != caller_id("Bearer other")
    assert caller_id(None) is None


def test_decide_routes_and_asks_for_usage_on_streams() -> None:
    ctx = _ctx(b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}')
    decide(ctx, CONFIG)
    assert ctx.route is not None and ctx.route.model == "up"
    assert ctx.edits.set_fields["stream_options"] == {"include_usage": True}
    assert not ctx.client_wants_usage_chunk


def test_decide_leaves_a_client_that_asked_for_usage_alone() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}'
    ctx = _ctx(raw)
    decide(ctx, CONFIG)
    assert ctx.edits.set_fields == {"model": "up"}  # only the upstream's own model name
    assert ctx.client_wants_usage_chunk


def test_unknown_model_is_404_listing_the_known_ones() -> None:
    ctx = _ctx(b'{"model":"nope","messages":[{"role":"user","content":"x"}]}')
    with pytest.raises(ModelNotFoundError, match="available: m"):
        decide(ctx, CONFIG)


def test_meter_recognises_both_reasoning_fields_and_first_answer() -> None:
    ticks = iter(range(100))
    meter = Meter(clock=lambda: float(next(ticks)))
    meter.observe_chunk({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
    meter.observe_chunk({"choices": [{"delta": {"reasoning": "hm"}}]})
    meter.observe_chunk({"choices": [{"delta": {"reasoning_content": "mm"}}]})
    meter.observe_chunk({"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]})
    meter.observe_chunk(
        {
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
            "service_tier": "flex",
        }
    )
    assert meter.first_token == 1.0 and meter.first_answer_token == 3.0
    assert meter.seen_reasoning == "hmmm" and meter.seen_answer == "Hi"
    assert meter.finish_reason == "stop" and meter.service_tier == "flex"
    assert meter.usage is not None and meter.usage.completion_tokens == 3


def test_policy_matches_the_team_the_ledger_books() -> None:
    # Starlette hands header bytes over as latin-1 text; identify reads them as UTF-8.
    sent = "café-team".encode().decode("latin-1")
    ctx = _ctx(
        b'{"model":"m","messages":[{"role":"user","content":"x"}]}', **{"x-farebox-team": sent}
    )
    decide(ctx, CONFIG)
    assert ctx.identity.team == "café-team"
    assert facts_of(ctx, "m").team == "café-team"
