"""Optional OpenTelemetry traces: one span per request and one per upstream attempt.

Off unless `FAREBOX_OTLP_ENDPOINT` is set. This package's top level and
`gateway.otel.propagation` import nothing of OpenTelemetry, so a gateway without an
endpoint never loads it (tests/e2e/test_otel_export.py checks `sys.modules`);
`open_tracing` imports `gateway.otel.tracing` (and the SDK) only when asked to.
See docs/observability.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.otel.tracing import Tracing
    from gateway.settings import Settings


def open_tracing(settings: Settings) -> Tracing | None:
    """The exporter and its hooks when an OTLP endpoint is configured, else None."""
    if not settings.otlp_endpoint:
        return None
    from gateway.otel.tracing import Tracing  # the only import of OpenTelemetry

    return Tracing.from_settings(settings)
