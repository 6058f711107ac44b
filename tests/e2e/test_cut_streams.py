"""An upstream stream cut short (no chunked end) is a clean upstream error and one ledger row.

The simulator drops the connection after N chunks without the chunked encoding's last
chunk, which aiohttp raises as ClientPayloadError. On every streaming path (chat,
Messages, Responses) the client gets a 502 before the first event, or an error event
after it, naming the cut (never the client library's exception); the attempt is booked
once with status 502, and the upstream did receive the request.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from sqlalchemy import select

from gateway.ledger import make_engine
from gateway.ledger.models import RequestRow
from tests.conftest import SimControl
from tests.e2e.conftest import Gateway

STORY = "hi there, tell me a story"
CHAT = {"model": "chat", "messages": [{"role": "user", "content": STORY}], "stream": True}
MESSAGES = {**CHAT, "model": "claude", "max_tokens": 200}
RESPONSES = {"model": "chat", "input": STORY, "stream": True}
CUT = "closed the connection before a complete reply (the reply was cut)"


def _row(gateway: Gateway, request_id: str) -> RequestRow:
    """The ledger's row of `request_id`, once the writer has flushed it."""

    async def read() -> RequestRow | None:
        engine = make_engine(gateway.settings.ledger_url())
        try:
            async with engine.connect() as connection:
                found = await connection.execute(
                    select(RequestRow).where(RequestRow.request_id == request_id)
                )
                rows = found.all()
        finally:
            await engine.dispose()
        assert len(rows) <= 1, rows
        return rows[0] if rows else None

    deadline = time.monotonic() + 20
    while (row := asyncio.run(read())) is None:
        assert time.monotonic() < deadline, f"no ledger row for {request_id}"
        time.sleep(0.1)
    return row


@pytest.mark.parametrize("cut", [0, 2])
@pytest.mark.parametrize(
    "path,body",
    [("chat/completions", CHAT), ("messages", MESSAGES), ("responses", RESPONSES)],
    ids=["chat", "messages", "responses"],
)
def test_a_cut_stream_is_a_clean_error_and_one_row(
    gateway: Gateway, sim: SimControl, path: str, body: dict[str, object], cut: int
) -> None:
    sim.fault(status=200, count=1, drop_after_chunks=cut)
    response = httpx.post(f"{gateway.base_url}/{path}", json=body, timeout=30)
    assert CUT in response.text and "ClientPayloadError" not in response.text
    if response.status_code == 200:  # cut after the first event: an error event ends it
        assert response.text.count("error") >= 1
    else:
        assert response.status_code == 502, response.text
    (received,) = sim.requests()  # one upstream call, which the upstream cut
    assert received["stream"] and received["dropped"]
    ctx = gateway.last()
    assert ctx.status_code == 502
    row = _row(gateway, ctx.request_id)
    assert row.status_code == 502 and row.streamed
