"""More than one worker needs shared state (Redis) or an explicit opt-in to per-worker state."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import Settings
from gateway.workers import workers_refusal


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({}, False),
        ({"workers": 2}, True),
        ({"workers": 2, "redis_url": "redis://127.0.0.1:6379/0"}, False),
        ({"workers": 2, "per_worker_state": True}, False),
    ],
)
def test_workers_without_redis_are_refused_unless_allowed(
    tmp_path: Path, options: dict[str, object], refused: bool
) -> None:
    reason = workers_refusal(Settings(data_dir=tmp_path, **options))  # type: ignore[arg-type]
    assert (reason is not None) == refused
    if reason:
        assert "FAREBOX_REDIS_URL" in reason and "--per-worker-state" in reason


def test_workers_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAREBOX_WORKERS", "3")
    monkeypatch.setenv("FAREBOX_PER_WORKER_STATE", "true")
    settings = Settings()
    assert settings.workers == 3 and settings.per_worker_state
    monkeypatch.setenv("FAREBOX_WORKERS", "0")
    with pytest.raises(ValueError, match="workers"):
        Settings()
