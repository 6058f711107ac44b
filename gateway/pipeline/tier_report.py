"""What the client is told about its speed tier, beside `X-Farebox-Tier` (the tier served).

- `X-Farebox-Tier-Requested`: the tier the client asked for, when the policy served
  another (a forbidden `service_tier: priority` rewritten to standard, say). The ledger
  keeps both, as `tier_requested` and `tier_served`.
- `X-Farebox-Tier-Confirmed`: `true` when the upstream said which tier served the request
  (OpenAI's `service_tier` echo, Anthropic's `usage.speed` / `usage.service_tier`, a
  self-hosted pool's configured tier), `false` when it said nothing and the planned tier
  was billed. A stream's headers leave before the upstream says anything: there the final
  usage chunk carries it, as `usage.cost.tier_confirmed`.
"""

from __future__ import annotations

from gateway.pipeline.context import RequestContext

REQUESTED_HEADER = "x-farebox-tier-requested"
CONFIRMED_HEADER = "x-farebox-tier-confirmed"


def tier_headers(ctx: RequestContext) -> dict[str, str]:
    """The requested-tier and confirmation headers that apply to this request."""
    headers: dict[str, str] = {}
    served = ctx.tier_served or ctx.tier_planned or "standard"
    if ctx.tier_requested and ctx.tier_requested != served:
        headers[REQUESTED_HEADER] = ctx.tier_requested
    if ctx.tier_confirmed is not None:
        headers[CONFIRMED_HEADER] = "true" if ctx.tier_confirmed else "false"
    return headers
