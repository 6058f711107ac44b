"""Slow and malformed clients against `farebox serve`'s server configuration on a real port.

Slowloris connections (headers or bodies a byte at a time) are closed by the gateway
within its deadlines, with an OpenAI-shaped 408, while ordinary requests keep being
served; malformed HTTP and a connection over the limit get OpenAI-shaped errors too.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass, field

import httpx

from tests.e2e.conftest import Gateway, GatewayFactory

SLOW = 60  # slowloris connections per test
SLACK_S = 5.0  # on top of the deadline: a busy 2-core CI box schedules late


@dataclass
class Dribbler:
    """Connections that each send `payload` one byte per round until the server closes them."""

    port: int
    payload: bytes
    count: int
    socks: list[socket.socket] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    replies: dict[int, bytes] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)

    def open(self, head: bytes = b"") -> None:
        for _ in range(self.count):
            sock = socket.create_connection(("127.0.0.1", self.port))
            sock.setblocking(False)
            sock.sendall(head) if head else None
            self.socks.append(sock)
            self.sent.append(0)

    def round(self) -> None:
        """Send the next byte on each open connection; note which the server closed."""
        for index, sock in enumerate(self.socks):
            if index in self.closed:
                continue
            self._read(index, sock)
            if index in self.closed or self.sent[index] >= len(self.payload):
                continue
            try:
                sock.send(self.payload[self.sent[index] : self.sent[index] + 1])
                self.sent[index] += 1
            except OSError:  # reset or broken pipe: the server is gone from this one
                self.closed.add(index)

    def _read(self, index: int, sock: socket.socket) -> None:
        if not select.select([sock], [], [], 0)[0]:
            return
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        self.replies[index] = self.replies.get(index, b"") + data
        if not data:
            self.closed.add(index)

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def _run_until_closed(gateway: Gateway, dribbler: Dribbler, deadline_s: float) -> int:
    """Dribble until the server closed every connection; serve real requests meanwhile."""
    client = httpx.Client(base_url=gateway.base_url, timeout=30)
    served = 0
    stop = time.monotonic() + deadline_s
    try:
        while len(dribbler.closed) < dribbler.count and time.monotonic() < stop:
            dribbler.round()
            response = client.post("/chat/completions", json=_chat())
            assert response.status_code == 200, response.text
            served += 1
            time.sleep(0.05)
    finally:
        client.close()
    return served


def _chat() -> dict[str, object]:
    return {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _parse_reply(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def test_slow_headers_are_cut_off_while_others_are_served(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(header_timeout_s=1.0)
    request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    dribbler = Dribbler(gateway.server.port, request * 50, SLOW)
    dribbler.open()
    try:
        served = _run_until_closed(gateway, dribbler, 1.0 + SLACK_S)
        assert dribbler.closed == set(range(SLOW))  # every slow connection was closed
        assert served > 0
        status, body = _parse_reply(dribbler.replies[0])
        assert status == 408 and body["error"]["code"] == "request_timeout"  # type: ignore[index]
    finally:
        dribbler.close()
    assert len(gateway.seen) == served  # nothing of the slow ones reached the pipeline


def test_slow_bodies_are_cut_off_while_others_are_served(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(body_timeout_s=1.0)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 100000\r\n\r\n"
    )
    dribbler = Dribbler(gateway.server.port, json.dumps(_chat()).encode() + b" " * 99_000, SLOW)
    dribbler.open(head)
    try:
        served = _run_until_closed(gateway, dribbler, 1.0 + SLACK_S)
        assert dribbler.closed == set(range(SLOW))
        assert served > 0
        status, body = _parse_reply(dribbler.replies[0])
        assert status == 408 and "FAREBOX_BODY_TIMEOUT_S" in body["error"]["message"]  # type: ignore[index]
    finally:
        dribbler.close()
    assert len(gateway.seen) == served


def _raw_exchange(port: int, data: bytes) -> tuple[int, dict[str, object]]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        while chunk := sock.recv(65536):  # the server closes after a protocol error
            reply += chunk
    return _parse_reply(reply)


def test_malformed_http_gets_an_openai_error(gateway: Gateway) -> None:
    status, body = _raw_exchange(gateway.server.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert body["error"]["code"] == "malformed_http"  # type: ignore[index]
    bad_length = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1x\r\n\r\n"
    status, body = _raw_exchange(gateway.server.port, bad_length)
    assert status == 400 and body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_chat_request_over_the_connection_limit_gets_503_too(
    make_gateway: GatewayFactory,
) -> None:
    """The chat path skips uvicorn's proxy-headers layer, not the connection cap."""
    gateway = make_gateway(max_connections=3)
    idle = [socket.create_connection(("127.0.0.1", gateway.server.port)) for _ in range(3)]
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    try:
        status, answer = _raw_exchange(gateway.server.port, request)
    finally:
        for sock in idle:
            sock.close()
    assert status == 503
    assert answer["error"]["code"] == "overloaded"  # type: ignore[index]


def test_a_connection_over_the_limit_gets_503_in_openai_shape(
    make_gateway: GatewayFactory,
) -> None:
    gateway = make_gateway(max_connections=3)
    idle = [socket.create_connection(("127.0.0.1", gateway.server.port)) for _ in range(3)]
    try:
        with httpx.Client(base_url=gateway.base_url, timeout=10) as client:
            response = client.get("/models")
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "overloaded"
        assert response.headers["connection"] == "close"
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10  # the server notices the closed sockets
    while time.monotonic() < deadline:
        if httpx.get(f"{gateway.base_url}/models", timeout=10).status_code == 200:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the gateway kept refusing after the idle connections closed")
