"""Measure a Messages API reply: usage, served tier, token times, what was said.

Anthropic reports usage twice on a stream: `message_start` carries the input side (input,
cache reads and writes) and a first output count, `message_delta` the final output count
(and, from newer servers, the input side again). The two are merged field by field, the
later value winning, and read with `usage_from_anthropic` (cache reads and writes added
back into the prompt, as every other consumer expects). Thinking tokens are not reported
apart by Anthropic: they are billed inside `output_tokens`, and `reasoning_tokens` stays 0
unless the reply was translated from a chat reply that counted them (`reasoning_tokens`).

The meter only reads; what the client receives is the relay's (`messages_relay`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from gateway.pipeline.measure import Meter
from gateway.tokens import count_tokens
from gateway.usage import usage_from_anthropic

TIER_FIELDS = ("service_tier", "speed")


@dataclass(slots=True)
class MessagesMeter:
    """Feeds a pipeline `Meter` from Anthropic's message object or stream events."""

    meter: Meter = field(default_factory=Meter)
    usage: dict[str, Any] = field(default_factory=dict)
    stopped: bool = False  # message_stop seen: the stream is complete
    final: bool = False  # message_delta's usage (the final output count) seen
    # Anthropic reports no thinking count; a reply translated from chat knows its own.
    reasoning_tokens: int = 0

    def observe_message(self, message: dict[str, Any]) -> None:
        """A whole reply (`type: message`)."""
        self._merge_usage(message.get("usage"))
        for block in _objects(message.get("content")):
            self._observe_block(block, None)
        self._stop_reason(message.get("stop_reason"))

    def observe_delta_event(self, event: bytes) -> bool:
        """Meter a token's `content_block_delta` event from its bytes, as `observe_event`
        meters its parsed data; False (nothing done) for any other event (`delta_text`)."""
        found = delta_text(event)
        if found is None:
            return False
        meter = self.meter
        meter.chunks += 1
        self._said(found[0], thought=found[1], now=meter.clock())
        return True

    def observe_event(self, payload: dict[str, Any]) -> None:
        """One streamed event's parsed data."""
        meter = self.meter
        meter.chunks += 1
        kind = payload.get("type")
        if kind == "message_start":
            self._merge_usage(_object(payload.get("message")).get("usage"))
        elif kind == "content_block_start":
            self._observe_block(_object(payload.get("content_block")), meter.clock())
        elif kind == "content_block_delta":
            self._observe_delta(_object(payload.get("delta")), meter.clock())
        elif kind == "message_delta":
            self._merge_usage(payload.get("usage"))
            self.final = isinstance(payload.get("usage"), dict)
            self._stop_reason(_object(payload.get("delta")).get("stop_reason"))
        elif kind == "message_stop":
            self.stopped = True

    @property
    def cut_short(self) -> bool:
        """Whether the output count must be estimated (`estimate_cut_output`): the stream
        began (`message_start`'s usage) but never reported its final count."""
        return self.meter.usage is not None and not self.final

    def estimate_cut_output(self) -> None:
        """A stream cut before its final count: output estimated from what was relayed.

        `message_start` counts the input exactly but only the first output token; the
        rest is counted with tiktoken from the text seen, and the usage marked estimated.
        """
        usage = self.meter.usage
        if usage is None or self.final:  # `cut_short`, with `usage` known to be set
            return
        seen = self.meter.seen_reasoning + self.meter.seen_answer
        output = max(usage.completion_tokens, count_tokens(seen) if seen else 0)
        self.meter.usage = replace(usage, completion_tokens=output, estimated=True)

    def _merge_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.usage.update({k: v for k, v in usage.items() if v is not None})
        self.meter.usage = usage_from_anthropic(self.usage, self.reasoning_tokens)
        for name in TIER_FIELDS:
            if isinstance(self.usage.get(name), str):
                setattr(self.meter, name, self.usage[name])

    def _stop_reason(self, reason: Any) -> None:
        if isinstance(reason, str) and reason:
            self.meter.finish_reason = reason

    def _observe_block(self, block: dict[str, Any], now: float | None) -> None:
        kind = block.get("type")
        if kind == "thinking":
            self._said(str(block.get("thinking") or ""), thought=True, now=now)
        elif kind == "text":
            self._said(str(block.get("text") or ""), thought=False, now=now)
        elif kind == "tool_use" and now is not None:
            self._said("", thought=False, now=now, answered=True)

    def _observe_delta(self, delta: dict[str, Any], now: float) -> None:
        kind = delta.get("type")
        if kind == "thinking_delta":
            self._said(str(delta.get("thinking") or ""), thought=True, now=now)
        elif kind == "text_delta":
            self._said(str(delta.get("text") or ""), thought=False, now=now)
        elif kind == "input_json_delta":
            self._said("", thought=False, now=now, answered=True)

    def _said(self, text: str, *, thought: bool, now: float | None, answered: bool = False) -> None:
        meter = self.meter
        if text:
            (meter.reasoning_parts if thought else meter.answer_parts).append(text)
        if now is None or not (text or answered):
            return  # a whole reply has no token times
        if meter.first_token is None:
            meter.first_token = now
        if not thought and meter.first_answer_token is None:
            meter.first_answer_token = now
        meter.last_token = now


_DELTA = re.compile(
    rb'event: content_block_delta\ndata: \{"type":"content_block_delta","index":(?:0|[1-9]\d{0,8}),'
    rb'"delta":\{"type":"(?:text_delta","text|(thinking)_delta","thinking)":"'
    rb'((?:[^"\\\x00-\x1f]|\\.)*)"\}\}(?:\n\n)?'
)
"""A token's event as Anthropic writes it (compact JSON, its keys in this order): the
delta's kind and its text's JSON string. Anything else (other keys, spacing, CR) is not
matched and is read whole."""


def delta_text(event: bytes) -> tuple[str, bool] | None:
    """(text, thought) of a text or thinking `content_block_delta` event written as
    Anthropic writes it, exactly as `observe_event` reads it from the parsed data; None for
    any other event, or a string that is not valid JSON (the full read raises on it).

    A real stream is a `content_block_delta` per token (hundreds a reply): parsing each
    into objects and reading them back took most of a native stream's relay time.
    """
    match = _DELTA.fullmatch(event)
    if match is None:
        return None
    thought, raw = match.group(1, 2)
    try:
        text = orjson.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode()
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return None
    return text, thought is not None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
