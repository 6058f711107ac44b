"""A Messages request is prefix-checked while the upstream works, where that changes
nothing sent.

Forwarded to Anthropic, the client's bytes go upstream as written; translated to chat,
the chat body is sent as the stages built it. On a route that only observes, the check
runs once the request is written (h1's `while_waiting`), and the reply's headers, whole
or streamed, and the ledger row are what they were when it ran before the call. A route
with an action (`anthropic_cache_control`, `strict`) still checks before sending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from gateway.pipeline import prefix, prefix_pending, wire_prefix
from tests.conftest import SimControl
from tests.e2e.conftest import ANTHROPIC_KEY, Gateway
from tests.e2e.upstream_seen import upstream_had_it

GUIDE = "You are the billing agent. Follow the runbook exactly. " * 200  # over 1,024 tokens
SYSTEM = [{"type": "text", "text": GUIDE, "cache_control": {"type": "ephemeral"}}]
TURNS = [{"role": "user", "content": "Check invoice 7."}]


def _watch_checks(monkeypatch: pytest.MonkeyPatch, sim: SimControl, before: int) -> list[bool]:
    """Each check of a forwarded body run: whether the upstream had the request then."""
    runs: list[bool] = []
    real = wire_prefix.observe_wire

    def check(*args: Any, **kwargs: Any) -> Any:
        runs.append(upstream_had_it(sim, before))
        return real(*args, **kwargs)

    monkeypatch.setattr(wire_prefix, "observe_wire", check)
    return runs


def _claude(gateway: Gateway) -> anthropic.Anthropic:
    base = gateway.base_url.removesuffix("/v1")
    return anthropic.Anthropic(base_url=base, api_key=ANTHROPIC_KEY, max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_forwarded_request_is_checked_once_the_upstream_has_it(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    client = _claude(gateway)
    args: Any = {"model": "claude", "max_tokens": 16, "system": SYSTEM, "messages": TURNS}
    client.messages.create(**args)
    before = len(sim.requests())
    sim.fault(delay_s=1.5)  # the simulator holds its reply past the check's wait
    runs = _watch_checks(monkeypatch, sim, before)
    raw = client.messages.with_raw_response.create(**args, stream=stream)
    headers = raw.headers
    if stream:
        assert [event.type for event in raw.parse()][-1] == "message_stop"
    assert runs == [True]  # once, with the request already at the upstream
    assert headers["x-farebox-prefix"] == "stable"  # the first call's prefix, seen again
    assert int(headers["x-farebox-expected-cached-tokens"]) > 1024
    booked = gateway.last(2)
    assert booked.prefix is not None and booked.prefix.verdict is not None


def test_a_route_with_an_action_still_checks_before_sending(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = len(sim.requests())
    runs = _watch_checks(monkeypatch, sim, before)
    reply = _claude(gateway).messages.with_raw_response.create(
        model="claude-cached",
        max_tokens=16,
        system=GUIDE,
        messages=TURNS,  # type: ignore[arg-type]
    )
    assert runs == [False]  # before the upstream had it
    assert reply.headers["x-farebox-prefix"]


def _watch_chat_checks(
    monkeypatch: pytest.MonkeyPatch, sim: SimControl, before: int
) -> list[tuple[str, bool]]:
    """`_watch_checks` for a translated request: the chat path's own check."""
    runs: list[tuple[str, bool]] = []

    def watched(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            runs.append((kind, upstream_had_it(sim, before)))
            return real(*args, **kwargs)

        return check

    monkeypatch.setattr(prefix, "_check", watched("before", prefix._check))
    monkeypatch.setattr(prefix_pending, "_check", watched("while", prefix_pending._check))
    return runs


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_translated_request_is_checked_once_the_upstream_has_it(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """To an OpenAI-wire route that only observes, the chat body sent is checked (on the
    chat path's own code) while the upstream reads it."""
    client = _claude(gateway)
    args: Any = {"model": "chat", "max_tokens": 16, "system": GUIDE, "messages": TURNS}
    client.messages.create(**args)
    before = len(sim.requests())
    sim.fault(delay_s=1.5)  # the simulator holds its reply past the check's wait
    runs = _watch_chat_checks(monkeypatch, sim, before)
    raw = client.messages.with_raw_response.create(**args, stream=stream)
    if stream:
        assert [event.type for event in raw.parse()][-1] == "message_stop"
    assert runs == [("while", True)]
    assert raw.headers["x-farebox-prefix"] == "stable"
    assert gateway.last(2).prefix is not None


def test_a_translated_strict_route_still_refuses_before_sending(
    gateway: Gateway, sim: SimControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = len(sim.requests())
    runs = _watch_chat_checks(monkeypatch, sim, before)
    volatile = f"Request id 5f0c6a1e-8b9d-4c3e-a2f1-0d9e8c7b6a54. {GUIDE}"
    with pytest.raises(anthropic.BadRequestError):
        _claude(gateway).messages.create(
            model="strict-chat",
            max_tokens=16,
            system=volatile,
            messages=TURNS,  # type: ignore[arg-type]
        )
    assert runs == [("before", False)]
    assert len(sim.requests()) == before
