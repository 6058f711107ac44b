"""Providers with their own wire format (Anthropic first), translated by litellm.

litellm is imported in a worker thread, and only when a route needs it: the import takes
seconds and ~200 MB. The gateway does it in the background at start-up (`warm`, while
/readyz says `warming`), so neither the port opening, the OpenAI-compatible path nor the
first request to such a route pays for it. It runs
with its bundled price map (`LITELLM_LOCAL_MODEL_COST_MAP=True`) so it never reaches the
network at import. Replies are rendered in OpenAI's chat-completion shape.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import httpx
import orjson

from gateway.errors import FareboxError
from gateway.upstream import conform, failures, param_support
from gateway.upstream.base import UpstreamCall, UpstreamReply
from gateway.upstream.litellm_errors import translate_litellm_error
from gateway.upstream.litellm_warmup import rehearse
from gateway.upstream.sse import DONE_EVENT, data_event
from gateway.upstream.stream_tier import StreamTierReport, watch_response

# OpenAI request fields litellm translates for other providers; others are dropped,
# since a non-OpenAI wire format has nowhere to put them.
TRANSLATED_FIELDS = frozenset(
    {
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "thinking",
        "stream_options",
        "seed",
        "user",
        "n",
        "service_tier",
        "metadata",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
    }
)
# litellm's own bookkeeping in replies, duplicated elsewhere in the same object.
LITELLM_ONLY_FIELDS = ("provider_specific_fields",)
log = logging.getLogger("farebox.upstream")


def _import_litellm() -> ModuleType:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    module = importlib.import_module("litellm")
    module.suppress_debug_info = True  # type: ignore[attr-defined]
    # Never drop a field silently: `param_support` refuses or drops (and says so) first,
    # and whatever litellm would still drop is an error naming it.
    module.drop_params = False  # type: ignore[attr-defined]
    return module


def _clean_reply(payload: dict[str, Any], tier_asked: bool) -> dict[str, Any]:
    """A litellm reply in OpenAI's shape: its own keys and nulls out, required nulls kept,
    and the tier that served echoed when the request set `service_tier`."""
    reply = conform.conforming_reply(conform.without_nulls(payload, LITELLM_ONLY_FIELDS))
    return conform.with_tier_echo(reply) if tier_asked else reply


def _clean_chunk(payload: dict[str, Any]) -> dict[str, Any]:
    """A litellm chunk in OpenAI's shape (`finish_reason: null` until the last)."""
    return conform.conforming_chunk(conform.without_nulls(payload, LITELLM_ONLY_FIELDS))


@dataclass(slots=True)
class _SendMark:
    """Set once litellm hands this call's request to the HTTP client."""

    sent: bool = False


# A mutable mark, not a flag: litellm validates in a worker thread with a copied context.
_SEND_MARK: ContextVar[_SendMark | None] = ContextVar("farebox_litellm_send", default=None)


@contextmanager
def _watching_send() -> Iterator[_SendMark]:
    """Note, for the duration of one litellm call, whether a request went out."""
    mark = _SendMark()
    token = _SEND_MARK.set(mark)
    try:
        yield mark
    finally:
        _SEND_MARK.reset(token)


# Body fields the policy wrote that litellm drops on the way (Anthropic's `speed` on a
# model its map does not list as fast-capable): written into the request as it leaves.
_OWN_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("farebox_own_fields", default=None)
OWN_FIELDS = ("speed",)


@contextmanager
def _own_fields(call: UpstreamCall) -> Iterator[None]:
    """Carry, for one litellm call, the fields Farebox sends itself."""
    fields = {key: call.parsed[key] for key in OWN_FIELDS if key in call.parsed}
    token = _OWN_FIELDS.set(fields or None)
    try:
        yield
    finally:
        _OWN_FIELDS.reset(token)


