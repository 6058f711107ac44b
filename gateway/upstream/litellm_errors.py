"""Map a litellm failure to a gateway error, by whether the request ever went out.

litellm validates and translates a request before it sends it, and reports a failure
there in the same exception types it uses for the provider's answers: `response_format:
5` becomes an `APIConnectionError` wrapping a `TypeError`, a bad tool a `KeyError`, a bad
`tool_choice` a `BadRequestError`, and a malformed `metadata` escapes as a bare
`AttributeError`. A reply the provider sent but litellm could not read can raise the very
same types. So the type alone cannot say whose fault it is; the adapter notes when
litellm hands the request to the HTTP client (`sent`), and this module decides:

    not sent                         -> InvalidRequestError 400 (the client's request)
    sent, timeout in the chain       -> UpstreamTimeoutError 504
    sent, transport error in chain   -> UpstreamUnreachableError 502
    sent, provider status >= 400     -> UpstreamStatusError (relayed status)
    sent, connection error, no cause -> UpstreamUnreachableError 502
    sent, anything else              -> UpstreamProtocolError 502 (a reply litellm could not read)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import httpx
import orjson

from gateway.errors import (
    FareboxError,
    InvalidRequestError,
    UpstreamProtocolError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from gateway.upstream import failures

# litellm's prefixes: "litellm.BadRequestError: AnthropicException - ..." (repeated at times)
_PREFIX = re.compile(r"^(?:\s*(?:litellm\.\w+:|\w+Exception\s+-)\s*)+")
# Request fields whose names are distinctive enough to find in litellm's messages.
_NAMEABLE_PARAMS = (
    "max_completion_tokens",
    "parallel_tool_calls",
    "frequency_penalty",
    "presence_penalty",
    "reasoning_effort",
    "response_format",
    "stream_options",
    "top_logprobs",
    "service_tier",
    "tool_choice",
    "temperature",
    "max_tokens",
    "thinking",
    "logprobs",
    "messages",
    "top_p",
    "tools",
)


def translate_litellm_error(
    exc: BaseException, where: str, secrets: Iterable[str | None], *, sent: bool
) -> FareboxError:
    """The gateway error for a litellm failure (see the module docstring)."""
    import openai

    if isinstance(exc, FareboxError):
        return exc
    detail = describe(exc, secrets)
    if not sent:
        return InvalidRequestError(
            f"the request cannot be sent to {where}: {detail}", param=_param(exc, detail)
        )
    causes = list(_chain(exc))
    if isinstance(exc, openai.APITimeoutError) or _any(causes, httpx.TimeoutException):
        return UpstreamTimeoutError(f"upstream {where} timed out")
    if _any(causes, httpx.TransportError) or _any(causes, OSError):
        return UpstreamUnreachableError(f"upstream {where} is unreachable ({detail})")
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 400:
        body = orjson.dumps({"error": {"message": detail}})
        return failures.from_status(status, body, where, secrets)
    if isinstance(exc, openai.APIConnectionError) and len(causes) == 1:
        return UpstreamUnreachableError(f"upstream {where} is unreachable ({detail})")
    return UpstreamProtocolError(f"upstream {where} sent a reply that cannot be read: {detail}")


def describe(exc: BaseException, secrets: Iterable[str | None]) -> str:
    """litellm's message without its class-name prefixes, traceback or secrets."""
    message = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    message = message.split("\nTraceback", 1)[0].strip()
    return failures.redact(_PREFIX.sub("", message), secrets)


def _param(exc: BaseException, detail: str) -> str | None:
    """The request field litellm blamed, when it says which."""
    param = getattr(exc, "param", None)
    if isinstance(param, str) and param:
        return param
    for name in _NAMEABLE_PARAMS:
        if re.search(rf"\b{name}\b", detail):
            return name
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and what it was raised from or during, nearest first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _any(chain: list[BaseException], kind: type[BaseException]) -> bool:
    return any(isinstance(item, kind) for item in chain)
