"""Measure a Responses API reply: usage, served tier, token times, what was said.

Usage is the Response's own (`input_tokens` with `input_tokens_details.cached_tokens`,
`output_tokens` with `output_tokens_details.reasoning_tokens`), read through
`usage_from_openai` so the same rules apply as to chat. A stream reports it once, in
`response.completed` (or `.incomplete`); the first reasoning, text or function-call
argument delta is the first token. The meter only reads what the client receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.pipeline.measure import Meter
from gateway.usage import Usage, usage_from_openai

ENDS = ("response.completed", "response.incomplete", "response.failed")
_THOUGHT = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")


def usage_from_responses(usage: dict[str, Any]) -> Usage:
    """A Responses `usage` object as the gateway's usage."""
    return usage_from_openai(
        {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "prompt_tokens_details": usage.get("input_tokens_details"),
            "completion_tokens_details": usage.get("output_tokens_details"),
        }
    )


@dataclass(slots=True)
class ResponsesMeter:
    """Feeds a pipeline `Meter` from a Response object or the Responses events."""

    meter: Meter = field(default_factory=Meter)
    final: dict[str, Any] | None = None  # the finished Response object
    ended: str | None = None  # the type of the event that ended the stream

    def observe_response(self, response: dict[str, Any]) -> None:
        """A whole Response (a reply, or the one a final event carries)."""
        self.final = response
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.meter.usage = usage_from_responses(usage)
        if isinstance(response.get("service_tier"), str):
            self.meter.service_tier = response["service_tier"]
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        self.meter.finish_reason = (
            "length"
            if reason == "max_output_tokens"
            else (reason or str(response.get("status") or "completed"))
        )
        if self.meter.chunks == 0:  # a whole reply: keep what it said, for estimates
            for item in _objects(response.get("output")):
                self._observe_item(item)

    def observe_event(self, payload: dict[str, Any]) -> None:
        """One streamed event's parsed data."""
        meter = self.meter
        meter.chunks += 1
        kind = payload.get("type")
        if kind == "response.output_text.delta":
            self._said(str(payload.get("delta") or ""), thought=False)
        elif kind in _THOUGHT:
            self._said(str(payload.get("delta") or ""), thought=True)
        elif kind == "response.function_call_arguments.delta":
            self._said("", thought=False, answered=True)
        elif kind in ENDS:
            self.ended = kind
            response = payload.get("response")
            if isinstance(response, dict):
                self.observe_response(response)

    def _observe_item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        for part in _objects(item.get("content")) + _objects(item.get("summary")):
            text = part.get("text")
            if isinstance(text, str) and text:
                (
                    self.meter.reasoning_parts if kind == "reasoning" else self.meter.answer_parts
                ).append(text)

    def _said(self, text: str, *, thought: bool, answered: bool = False) -> None:
        meter = self.meter
        if text:
            (meter.reasoning_parts if thought else meter.answer_parts).append(text)
        if not (text or answered):
            return
        now = meter.clock()
        if meter.first_token is None:
            meter.first_token = now
        if not thought and meter.first_answer_token is None:
            meter.first_answer_token = now
        meter.last_token = now


def _objects(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
