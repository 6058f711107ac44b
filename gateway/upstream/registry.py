"""Pick the adapter for a route and build the call: URL, key, timeouts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from gateway.config import ModelRoute
from gateway.settings import Timeouts
from gateway.upstream.base import Upstream, UpstreamCall
from gateway.upstream.openai_compat import OpenAICompatUpstream

if TYPE_CHECKING:
    from gateway.upstream.litellm_adapter import LiteLLMUpstream


SIM_API_KEY = "farebox-sim"
"""The simulator accepts any key; litellm's providers refuse to send none."""


class Upstreams:
    """The adapters of one gateway process; litellm's is built on first use only."""

    def __init__(self, client: httpx.AsyncClient, sim_base_url: str | None, timeouts: Timeouts):
        self._client = client
        self.openai = OpenAICompatUpstream(client)
        self._litellm: LiteLLMUpstream | None = None
        self.sim_base_url = sim_base_url
        self.timeouts = timeouts

    def adapter(self, route: ModelRoute) -> Upstream:
        """The adapter that speaks this route's wire format."""
        if not route.via_litellm:
            return self.openai
        if self._litellm is None:
            # Importing litellm costs seconds and ~200 MB: only routes that need it pay.
            from gateway.upstream.litellm_adapter import LiteLLMUpstream

            self._litellm = LiteLLMUpstream(self._client)
        return self._litellm

    def base_url(self, route: ModelRoute) -> str:
        """The route's base URL, with `sim` resolved to the bundled simulator."""
        if route.uses_simulator:
            if self.sim_base_url is None:
                raise RuntimeError("route uses the simulator but no simulator is running")
            return self.sim_base_url
        if route.base_url:
            return route.base_url
        return "https://api.openai.com/v1" if route.provider == "openai" else ""

    def build_call(
        self, alias: str, route: ModelRoute, body: bytes, parsed: dict[str, Any], stream: bool
    ) -> UpstreamCall:
        """Everything an adapter needs to send one request."""
        return UpstreamCall(
            alias=alias,
            route=route,
            body=body,
            parsed=parsed,
            stream=stream,
            timeouts=self.timeouts,
            base_url=self.base_url(route),
            api_key=route.api_key() or (SIM_API_KEY if route.uses_simulator else None),
        )

    async def aclose(self) -> None:
        await self.openai.aclose()
        if self._litellm is not None:
            await self._litellm.aclose()
