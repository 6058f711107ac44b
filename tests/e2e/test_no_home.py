"""A user with no home directory (a container's arbitrary uid) gets one line, not a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

NOBODY_UID = 54321  # no passwd entry: Path.home() cannot be found without HOME

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true", reason="switching uid needs root"
)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A folder the other uid can reach (pytest's tmp_path sits under a root-only folder)."""
    path = Path(tempfile.mkdtemp(prefix="farebox-nohome-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _farebox(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FAREBOX_") and k not in ("HOME", "XDG_DATA_HOME")
    }
    command = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}", "--clear-groups"]
    return subprocess.run(
        [*command, sys.executable, "-m", "gateway", *args],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_root
def test_no_home_and_no_data_dir_is_one_line_with_the_fix(workdir: Path) -> None:
    result = _farebox(workdir, "report")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "no home directory" in result.stderr and "FAREBOX_DATA_DIR" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@needs_root
def test_a_data_dir_is_enough_without_a_home(workdir: Path) -> None:
    result = _farebox(workdir, "report", FAREBOX_DATA_DIR=str(workdir / "data"))
    assert "Traceback" not in result.stderr
    assert f"no ledger at {workdir / 'data' / 'farebox.db'}" in result.stderr  # it got that far
