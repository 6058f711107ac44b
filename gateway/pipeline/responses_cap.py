"""The stream-enforced thinking cap on a native Responses stream (`wire: responses`).

A translated Responses request is cut on its chat stream (`thinking_cap.CappedStream`).
A route that speaks the Responses API itself streams typed events, and has no way to be
continued from a closed thought (`continue_final_message` is chat's; vLLM's Responses
server has no counterpart): at the budget the upstream is closed and the stream ended
as the Responses API ends one that ran out of output tokens, whatever the route's
`thinking_overrun`:

    ... response.reasoning_text.delta (the last within the budget)
    response.reasoning_text.done, response.output_item.done   (the open reasoning item)
    response.incomplete   (incomplete_details.reason: max_output_tokens; usage counted)

The usage is the gateway's count, as for a chat stream cut without continuation: the
prompt tokenized, one output token per reasoning delta, all of them reasoning.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.pipeline.event_relay import Relayed, event_payload
from gateway.pipeline.thinking_cap import prompt_tokens
from gateway.upstream.base import UpstreamStream
from gateway.upstream.responses_stream import sse
from gateway.upstream.responses_wire import reasoning_item, responses_usage
from gateway.usage import Usage

THOUGHT = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_SNAPSHOTS = ("response.created", "response.in_progress")


@dataclass(slots=True)
class _Seen:
    """What the stream has told so far: enough to end it in its own terms."""

    response: dict[str, Any] = field(default_factory=dict)
    done: list[dict[str, Any]] = field(default_factory=list)
    open_item: dict[str, Any] | None = None
    open_index: int = 0
    thought: list[str] = field(default_factory=list)
    sequence: int = -1
    deltas: int = 0

    def observe(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        number = payload.get("sequence_number")
        if isinstance(number, int):
            self.sequence = max(self.sequence, number)
        if kind in _SNAPSHOTS and isinstance(payload.get("response"), dict):
            self.response = payload["response"]
        elif kind == "response.output_item.added" and isinstance(payload.get("item"), dict):
            self.open_item, self.thought = payload["item"], []
            index = payload.get("output_index")
            self.open_index = index if isinstance(index, int) else len(self.done)
        elif kind == "response.output_item.done" and isinstance(payload.get("item"), dict):
            self.done.append(payload["item"])
            self.open_item = None
        elif kind in THOUGHT and isinstance(payload.get("delta"), str):
            self.thought.append(payload["delta"])
            self.deltas += 1  # one token per delta, as vLLM streams them


async def capped_native(
    events: AsyncIterator[Relayed], stream: UpstreamStream, budget: int, body: dict[str, Any]
) -> AsyncGenerator[Relayed, None]:
    """`events` until the reasoning has used up `budget`, then the ending told above.

    `body` is the request in chat terms (the policy's view), whose prompt is counted.
    """
    seen = _Seen()
    async for event, parsed in events:
        payload = parsed if parsed is not None else event_payload(event, "upstream")
        if payload is not None:
            seen.observe(payload)
        yield event, payload
        if seen.deltas >= budget and payload is not None and payload.get("type") in THOUGHT:
            break
    else:
        return
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
    await stream.aclose()  # stops the generation upstream
    prompt = await asyncio.to_thread(prompt_tokens, body)
    for payload in _ending(seen, prompt):
        yield sse(payload), payload


def _ending(seen: _Seen, prompt: int) -> list[dict[str, Any]]:
    """The open reasoning item closed, then `response.incomplete` with the counted usage."""
    events: list[dict[str, Any]] = []

    def event(kind: str, **fields: Any) -> None:
        seen.sequence += 1
        events.append({"type": kind, "sequence_number": seen.sequence, **fields})

    item = seen.open_item
    if item is not None and item.get("type") == "reasoning":
        text = "".join(seen.thought)
        closed = reasoning_item(text, str(item.get("id") or "")) | {"status": "completed"}
        located = {"item_id": closed["id"], "output_index": seen.open_index}
        event("response.reasoning_text.done", **located, content_index=0, text=text)
        event("response.output_item.done", output_index=seen.open_index, item=closed)
        seen.done.append(closed)
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=seen.deltas,
        reasoning_tokens=seen.deltas,
        estimated=True,
    )
    response = seen.response | {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": seen.done,
        "usage": responses_usage(usage),
    }
    event("response.incomplete", response=response)
    return events
