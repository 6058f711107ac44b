"""The embedded default configuration ships in the package; policies/ keeps a copy of it."""

from __future__ import annotations

from pathlib import Path

import pytest

import gateway
from gateway.config import load_config
from gateway.settings import DEFAULT_CONFIG, Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_lives_inside_the_package() -> None:
    assert DEFAULT_CONFIG.parent == Path(gateway.__file__).resolve().parent
    assert load_config(DEFAULT_CONFIG).uses_simulator


def test_the_example_copy_in_policies_does_not_drift() -> None:
    # One source of truth (gateway/default.yaml); the example folder shows the same bytes.
    copy = ROOT / "policies" / "default.yaml"
    assert copy.read_bytes() == DEFAULT_CONFIG.read_bytes(), (
        "policies/default.yaml differs from gateway/default.yaml: edit the package's "
        "file, then `cp gateway/default.yaml policies/default.yaml`"
    )


def test_the_data_folder_is_never_the_current_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Settings().data_dir == tmp_path / "xdg" / "farebox"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settings = Settings()
    assert settings.data_dir == tmp_path / "home" / ".local" / "share" / "farebox"
    assert settings.ledger_url() == f"sqlite+aiosqlite:///{settings.data_dir / 'farebox.db'}"
    monkeypatch.setenv("FAREBOX_DATA_DIR", str(tmp_path / "mine"))
    assert Settings().data_dir == tmp_path / "mine"
