"""A body over 256 KiB, parsed a slice at a time, is refused with the 400 a small one gets.

The client sees the same message and `param` that the one-go parse gives for the same
bytes (computed here with `parse`), whether the fault is a field, a message deep in the
list, the JSON itself or its depth.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import orjson
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import parse_config
from gateway.errors import InvalidRequestError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.offload import OFF_LOOP_BYTES, parses_inline
from gateway.pipeline.parse import parse
from gateway.settings import Settings

COUNT = (
    6000  # ~300 KiB of short messages: over the 256 KiB and 8,192 values where parsing is sliced
)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp_path = tmp_path_factory.mktemp("large-body")
    config = parse_config(
        f"models:\n  dead:\n    model: m\n    base_url: http://127.0.0.1:{_dead_port()}/v1\n"
    )
    with TestClient(create_app(Settings(data_dir=tmp_path), config)) as test_client:
        yield test_client


def _messages() -> list[dict[str, object]]:
    return [{"role": "user", "content": f"turn {i} of a long history"} for i in range(COUNT)]


def _body(**fields: object) -> bytes:
    raw = orjson.dumps({"model": "dead", "messages": _messages(), **fields})
    assert len(raw) > OFF_LOOP_BYTES and not parses_inline(raw)
    return raw


def _with_message(index: int, message: bytes) -> bytes:
    messages = _messages()
    messages[index] = {"placeholder": True}
    return _body_of(messages).replace(b'{"placeholder":true}', message)


def _body_of(messages: list[dict[str, object]]) -> bytes:
    return orjson.dumps({"model": "dead", "messages": messages})


def _expected(raw: bytes) -> tuple[str, str | None]:
    with pytest.raises(InvalidRequestError) as refused:
        parse(RequestContext(raw_body=raw, headers={}))
    return refused.value.message, refused.value.param


CASES = {
    "a field before the messages": _body(model=5),
    "a field after them": _body(max_tokens=0, stream="yes"),
    "a message deep in the list": _with_message(5000, b'{"role":"bot"}'),
    "a message and a field": _with_message(5000, b'{"role":"bot"}').replace(
        b'"model":"dead"', b'"model":""'
    ),
    "malformed JSON near the end": _body()[:-2] + b"x}",
    "a truncated body": _body()[:-1],
    "NaN in a message": _with_message(4000, b'{"role":"user","content":NaN}'),
    "nesting past the limit in a message": _with_message(
        5999, b'{"role":"user","x":' + b"[" * 130 + b"]" * 130 + b"}"
    ),
    "trailing bytes": _body() + b" {}",
}


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_a_large_body_gets_the_400_a_one_go_parse_gives(client: TestClient, raw: bytes) -> None:
    message, param = _expected(raw)
    response = client.post("/v1/chat/completions", content=raw)
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert (error["message"], error["param"], error["type"]) == (
        message,
        param,
        "invalid_request_error",
    )


def test_a_valid_large_body_is_parsed_and_goes_on_to_the_upstream(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", content=_body())
    # Parsed and validated: the dead upstream is what refuses it.
    assert response.status_code in (502, 503), response.text[:300]
    assert response.json()["error"]["type"] != "invalid_request_error"