# Where a stream's `message_start` tier report is kept (`gateway/upstream/stream_tier.py`).
_STREAM_TIER: ContextVar[StreamTierReport | None] = ContextVar("farebox_tier", default=None)


@contextmanager
def _stream_tier(report: StreamTierReport) -> Iterator[None]:
    token = _STREAM_TIER.set(report)
    try:
        yield
    finally:
        _STREAM_TIER.reset(token)


def _with_own_fields(kwargs: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """The handler's post arguments with `fields` written into the JSON body."""
    if isinstance(kwargs.get("json"), dict):
        return {**kwargs, "json": {**kwargs["json"], **fields}}
    data = kwargs.get("data")
    if isinstance(data, (str, bytes)):
        body = orjson.loads(data)
        if isinstance(body, dict):
            return {**kwargs, "data": orjson.dumps({**body, **fields}).decode()}
    return kwargs


def _handler_class() -> type:
    """litellm's HTTP handler, which also marks the call as sent before each request."""
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    class SendMarkingHandler(AsyncHTTPHandler):
        async def post(self, *args: Any, **kwargs: Any) -> Any:
            mark = _SEND_MARK.get()
            if mark is not None:
                mark.sent = True
            fields = _OWN_FIELDS.get()
            if fields:
                kwargs = _with_own_fields(kwargs, fields)
            response = await super().post(*args, **kwargs)
            report = _STREAM_TIER.get()
            if report is not None and kwargs.get("stream"):
                watch_response(response, report)  # the tier litellm's chunks drop
            return response

    return SendMarkingHandler


def _taken(litellm: ModuleType, call: UpstreamCall, kwargs: dict[str, Any]) -> set[str]:
    """The request fields that reach the provider: passed to litellm, and litellm takes them,
    or written into the body by the handler (`OWN_FIELDS`)."""
    try:
        supported = litellm.get_supported_openai_params(
            model=call.route.model, custom_llm_provider=call.route.provider
        )
    except Exception:  # a provider litellm cannot describe: it decides, and errors say why
        supported = None
    if supported is None:
        return set(call.parsed)
    allowed = set(kwargs.get("allowed_openai_params") or ())
    verbatim = set(kwargs.get("extra_body") or {}) | set(OWN_FIELDS)
    return (set(kwargs) & (set(supported) | allowed)) | verbatim


def _translate(exc: BaseException, call: UpstreamCall, where: str, sent: bool) -> FareboxError:
    return translate_litellm_error(exc, where, [call.api_key], sent=sent)


class LiteLLMStream:
    """A litellm stream rendered as OpenAI SSE events."""

    def __init__(
        self, wrapper: Any, call: UpstreamCall, where: str, report: StreamTierReport | None = None
    ):
        self._wrapper = wrapper
        self._call = call
        self._where = where
        self._report = report or StreamTierReport()
        self.headers: dict[str, str] = {}

    async def events(self) -> AsyncIterator[bytes]:
        tier_asked = self._call.parsed.get("service_tier") is not None
        try:
            async for chunk in self._wrapper:
                payload = self._report.annotate(_clean_chunk(chunk.model_dump()))
                if tier_asked:  # every chunk names the tier, as OpenAI's do
                    payload = conform.echo_tier(payload, self._report.said.get("service_tier"))
                yield data_event(payload)
        except Exception as exc:  # the request went out: whatever fails is the reply's
            raise _translate(exc, self._call, self._where, sent=True) from exc
        yield DONE_EVENT

    async def aclose(self) -> None:
        close = getattr(self._wrapper, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:  # closing a half-read provider stream may itself fail
                return


class LiteLLMUpstream:
    """Calls `litellm.acompletion` with the route's provider, model, base URL and key.

    litellm sends through the gateway's own pooled client, so connections are shared
    with the OpenAI-compatible path and closed with the gateway, not left in litellm's
    process-wide cache.
    """

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client
        self._handler: Any = None
        self._module: ModuleType | None = None
        self._lock = asyncio.Lock()

    async def _litellm(self) -> ModuleType:
        async with self._lock:
            if self._module is None:
                self._module = await asyncio.to_thread(_import_litellm)
                self._handler = _handler_class()()
                await self._handler.close()  # drop its own client: it sends through ours
                self._handler.client = self._client
        return self._module

    async def warm(self, provider: str, model: str) -> None:
        """Import litellm and rehearse a call to this provider, off the event loop."""
        await asyncio.to_thread(rehearse, await self._litellm(), provider, model)

    def _kwargs(self, call: UpstreamCall) -> dict[str, Any]:
        # `speed` is not passed: litellm drops it for models its map does not list as
        # fast-capable. The handler writes it into the body itself (`_own_fields`).
        kwargs = {k: v for k, v in call.parsed.items() if k in TRANSLATED_FIELDS}
        kwargs.update(
            model=f"{call.route.provider}/{call.route.model}",
            messages=call.parsed["messages"],
            stream=call.stream,
            api_key=call.api_key,
            timeout=call.timeouts.first_token,
            num_retries=0,
            client=self._handler,
        )
        if call.extra_headers:
            kwargs["extra_headers"] = dict(call.extra_headers)
        # Thinking the policy wrote must reach the provider even for a model litellm's map
        # does not list as a reasoning model (drop_params would drop it). Not
        # reasoning_effort: litellm would also copy it into the body as a top-level field,
        # which the Messages API refuses; the planner sends it only where litellm maps it.
        allowed = [k for k in ("thinking",) if k in kwargs]
        if allowed:
            kwargs["allowed_openai_params"] = allowed
        if call.base_url:
            kwargs["api_base"] = call.base_url.removesuffix("/v1").removesuffix("/")
        return kwargs

    def _checked_kwargs(
        self, litellm: ModuleType, call: UpstreamCall
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """litellm's arguments less the hint fields the provider has no place for, and the
        header that says which were dropped; a field that would change the reply is a 400."""
        kwargs = self._kwargs(call)
        target = f"{call.route.provider} model {call.route.model}"
        taken = _taken(litellm, call, kwargs)
        dropped = param_support.fields_to_drop(call.parsed, taken, target)
        for name in param_support.not_taken(call.parsed, taken):  # `n: 1` asks for nothing
            kwargs.pop(name, None)
        if not dropped:
            return kwargs, {}
        log.info("%s: %s does not take %s; dropped", call.alias, target, ", ".join(dropped))
        return kwargs, {param_support.DROPPED_HEADER: ",".join(dropped)}

    async def complete(self, call: UpstreamCall) -> UpstreamReply:
        litellm = await self._litellm()
        kwargs, notice = self._checked_kwargs(litellm, call)
        where = failures.describe_upstream(call.alias, call.base_url or call.route.provider)
        with _watching_send() as mark, _own_fields(call):
            try:
                response = await litellm.acompletion(**kwargs)
                payload = _clean_reply(
                    response.model_dump(), call.parsed.get("service_tier") is not None
                )
            except Exception as exc:
                raise _translate(exc, call, where, mark.sent) from exc
        return UpstreamReply(200, orjson.dumps(payload), notice, payload)

    async def open_stream(self, call: UpstreamCall) -> LiteLLMStream:
        litellm = await self._litellm()
        kwargs, notice = self._checked_kwargs(litellm, call)
        where = failures.describe_upstream(call.alias, call.base_url or call.route.provider)
        report = StreamTierReport()
        with _watching_send() as mark, _own_fields(call), _stream_tier(report):
            try:
                wrapper = await litellm.acompletion(**kwargs)
            except Exception as exc:
                raise _translate(exc, call, where, mark.sent) from exc
        stream = LiteLLMStream(wrapper, call, where, report)
        stream.headers.update(notice)
        return stream

    async def aclose(self) -> None:
        """Nothing of its own to close: requests went through the gateway's client."""
        return None
