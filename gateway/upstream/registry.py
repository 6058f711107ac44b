"""Pick the adapter for a route and build the call: URL, key, timeouts.

litellm is loaded only when a configured route needs it, and then in the background
from start-up (or from the reload that adds such a route): `/readyz` says `warming`
until it is done, so the first request to that route does not pay for the import.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gateway.config import ModelRoute
from gateway.heap import freeze_heap
from gateway.settings import Timeouts
from gateway.upstream.base import Upstream, UpstreamCall
from gateway.upstream.http_stream import HttpClient
from gateway.upstream.openai_compat import OpenAICompatUpstream

if TYPE_CHECKING:  # httpx is litellm's client only: a process without litellm never loads it
    import httpx

    from gateway.upstream.litellm_adapter import LiteLLMUpstream


SIM_API_KEY = "farebox-sim"
"""The simulator accepts any key; litellm's providers refuse to send none."""

log = logging.getLogger("farebox.upstream")


class Upstreams:
    """The adapters of one gateway process; litellm's is built on first use only.

    `client` (httpx) is litellm's, made when litellm is first needed unless one is given
    (an httpx client loads the CA bundle and HTTP/2: 3.6 MiB a process without litellm
    routes never uses); the native adapters share one aiohttp pool of their own.
    """

    def __init__(
        self, client: httpx.AsyncClient | None, sim_base_url: str | None, timeouts: Timeouts
    ):
        self._client = client
        self._native = HttpClient()
        self.openai = OpenAICompatUpstream(self._native)
        self._litellm: LiteLLMUpstream | None = None
        self.sim_base_url = sim_base_url
        self.timeouts = timeouts
        self._to_warm: list[tuple[str, str]] = []  # (provider, model), in order
        self._warmed: set[tuple[str, str]] = set()
        self._warm_task: asyncio.Task[None] | None = None
        self.warm_failure: str | None = None

    def adapter(self, route: ModelRoute) -> Upstream:
        """The adapter that speaks this route's wire format."""
        return self._litellm_adapter() if route.via_litellm else self.openai

    @property
    def http(self) -> HttpClient:
        """The pooled HTTP client of the native adapters (also the Messages path's)."""
        return self._native

    def _litellm_adapter(self) -> LiteLLMUpstream:
        if self._litellm is None:
            # Importing litellm costs seconds and ~200 MB: only configurations that need it pay.
            import httpx

            from gateway.upstream.litellm_adapter import LiteLLMUpstream

            if self._client is None:
                limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
                self._client = httpx.AsyncClient(limits=limits, trust_env=False)
            self._litellm = LiteLLMUpstream(self._client)
        return self._litellm

    @property
    def warming(self) -> bool:
        """Whether litellm is still loading for a configured route."""
        return self._warm_task is not None and not self._warm_task.done()

    def warm(self, routes: Iterable[ModelRoute]) -> None:
        """Load litellm in the background for the routes that need it and are not warm yet."""
        queued = self._warmed.union(self._to_warm)
        wanted = sorted({(r.provider, r.model) for r in routes if r.via_litellm} - queued)
        if not wanted:
            return
        self._to_warm.extend(wanted)
        self.warm_failure = None
        if self._warm_task is None or self._warm_task.done():
            self._warm_task = asyncio.create_task(self._warm_queued(), name="farebox-warm-litellm")

    async def _warm_queued(self) -> None:
        while self._to_warm:
            provider, model = self._to_warm[0]
            try:
                await self._litellm_adapter().warm(provider, model)
            except Exception as exc:  # a broken install: say so in /readyz, keep serving
                self.warm_failure = f"litellm failed to load for {provider}/{model}: {exc!r}"
                log.error("%s", self.warm_failure)
                self._to_warm.clear()
                return
            self._warmed.add(self._to_warm.pop(0))
        freeze_heap()  # litellm's modules and maps live as long as the process

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
        if self._warm_task is not None:
            self._warm_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._warm_task
        await self.openai.aclose()  # the native pool
        if self._litellm is not None:
            await self._litellm.aclose()
        if self._client is not None:
            await self._client.aclose()
