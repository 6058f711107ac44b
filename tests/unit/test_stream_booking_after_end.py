"""A stream that ended with its body is billed before its last bytes and booked after them.

The quota, the task's cost and the observers come before the client's end (as for a whole
reply); the rest of the booking (`finish.Booking`: the ledger row, metrics, the prompt's
history) runs after that last send, and also when that send raises: the row is never lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.pipeline import finish
from gateway.settings import Settings
from tests.asgi_direct import post_scope, receive_once
from tests.e2e.test_relay_batches import CONFIG, EVENTS, USAGE_EVENT, Upstream

EXPECTED = b"".join(event for event in EVENTS if event != USAGE_EVENT)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    yield server
    server.stop()


def _run(upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_end: bool):
    config = tmp_path / "farebox.yaml"
    config.write_text(CONFIG.format(url=f"http://127.0.0.1:{upstream.port}"))
    log: list[str] = []
    booking_call = finish.Booking.__call__

    async def recorded(self: finish.Booking) -> None:
        log.append("booking")
        await booking_call(self)

    monkeypatch.setattr(finish.Booking, "__call__", recorded)
    observed: list[Any] = []
    app = create_app(
        Settings(data_dir=tmp_path, config=config, log_level="warning"),
        observers=[lambda ctx: (observed.append(ctx), log.append("observed"))],
    )
    body = orjson.dumps(
        {"model": "batch", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )

    async def main() -> None:
        async with app.router.lifespan_context(app) as given:

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.body" and not message["more_body"]:
                    log.append("end")
                    if fail_end:
                        raise OSError("the client's connection broke")

            try:
                await app(post_scope(given), receive_once(body), send)
            except OSError:
                assert fail_end

    asyncio.run(main())
    assert len(observed) == 1 and observed[0].status_code == 200
    return log


def test_the_booking_follows_the_last_bytes(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.piece = 0
    assert _run(upstream, tmp_path, monkeypatch, fail_end=False) == ["observed", "end", "booking"]


def test_a_last_send_that_raises_is_still_booked(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.piece = 0
    assert _run(upstream, tmp_path, monkeypatch, fail_end=True) == ["observed", "end", "booking"]
