"""OpenTelemetry export: spans with the GenAI attributes reach an OTLP/HTTP collector, in
the client's trace, one per request and one per upstream attempt; off, neither the SDK
nor the exporter loads (FastAPI imports the no-op OpenTelemetry API on its own)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.conftest import SimControl
from tests.e2e.conftest import GatewayFactory

POLICY = """
models:
  chat: {{provider: openai, model: sim-chat, base_url: "{sim}/v1", family: vllm}}
  claude:
    provider: anthropic
    model: claude-sim
    base_url: "{sim}"
    api_key_env: FAREBOX_TEST_ANTHROPIC_KEY
rules:
  - name: flex-first
    match: {{model: chat}}
    tier: {{force: flex}}
routing:
  chat:
    tiers:
      flex: {{set: {{service_tier: flex}}}}
    fallbacks:
      - {{from_tier: flex, statuses: [429], tier: standard}}
    retry: {{attempts: 0}}
  claude:
    capabilities: {{supports_reasoning: true}}
prices:
  chat: {{base: claude-sonnet-4-5}}
"""
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
GENAI = (
    "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.response.model",
    "gen_ai.provider.name", "gen_ai.system", "gen_ai.conversation.id",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.reasoning.output_tokens", "farebox.cost.usd",
)  # fmt: skip


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: decodes each protobuf export and keeps its spans."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.spans: list[Span] = []
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        export = ExportTraceServiceRequest.FromString(body)
        self.server.paths.append(self.path)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.server.spans.extend(scope.spans)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def attributes(span: Span) -> dict[str, Any]:
    """A span's attributes as plain values."""
    found: dict[str, Any] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        found[item.key] = getattr(item.value, kind) if kind else None
    return found


def wait_for(collector: Collector, trace_id: str, count: int) -> list[Span]:
    deadline = time.monotonic() + 15
    while True:
        spans = [s for s in collector.spans if s.trace_id.hex() == trace_id]
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.05)


