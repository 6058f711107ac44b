"""What to do with a request field a provider's wire format has no place for.

Before, litellm ran with `drop_params` and dropped such fields silently: `n: 2` on an
Anthropic route came back as one choice with status 200, `logprobs` as none. Now each
field a provider does not take (per litellm's `get_supported_openai_params`) is either

- refused with OpenAI's 400 (`param` names it, `code: unsupported_parameter`), when
  dropping it would change what the client gets back (`n`, `logprobs`, audio, tools...);
- or dropped and said so, in `x-farebox-dropped-params` and the log, when it is only a
  hint to the sampler or the platform (`seed`, penalties, `metadata`, `store`...).

A field at its OpenAI default (`n: 1`, `logprobs: false`, `null`) asks for nothing and
passes. Pure: the adapter gives the supported set it got from litellm.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gateway.errors import UnsupportedParameterError

DROPPED_HEADER = "x-farebox-dropped-params"
# Not parameters but the request itself, or handled by the gateway/litellm for every provider.
ALWAYS_TAKEN = frozenset({"model", "messages", "stream", "stream_options"})
# Dropping these changes nothing the client reads back: dropped, and the response says so.
HINTS = frozenset(
    {
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "metadata",
        "store",
        "user",
        "prompt_cache_key",
        "safety_identifier",
        "prediction",
        "verbosity",
        "parallel_tool_calls",
        "temperature",
        "top_p",
        "service_tier",
    }
)
# Values that ask for nothing beyond what every provider does anyway.
DEFAULTS: Mapping[str, Any] = {
    "n": 1,
    "logprobs": False,
    "top_logprobs": 0,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "store": False,
    "parallel_tool_calls": True,
}


def asks_for_something(name: str, value: Any) -> bool:
    """Whether `value` for field `name` asks for more than the provider's default."""
    if value is None or value == {} or value == []:
        return False
    return not (name in DEFAULTS and value == DEFAULTS[name])


def not_taken(body: Mapping[str, Any], supported: Collection[str]) -> list[str]:
    """The fields of `body` the provider does not take, in order (whatever their value)."""
    return [name for name in body if name not in ALWAYS_TAKEN and name not in supported]


def unsupported(body: Mapping[str, Any], supported: Collection[str]) -> list[str]:
    """The fields of `body` that ask for something `supported` does not include, in order."""
    return [name for name in not_taken(body, supported) if asks_for_something(name, body[name])]


def fields_to_drop(body: Mapping[str, Any], supported: Collection[str], target: str) -> list[str]:
    """The hint fields to drop (and say so); refuse the first field that is not a hint."""
    names = unsupported(body, supported)
    for name in names:
        if name not in HINTS:
            raise UnsupportedParameterError(
                f"Unsupported parameter: '{name}' is not supported with this model "
                f"({target} has no such field, and leaving it out would change the reply); "
                f"remove '{name}' or use a model that supports it",
                param=name,
            )
    return names


def dropped_notice(via_litellm: bool, adapter_headers: Mapping[str, str]) -> str | None:
    """The fields the litellm adapter dropped, from the notice it attached to its reply or
    stream; an OpenAI-compatible upstream's own headers are not believed."""
    return (adapter_headers.get(DROPPED_HEADER) or None) if via_litellm else None


def notice_headers(dropped: str | None) -> dict[str, str]:
    """The client's header naming the dropped fields, when there were any."""
    return {DROPPED_HEADER: dropped} if dropped else {}
