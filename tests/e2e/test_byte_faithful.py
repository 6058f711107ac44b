"""What the upstream receives is what the client sent, unless a field had to change."""

from __future__ import annotations

import base64
import json

import httpx

from tests.conftest import SimControl
from tests.e2e.conftest import Gateway

# Odd spacing, unusual key order, escapes and non-ASCII: any re-serialisation shows.
RAW = (
    b'{\n  "messages" : [ {"content": "Caf\xc3\xa9 \\u00e9 \\/ {\\"k\\":1}", "role":"user"} ],'
    b'  "model":"sim-chat", "temperature":0.0,\t"x_unknown_field": {"b": 2, "a": 1},'
    b' "max_tokens": 12 }'
)


def _received(sim: SimControl) -> bytes:
    requests = [r for r in sim.requests() if str(r["path"]).endswith("/chat/completions")]
    assert len(requests) == 1
    return base64.b64decode(str(requests[0]["body_b64"]))


def _post(gateway: Gateway, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url}/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )


def test_unchanged_request_reaches_the_upstream_byte_for_byte(
    gateway: Gateway, sim: SimControl
) -> None:
    response = _post(gateway, RAW)
    assert response.status_code == 200, response.text
    assert _received(sim) == RAW


def test_stream_that_asked_for_usage_is_also_untouched(gateway: Gateway, sim: SimControl) -> None:
    raw = RAW[:-1] + b', "stream": true, "stream_options": {"include_usage": true}}'
    response = _post(gateway, raw)
    assert response.status_code == 200
    assert response.text.rstrip().endswith("data: [DONE]")
    assert _received(sim) == raw


def test_a_changed_field_changes_nothing_else(gateway: Gateway, sim: SimControl) -> None:
    raw = RAW[:-1] + b', "stream": true, "metadata": {"task_id": "t-9"}}'
    response = _post(gateway, raw)
    assert response.status_code == 200
    received = _received(sim)
    # The task metadata is gateway-only and usage is always requested upstream:
    # exactly those two fields change, every other byte stays in place.
    expected = RAW[:-1] + b', "stream": true,"stream_options":{"include_usage":true}}'
    assert received == expected
    assert json.loads(received)["x_unknown_field"] == {"b": 2, "a": 1}
    assert gateway.last().task is not None and gateway.last().task.task_id == "t-9"


def test_stream_events_are_relayed_verbatim(gateway: Gateway, sim: SimControl) -> None:
    raw = RAW[:-1] + b', "stream": true, "stream_options": {"include_usage": true}}'
    via_gateway = _post(gateway, raw).content
    sim.reset()
    direct = httpx.post(
        f"{sim.base_url}/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=30,
    ).content

    def strip_volatile(stream: bytes) -> list[dict[str, object]]:
        events = [line[6:] for line in stream.split(b"\n\n") if line.startswith(b"data: {")]
        parsed = [json.loads(e) for e in events]
        for event in parsed:
            event.pop("id", None), event.pop("created", None), event.pop("model", None)
        return parsed

    relayed, original = strip_volatile(via_gateway), strip_volatile(direct)
    # The only addition: the usage chunk carries the request's cost.
    assert "cost" in relayed[-1]["usage"]  # type: ignore[operator]
    relayed[-1]["usage"].pop("cost")  # type: ignore[attr-defined]
    assert relayed == original
    assert via_gateway.count(b"data: ") == direct.count(b"data: ")


def test_a_large_body_is_written_in_pieces_and_arrives_byte_for_byte(
    gateway: Gateway, sim: SimControl
) -> None:
    # Over the write-chunk size (and the off-loop size): sent upstream in pieces, with its
    # length declared, never re-encoded as a chunked body.
    history = [
        {"role": "user", "content": f"step {n}, café: " + "lorem " * 20} for n in range(3000)
    ]
    raw = (
        b'{"model": "chat",  "messages": ' + json.dumps(history, ensure_ascii=False).encode() + b"}"
    )
    assert len(raw) > 400 * 1024
    response = _post(gateway, raw)
    assert response.status_code == 200, response.text
    [request] = [r for r in sim.requests() if str(r["path"]).endswith("/chat/completions")]
    headers = {k.lower(): v for k, v in dict(request["headers"]).items()}  # type: ignore[call-overload]
    assert headers["content-length"] == str(len(raw) - len(b'"chat"') + len(b'"sim-chat"'))
    assert "transfer-encoding" not in headers
    assert base64.b64decode(str(request["body_b64"])) == raw.replace(b'"chat"', b'"sim-chat"', 1)