def test_spans_carry_genai_attributes_in_the_clients_trace_with_one_per_attempt(
    make_gateway: GatewayFactory, sim: SimControl, collector: Collector, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(sim=sim.url))
    gateway = make_gateway(config=policy, otlp_endpoint=collector.url, otlp_flush_interval_s=0.05)
    sim.fault(match={"model": "sim-chat", "service_tier": "flex"}, status=429, count=1)
    client = gateway.sdk()
    client.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "Plan the migration."}],
        extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "X-Task-Id": "run-7"},
    )
    spans = wait_for(collector, TRACE_ID, 3)
    assert collector.paths and set(collector.paths) == {"/v1/traces"}
    [request] = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER]
    attempts = sorted((s for s in spans if s.kind == Span.SPAN_KIND_CLIENT),
                      key=lambda s: attributes(s)["farebox.attempt"])  # fmt: skip
    assert request.parent_span_id.hex() == PARENT_ID and len(attempts) == 2
    assert all(a.parent_span_id == request.span_id for a in attempts)
    # Each attempt's traceparent went upstream naming its own span.
    sent = [r["headers"]["traceparent"] for r in sim.requests()]  # type: ignore[index]
    assert sent == [f"00-{TRACE_ID}-{a.span_id.hex()}-01" for a in attempts]

    rows = httpx.get(f"{gateway.base_url}/tasks/run-7", timeout=30).json()["requests"]
    rows = sorted(rows, key=lambda r: r["attempt"])
    for span, row in zip(attempts, rows, strict=True):
        seen = attributes(span)
        assert set(GENAI) <= set(seen)
        assert seen["gen_ai.request.model"] == "chat"
        assert seen["gen_ai.response.model"] == "sim-chat"
        assert seen["gen_ai.conversation.id"] == "run-7"
        assert seen["gen_ai.usage.input_tokens"] == row["prompt_tokens"]
        assert seen["gen_ai.usage.output_tokens"] == row["completion_tokens"]
        assert seen["gen_ai.usage.cache_read.input_tokens"] == row["cached_tokens"]
        assert seen["gen_ai.usage.reasoning.output_tokens"] == row["reasoning_tokens"]
        assert seen["farebox.cost.usd"] == float(row["cost_total"])
        assert seen["farebox.cost.usd"] > 0 or row["status_code"] != 200
        assert seen["http.response.status_code"] == row["status_code"]
    assert attempts[0].status.code == attempts[0].status.STATUS_CODE_ERROR
    assert [attributes(a)["farebox.tier.served"] for a in attempts] == ["flex", "standard"]
    whole = attributes(request)
    assert request.name == "chat chat" and set(GENAI) <= set(whole)
    assert whole["farebox.attempts"] == 2 and whole["http.response.status_code"] == 200
    assert whole["gen_ai.usage.input_tokens"] == rows[1]["prompt_tokens"]
    total = sum(float(r["cost_total"]) for r in rows)
    assert whole["farebox.cost.usd"] == pytest.approx(total, rel=1e-12)
    assert request.end_time_unix_nano >= max(a.end_time_unix_nano for a in attempts)

    # A stream without a traceparent starts a trace of its own, with time to first token.
    stream = client.chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    assert [chunk for chunk in stream]
    deadline = time.monotonic() + 15
    while not [s for s in collector.spans if s.trace_id.hex() != TRACE_ID and
               s.kind == Span.SPAN_KIND_SERVER] and time.monotonic() < deadline:  # fmt: skip
        time.sleep(0.05)
    [streamed] = [s for s in collector.spans if s.trace_id.hex() != TRACE_ID
                  and s.kind == Span.SPAN_KIND_CLIENT]  # fmt: skip
    assert attributes(streamed)["farebox.time_to_first_token_ms"] >= 0

    # Anthropic's Messages inbound is traced the same way, its attempt's id sent upstream.
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    reply = httpx.post(
        f"{gateway.server.url}/v1/messages",
        headers={"anthropic-version": "2023-06-01", "x-api-key": "k",
                 "traceparent": f"00-{trace_id}-b7ad6b7169203331-01"},
        json={"model": "claude", "max_tokens": 64,
              "messages": [{"role": "user", "content": "Hi"}]},
        timeout=30,
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    [server, attempt] = sorted(wait_for(collector, trace_id, 2), key=lambda s: s.kind)
    assert server.parent_span_id.hex() == "b7ad6b7169203331"
    assert attempt.parent_span_id == server.span_id
    assert attributes(attempt)["gen_ai.provider.name"] == "anthropic"
    upstream = sim.requests()[-1]["headers"]["traceparent"]  # type: ignore[index]
    assert upstream == f"00-{trace_id}-{attempt.span_id.hex()}-01"


# The gateway and its simulator both run in the probe's own process: a pytest worker's
# shared simulator, in another process on a loaded box, once refused the probe's connection
# (a 502 "connection failed", seen about once in a dozen loaded runs).
OFF = """
import json, sys, httpx
from pathlib import Path
from gateway.app import create_app
from gateway.settings import Settings
from gateway.sim.app import create_sim_app
from gateway.sim.config import default_config
from tests.servers import ServerThread
sim = ServerThread(create_sim_app(default_config())).start()
policy = Path(sys.argv[2]) / "policy.yaml"
policy.write_text(sys.argv[1].replace("SIM_URL", sim.url))
settings = Settings(config=policy, data_dir=Path(sys.argv[2]) / "data")
server = ServerThread(create_app(settings), settings).start()
reply = httpx.post(f"{server.url}/v1/chat/completions", timeout=30, headers={
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
    json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
server.stop()
upstream = httpx.get(f"{sim.url}/sim/requests").json()
sim.stop()
# FastAPI itself imports the OpenTelemetry API (fastapi/telemetry), a no-op without an SDK;
# what tracing would add is the SDK, the exporter, protobuf and gateway.otel.tracing.
heavy = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto",
         "google.protobuf", "gateway.otel.tracing")
from opentelemetry import trace
if reply.status_code != 200:  # its error says why
    print(reply.headers, reply.text, file=sys.stderr)
upstream = upstream["requests"] if isinstance(upstream, dict) else upstream
print(json.dumps([reply.status_code, type(trace.get_tracer_provider()).__name__,
      sorted(m for m in sys.modules if m.startswith(heavy)),
      [h for r in upstream for h in r["headers"] if h.lower() == "traceparent"],
      len(upstream)]))
"""


def test_off_by_default_the_sdk_and_exporter_are_never_imported(tmp_path: Path) -> None:
    policy = POLICY.format(sim="SIM_URL").replace("429", "503")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", OFF, policy, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The gateway's error (stderr) says why, if the reply was not a 200.
    status, provider, heavy, traceparents, upstream_calls = json.loads(done.stdout.splitlines()[-1])
    assert status == 200, done.stderr
    assert provider == "ProxyTracerProvider" and heavy == []
    # the client's traceparent is not passed on: the upstream saw the request without one
    assert upstream_calls == 1 and traceparents == []
