"""Anthropic Messages <-> chat completions, for routes that speak chat (vLLM, SGLang, OpenAI).

Pure functions: `to_chat` turns a Messages body into a chat body, `to_message` turns a chat
completion into an Anthropic message. Not litellm's adapter: it drops nothing the client's
cache depends on (tool schemas and tool arguments keep the client's key order), writes a
thinking budget in the route family's own field (the same field the policy caps), and sends
images as `image_url` parts every OpenAI-wire server takes. What chat cannot carry is
refused with a 400 naming the block (documents) or dropped on purpose (`cache_control`:
these servers cache prefixes on their own). See docs/protocols.md.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.policy.effort import effort_for_budget
from gateway.policy.schema import Family

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""Chat's finish_reason as Anthropic's stop_reason (anything else ends the turn)."""
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
SERVICE_TIERS = {"standard_only": "default", "auto": "auto"}
PASSED = ("temperature", "top_p")
SAMPLING_EXTRAS = ("top_k",)  # vLLM and SGLang take it; OpenAI refuses it


def to_chat(body: dict[str, Any], family: Family) -> dict[str, Any]:
    """The chat-completions body that asks the same as this Messages body."""
    chat: dict[str, Any] = {"model": body.get("model")}
    chat["messages"] = _system(body.get("system")) + _turns(body.get("messages"))
    if body.get("tools"):
        chat["tools"] = [_tool(tool, i) for i, tool in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        _tool_choice(chat, choice)
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    names = PASSED + (SAMPLING_EXTRAS if family in ("vllm", "sglang", "other") else ())
    chat |= {name: body[name] for name in names if body.get(name) is not None}
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    tier = body.get("service_tier")
    if isinstance(tier, str):
        chat["service_tier"] = SERVICE_TIERS.get(tier, tier)
    chat |= thinking_fields(body.get("thinking"), body.get("output_config"), family)
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # usage only comes when asked
    return chat


def thinking_fields(thinking: Any, output_config: Any, family: Family) -> dict[str, Any]:
    """A Messages `thinking` request in the family's own field (where the policy reads it).

    Budgeted thinking becomes the budget field of vLLM (`thinking_token_budget`) or SGLang
    (`chat_template_kwargs.thinking_budget`); OpenAI has only an effort, the budget's level.
    Adaptive thinking's `output_config.effort` becomes `reasoning_effort`; thinking
    disabled switches a vLLM or SGLang chat template's thinking off.
    """
    if not isinstance(thinking, dict):
        return {}
    kind = thinking.get("type")
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and isinstance(budget, int) and not isinstance(budget, bool):
        if family == "openai":
            return {"reasoning_effort": effort_for_budget(budget)}
        if family == "sglang":
            return {"chat_template_kwargs": {"thinking_budget": budget}}
        return {"thinking_token_budget": budget}
    if kind == "disabled" and family in ("vllm", "sglang"):
        return {"chat_template_kwargs": {"enable_thinking": False}}  # as the policy writes "none"
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if kind == "adaptive" and isinstance(effort, str):
        return {"reasoning_effort": effort}
    return {}


def _system(system: Any) -> list[dict[str, Any]]:
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if isinstance(system, list):
        text = "\n".join(_text_of(block, f"system.{i}") for i, block in enumerate(system))
        return [{"role": "system", "content": text}] if text else []
    return []


def _turns(messages: Any) -> list[dict[str, Any]]:
    chat: list[dict[str, Any]] = []
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        role = message.get("role")
        content = message.get("content")
        where = f"messages.{i}"
        if role == "assistant":
            chat.append(_assistant(content, where))
        elif role == "user":
            chat.extend(_user(content, where))
        elif role == "system":  # a mid-conversation system message (Claude Code sends them)
            chat.extend(_mid_system(content, where))
        else:
            raise InvalidRequestError(
                f"{where}.role: expected 'user', 'assistant' or 'system', got {role!r}",
                param=where,
            )
    return chat


def _mid_system(content: Any, where: str) -> list[dict[str, Any]]:
    """A system turn inside `messages`: a chat system message where it stands (text only)."""
    blocks = _blocks(content)
    text = "\n".join(_text_of(b, f"{where}.content.{j}") for j, b in enumerate(blocks))
    return [{"role": "system", "content": text}] if text else []


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def _user(content: Any, where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results as `tool` messages first, then the rest as one message."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(content)):
        at = f"{where}.content.{j}"
        if block.get("type") == "tool_result":
            results.append(_tool_result(block, at))
        else:
            parts.append(_part(block, at))
    if not parts:
        return results
    if all(part["type"] == "text" for part in parts):
        text: Any = "".join(part["text"] for part in parts) if len(parts) == 1 else parts
        return [*results, {"role": "user", "content": text}]
    return [*results, {"role": "user", "content": parts}]


def _part(block: dict[str, Any], at: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _image_url(block, at)}}
    if kind == "document":
        raise InvalidRequestError(
            f"{at}: a document block cannot be sent to this model: its route speaks chat "
            "completions, which take no documents (send the text, or use an Anthropic route)",
            param=at,
        )
    raise InvalidRequestError(
        f"{at}: a {kind!r} block cannot be translated for a chat-completions route", param=at
    )


def _image_url(block: dict[str, Any], at: str) -> str:
    source = block.get("source")
    if isinstance(source, dict):
        if source.get("type") == "base64":
            return f"data:{source.get('media_type')};base64,{source.get('data')}"
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
    raise InvalidRequestError(f"{at}.source: expected a base64 or url image source", param=at)


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    content = block.get("content")
    if isinstance(content, list):
        content = "".join(_text_of(part, f"{at}.content.{k}") for k, part in enumerate(content))
    text = str(content) if content is not None else ""
    if block.get("is_error"):
        text = f"Error: {text}"  # chat has no error flag on a tool message
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}


