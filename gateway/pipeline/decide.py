"""Stage 3: choose the route for the request (policy rules plug in here)."""

from __future__ import annotations

from gateway.config import GatewayConfig
from gateway.errors import ModelNotFoundError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.entitle import may_use


def decide(ctx: RequestContext, config: GatewayConfig) -> None:
    """Resolve the model alias to its route and the requested speed tier."""
    assert ctx.request is not None
    alias = ctx.request.model
    route = config.models.get(alias)
    if route is None:
        # A key is told only of the models it may use (as /v1/models lists them).
        usable = [name for name in config.models if may_use(ctx.principal, name)]
        known = ", ".join(sorted(usable)) or "none"
        raise ModelNotFoundError(
            f"model '{alias}' is not configured on this gateway (available: {known})",
            param="model",
        )
    ctx.alias, ctx.route = alias, route
    if route.model != alias:
        ctx.edits.set_fields["model"] = route.model  # the upstream knows its own name only
    ctx.tier_requested = ctx.headers.get("x-speed-tier") or ctx.request.service_tier
    if ctx.stream and not ctx.client_wants_usage_chunk:
        # Usage is always needed for metering; the relay hides the chunk from this client.
        options = dict(ctx.body.get("stream_options") or {})
        options["include_usage"] = True
        ctx.edits.set_fields["stream_options"] = options
