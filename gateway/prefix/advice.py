"""What to tell the client about each kind of finding."""

from __future__ import annotations

_MOVE = "move it to the end of the last user message (or drop it)"
_ADVICE = {
    "timestamp": f"this timestamp changes between requests; {_MOVE}",
    "date": f"this date changes every day; {_MOVE}",
    "epoch": f"this epoch time changes between requests; {_MOVE}",
    "uuid": f"this UUID is new on every request; send it as metadata or a header, or {_MOVE}",
    "request_id": f"this request id is new on every request; send it as a header, or {_MOVE}",
    "traceparent": "trace context belongs in the `traceparent` header, not in the prompt",
    "ulid": f"this ULID is new on every request; {_MOVE}",
    "hex": f"this random-looking hex value will differ next time; {_MOVE}",
    "base64": f"this random-looking base64 value (nonce, token) will differ next time; {_MOVE}",
    "changed_value": f"this value changed since the previous request; {_MOVE}",
    "reordered_json": (
        "pin this serialisation: sort keys (json.dumps(..., sort_keys=True)) and sort tools "
        "by name, or let Farebox normalize the request"
    ),
    "tools_changed": (
        "keep the tool list fixed for the whole task: a changed tool definition "
        "invalidates the entire cached prefix"
    ),
    "setting_changed": (
        "keep this setting fixed within a task: changing it invalidates the cache "
        "from where the provider renders it"
    ),
    "response_format_changed": "keep the response schema fixed within a task",
    "request_specific_prefix": (
        "user- or request-specific content sits before content shared across requests; "
        "move it after the shared part (into the last user message)"
    ),
    "edited_history": (
        "an earlier message was rewritten; append to the conversation instead of editing it"
    ),
    "system_changed": "the system prompt changed; keep it fixed within a task",
}


def suggest(kind: str, segment: str = "") -> str:
    """Return the suggested fix for a finding of `kind` in `segment`."""
    advice = _ADVICE.get(kind, f"this content changes between requests; {_MOVE}")
    if segment == "tools" and kind not in ("reordered_json", "tools_changed"):
        return f"{advice} (take it out of the tool definitions)"
    return advice


def describe(segment: str, offset: int, kind: str, text: str) -> str:
    """Return a one-line description of a finding, for logs and error messages."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f"{segment} at offset {offset}: {kind.replace('_', ' ')} {shown!r}"