def _text_of(block: Any, at: str) -> str:
    if isinstance(block, dict) and block.get("type") == "text":
        return str(block.get("text", ""))
    kind = block.get("type") if isinstance(block, dict) else type(block).__name__
    raise InvalidRequestError(f"{at}: only text blocks can be sent here, got {kind!r}", param=at)


def _assistant(content: Any, where: str) -> dict[str, Any]:
    """An assistant turn: its text, and its tool_use blocks as tool_calls (thinking dropped)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _blocks(content):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input", {})).decode()  # the client's key order
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _tool(tool: Any, i: int) -> dict[str, Any]:
    at = f"tools.{i}"
    if not isinstance(tool, dict) or "input_schema" not in tool:
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise InvalidRequestError(
            f"{at}: only custom tools (name, input_schema) can be sent to a chat-completions "
            f"route, got {kind!r}",
            param=at,
        )
    function: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]  # the same object: its key order kept
    return {"type": "function", "function": function}


def _tool_choice(chat: dict[str, Any], choice: dict[str, Any]) -> None:
    kind = choice.get("type")
    if kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif isinstance(kind, str) and kind in TOOL_CHOICES:
        chat["tool_choice"] = TOOL_CHOICES[kind]
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def to_message(reply: dict[str, Any], model: str, stops: list[str] | None = None) -> dict[str, Any]:
    """A whole chat completion as an Anthropic message (`model` is the client's name)."""
    choices = reply.get("choices")
    choice = as_object(choices[0] if isinstance(choices, list) and choices else None)
    message = as_object(choice.get("message"))
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if isinstance(message.get("content"), str) and message["content"]:
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        content.append(tool_use_block(call))
    stop_reason, stop_sequence = stop_of(choice, stops)
    return {
        "id": message_id(reply.get("id")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_of(reply.get("usage")),
    }


def tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": parse_arguments(function.get("arguments")),
    }


def parse_arguments(arguments: Any) -> Any:
    """A tool call's arguments as an object (`{}` when the model wrote none or broken JSON)."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def stop_of(choice: dict[str, Any], stops: list[str] | None) -> tuple[str | None, str | None]:
    """Anthropic's stop_reason and stop_sequence for a chat choice's finish."""
    finish = choice.get("finish_reason")
    if finish is None:
        return None, None
    matched = choice.get("stop_reason")  # vLLM names the stop string that ended the text
    if finish == "stop" and isinstance(matched, str) and stops and matched in stops:
        return "stop_sequence", matched
    return STOP_REASONS.get(str(finish), "end_turn"), None


def usage_of(usage: Any) -> dict[str, int]:
    """Chat usage in Anthropic's fields: input excludes what was read from the cache."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return {
        "input_tokens": max(prompt - cached, 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": _int(usage.get("completion_tokens")),
    }


def message_id(chat_id: Any) -> str:
    text = str(chat_id or "gateway")
    return text if text.startswith("msg_") else f"msg_{text.removeprefix('chatcmpl-')}"


def as_object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
