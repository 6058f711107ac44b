"""A conformed reply says when its bytes are orjson's rendering of its payload, and the cost
patch that trusts it (`rendered=True`) gives the bytes the checked patch gives."""

from __future__ import annotations

import random
from typing import Any

import orjson

from gateway.compact_patch import patch_compact, patch_rendered
from gateway.upstream.conform import conformed_reply, conformed_reply_bytes


def _replies() -> list[dict[str, Any]]:
    rnd = random.Random(3)
    replies: list[dict[str, Any]] = []
    for at in range(400):
        message: dict[str, Any] = {"role": "assistant", "content": f"tok{at}"}
        for key in ("refusal", "annotations", "function_call", "tool_calls"):
            if rnd.random() < 0.4:
                message[key] = rnd.choice([None, [], "x"])
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "stop"}
        if rnd.random() < 0.6:
            choice["logprobs"] = None
        reply: dict[str, Any] = {"id": f"c{at}", "object": "chat.completion", "choices": [choice]}
        if rnd.random() < 0.3:
            reply["system_fingerprint"] = None
        reply["usage"] = rnd.choice(
            [None, {"prompt_tokens": 5, "completion_tokens": at, "total_tokens": 5 + at}]
        )
        replies.append(reply)
    return replies


def test_rendered_means_the_bytes_are_the_payloads_rendering() -> None:
    flagged = 0
    for reply in _replies():
        for raw in (orjson.dumps(reply), orjson.dumps(reply, option=orjson.OPT_INDENT_2)):
            body, payload, rendered = conformed_reply(raw, orjson.loads(raw))
            assert (body, payload) == conformed_reply_bytes(raw, orjson.loads(raw))
            if rendered:
                flagged += 1
                assert body == orjson.dumps(payload)
    assert flagged > 100  # the mock's and vLLM's replies: most of them


def test_the_trusted_patch_gives_the_checked_patchs_bytes() -> None:
    cost = {"currency": "USD", "total": "0.00017", "priced": True, "estimated": False}
    for reply in _replies():
        raw = orjson.dumps(reply)
        body, payload, rendered = conformed_reply(raw, orjson.loads(raw))
        if not rendered or not isinstance(payload.get("usage"), dict):
            continue
        edit = {"usage": {**payload["usage"], "cost": cost}}
        trusted = patch_rendered(body, payload, edit, rendered=True)
        assert trusted is not None
        assert trusted == patch_rendered(body, payload, edit)
        assert trusted == patch_compact(body, payload, edit)
