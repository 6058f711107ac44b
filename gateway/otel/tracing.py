"""OTLP/HTTP export of a server span per request and a client span per upstream attempt.

Imported only when `FAREBOX_OTLP_ENDPOINT` is set (see `gateway.otel.open_tracing`).
`TraceMiddleware` opens the request span, continuing the client's `traceparent` when it
sends one, and ends it once the last byte is sent; `Tracing.observe` (a services
observer, called as each attempt is booked) records the attempt's span, whose id was
drawn when its `traceparent` was sent upstream. Attributes follow the OpenTelemetry
GenAI semantic conventions (`gen_ai.*`); the convention has no cost attribute yet, so
cost is `farebox.cost.usd`, time to first token `farebox.time_to_first_token_ms`.
"""

from __future__ import annotations

import asyncio
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace import TraceFlags as Flags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import __version__
from gateway.ledger.records import RequestRecord
from gateway.otel.propagation import CURRENT, RequestTrace
from gateway.pipeline.context import RequestContext
from gateway.pipeline.record import BookedCost, ledger_record
from gateway.settings import Settings

TRACED_PATHS = frozenset({"/v1/chat/completions", "/v1/messages"})
_PRESET: ContextVar[int | None] = ContextVar("farebox_preset_span_id", default=None)


class PresetIds(RandomIdGenerator):
    """Random ids, except an attempt span's, drawn before its request went upstream."""

    def generate_span_id(self) -> int:
        preset = _PRESET.get()
        if preset is not None:
            _PRESET.set(None)
            return preset
        return super().generate_span_id()


def _traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: `<endpoint>/v1/traces` unless the path is given."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def _headers(text: str | None) -> dict[str, str]:
    """`k=v,k2=v2` (as OTEL_EXPORTER_OTLP_HEADERS) to a dict."""
    pairs = (item.split("=", 1) for item in (text or "").split(",") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def genai_attributes(record: RequestRecord) -> dict[str, Any]:
    """The GenAI semantic-convention attributes of one booked call, plus Farebox's own."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": record.model_alias,
        "gen_ai.response.model": record.upstream_model,
        "gen_ai.provider.name": record.provider,
        "gen_ai.system": record.provider,
        "gen_ai.conversation.id": record.task_id,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": record.cached_tokens,
        "gen_ai.usage.cache_creation.input_tokens": record.cache_write_tokens
        + record.cache_write_1h_tokens,
        "gen_ai.usage.reasoning.output_tokens": record.reasoning_tokens,
        "farebox.cost.usd": float(record.cost_total),
        "farebox.request_id": record.request_id,
        "farebox.team": record.team,
        "farebox.project": record.project,
        "farebox.backend": record.backend,
        "farebox.tier.requested": record.tier_requested,
        "farebox.tier.served": record.tier_served,
        "http.response.status_code": record.status_code,
    }
    if record.ttft_ms is not None:
        attributes["farebox.time_to_first_token_ms"] = record.ttft_ms
    if record.step_kind:
        attributes["farebox.task.step_kind"] = record.step_kind
    if record.error_type:
        attributes["error.type"] = record.error_type
    return attributes


def _epoch_ns(perf: float | None, perf_now: float, now_ns: int) -> int:
    """A perf_counter reading as Unix nanoseconds."""
    return now_ns if perf is None else now_ns - int((perf_now - perf) * 1e9)


@dataclass
class Tracing:
    """The tracer provider and its exporter, and the two hooks that feed them."""

    provider: TracerProvider

    @classmethod
    def from_settings(cls, settings: Settings) -> Tracing:
        """Build the exporter for `settings.otlp_endpoint` (protobuf over HTTP)."""
        assert settings.otlp_endpoint is not None
        secret = settings.otlp_headers
        exporter = OTLPSpanExporter(
            endpoint=_traces_url(settings.otlp_endpoint),
            headers=_headers(secret.get_secret_value() if secret else None),
            timeout=10,
        )
        resource = Resource.create(
            {"service.name": settings.otel_service_name, "service.version": __version__}
        )
        provider = TracerProvider(resource=resource, id_generator=PresetIds())
        delay_ms = int(settings.otlp_flush_interval_s * 1000)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay_ms))
        return cls(provider)

    @property
    def tracer(self) -> trace.Tracer:
        return self.provider.get_tracer("farebox", __version__)

    def observe(self, ctx: RequestContext) -> None:
        """Record the attempt just booked as a client span under the request's span."""
        state = CURRENT.get()
        if state is None:
            return
        record = ledger_record(ctx, BookedCost.of(ctx.cost), attempt=ctx.attempt)
        state.attempts += 1
        state.cost += record.cost_total
        state.last = record
        flags = Flags(Flags.SAMPLED if state.sampled else Flags.DEFAULT)
        parent = SpanContext(state.trace_id, state.span_id, is_remote=False, trace_flags=flags)
        perf_now, now_ns = time.perf_counter(), time.time_ns()
        timings = ctx.timings
        _PRESET.set(state.pending_span_id)
        state.pending_span_id = None
        span = self.tracer.start_span(
            f"chat {record.upstream_model}",
            context=trace.set_span_in_context(NonRecordingSpan(parent)),
            kind=SpanKind.CLIENT,
            start_time=_epoch_ns(timings.upstream_sent or timings.received, perf_now, now_ns),
            attributes={**genai_attributes(record), "farebox.attempt": record.attempt},
        )
        _PRESET.set(None)
        if record.status_code >= 400 or record.error_type:
            span.set_status(Status(StatusCode.ERROR, record.error_type or str(record.status_code)))
        span.end(end_time=_epoch_ns(timings.finished, perf_now, now_ns))

    def start_request(self, scope: Scope) -> tuple[trace.Span, RequestTrace]:
        """Open the request's server span, continuing the client's `traceparent` if any."""
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        parent = TraceContextTextMapPropagator().extract(carrier)
        span = self.tracer.start_span("chat", context=parent, kind=SpanKind.SERVER)
        context = span.get_span_context()
        return span, RequestTrace(context.trace_id, context.span_id, context.trace_flags.sampled)

    def end_request(self, span: trace.Span, state: RequestTrace, status: int | None) -> None:
        """Name the span after the model, attach the request's usage and cost, end it."""
        record: RequestRecord | None = state.last
        if record is not None:
            span.update_name(f"chat {record.model_alias}")
            span.set_attributes(genai_attributes(record))
            span.set_attributes(
                {"farebox.cost.usd": float(state.cost), "farebox.attempts": state.attempts}
            )
        else:
            span.set_attribute("gen_ai.operation.name", "chat")
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR, str(status)))
        span.end()

    def shutdown(self) -> None:
        """Export what is buffered and stop the exporter's thread."""
        self.provider.shutdown()

    @staticmethod
    def middleware() -> type[TraceMiddleware]:
        """The ASGI middleware class to install with `tracing=self`."""
        return TraceMiddleware


class TraceMiddleware:
    """Plain ASGI: a span around each chat or Messages request; flush at shutdown."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._on_shutdown(send))
            return
        if scope["type"] != "http" or scope["path"] not in TRACED_PATHS:
            await self.app(scope, receive, send)
            return
        span, state = self.tracing.start_request(scope)
        status: list[int] = []

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        token = CURRENT.set(state)
        try:
            await self.app(scope, receive, send_status)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            CURRENT.reset(token)
            self.tracing.end_request(span, state, status[0] if status else None)

    def _on_shutdown(self, send: Send) -> Send:
        async def forward(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await asyncio.to_thread(self.tracing.shutdown)  # the export is blocking I/O
            await send(message)

        return forward
