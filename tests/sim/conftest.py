"""Fixtures for the simulator tests: in-process clients, real servers and SSE parsers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette

from gateway.sim import SimConfig, SimServer, create_sim_app

ChunkParser = Callable[[str], list[dict[str, Any]]]
EventParser = Callable[[str], list[tuple[str, dict[str, Any]]]]


def parse_openai_sse(text: str) -> list[dict[str, Any]]:
    """Return the JSON chunks of a vLLM stream, checking it ends with [DONE]."""
    frames = [frame for frame in text.split("\n\n") if frame]
    assert frames[-1] == "data: [DONE]", frames[-1]
    assert all(frame.startswith("data: ") for frame in frames)
    return [orjson.loads(frame[len("data: ") :]) for frame in frames[:-1]]


def parse_anthropic_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Return (event name, data) pairs, checking each name matches the data's type."""
    events = []
    for frame in (f for f in text.split("\n\n") if f):
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        name, data = name_line[len("event: ") :], orjson.loads(data_line[len("data: ") :])
        assert data["type"] == name
        events.append((name, data))
    return events


@pytest.fixture
def chunks_of() -> ChunkParser:
    """Parse a vLLM SSE body."""
    return parse_openai_sse


@pytest.fixture
def events_of() -> EventParser:
    """Parse an Anthropic SSE body."""
    return parse_anthropic_sse


@pytest.fixture
def sim_config() -> SimConfig:
    """Return the default configuration (zero latency)."""
    return SimConfig()


@pytest.fixture
def sim_app(sim_config: SimConfig) -> Starlette:
    """Return a fresh simulator app."""
    return create_sim_app(sim_config)


@pytest.fixture
async def client(sim_app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """Return an in-process client for the simulator app."""
    transport = httpx.ASGITransport(app=sim_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as http:
        yield http


@pytest.fixture
def live_sim(sim_config: SimConfig) -> Iterator[SimServer]:
    """Run the simulator on a real, spare port."""
    with SimServer(sim_config) as server:
        yield server
