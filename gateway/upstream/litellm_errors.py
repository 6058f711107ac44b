"""Map a litellm failure to a gateway error, by whether the request ever went out.

litellm validates and translates a request before it sends it, and reports a failure
there in the same exception types it uses for the provider's answers: `response_format:
5` becomes an `APIConnectionError` wrapping a `TypeError`, a bad tool a `KeyError`, a bad
`tool_choice` a `BadRequestError`, and a malformed `metadata` escapes as a bare
`AttributeError`. A reply the provider sent but litellm could not read can raise the very
same types. So the type alone cannot say whose fault it is; the adapter notes when
litellm hands the request to the HTTP client (`sent`), and this module decides, in order:

    a timeout anywhere in the chain         -> UpstreamTimeoutError 504
    a transport error anywhere in the chain -> UpstreamUnreachableError 502
    the provider answered 429 or 5xx        -> UpstreamStatusError (relayed status)
    not sent                                -> InvalidRequestError 400 (the client's request)
    the provider answered another 4xx       -> UpstreamStatusError (relayed status)
    a connection error with no cause        -> UpstreamUnreachableError 502
    anything else, after sending            -> UpstreamProtocolError 502 (an unreadable reply)

The first three need no mark, so a provider that litellm sends through a client of its own
(the mark then never set) still has its outages counted against its breaker; for such a
provider, a 4xx or an unreadable reply reads as the client's 400.
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
    UpstreamStatusError,
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
    causes = list(_chain(exc))
    if isinstance(exc, openai.APITimeoutError) or _any(
        causes, httpx.TimeoutException, TimeoutError
    ):
        return UpstreamTimeoutError(f"upstream {where} timed out")
    if _any(causes, httpx.TransportError, OSError):
        return UpstreamUnreachableError(f"upstream {where} is unreachable ({detail})")
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    if status is not None and (status == 429 or status >= 500):
        return _relayed(status, detail, where, secrets)
    if not sent:
        return InvalidRequestError(
            f"the request cannot be sent to {where}: {detail}", param=_param(exc, detail)
        )
    if status is not None and status >= 400:
        return _relayed(status, detail, where, secrets)
    if isinstance(exc, openai.APIConnectionError) and len(causes) == 1:
        return UpstreamUnreachableError(f"upstream {where} is unreachable ({detail})")
    return UpstreamProtocolError(f"upstream {where} sent a reply that cannot be read: {detail}")


def _relayed(
    status: int, detail: str, where: str, secrets: Iterable[str | None]
) -> UpstreamStatusError:
    body = orjson.dumps({"error": {"message": detail}})
    return failures.from_status(status, body, where, secrets)


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


def _any(chain: list[BaseException], *kinds: type[BaseException]) -> bool:
    return any(isinstance(item, kinds) for item in chain)
