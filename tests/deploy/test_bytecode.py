"""Every install path leaves bytecode behind, so `farebox serve` compiles nothing at start.

Where PYTHONDONTWRITEBYTECODE is set (some machines, the image) and no .pyc was written
at install, each start compiles ~1,000 modules first: bench/first_request.py measured
2.4-2.8 s from launch to the first answer, against 1.2 s with bytecode in place.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.deploy.test_dockerfile import stages
from tests.deploy.tools import ROOT


def _dry_run(*targets: str) -> str:
    """What `make -n` would run for `targets` with the install stamps taken as stale."""
    result = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), *targets],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_makefiles_installs_compile_the_dependencies_and_the_package() -> None:
    commands = _dry_run(".venv/.installed", ".venv/.installed-test", ".venv/.bytecode")
    syncs = [line for line in commands.splitlines() if "uv sync" in line]
    assert len(syncs) == 2 and all("--compile-bytecode" in line for line in syncs), syncs
    # The installs compile the dependencies; the stamp compiles the editable package only.
    (compiles,) = [line for line in commands.splitlines() if "-m compileall" in line]
    assert compiles.split()[-1] == "gateway" and "purelib" not in compiles, compiles
    pip = _dry_run("INSTALLER=pip", ".venv/.installed", ".venv/.installed-test")
    installs = [line for line in pip.splitlines() if "pip install" in line and " -e " in line]
    assert len(installs) == 2 and all("--compile" in line for line in installs), installs


def test_serving_and_testing_compile_first() -> None:
    for target in ("run", "test", "bench"):
        line = next(
            line
            for line in (ROOT / "Makefile").read_text().splitlines()
            if line.startswith(f"{target}:")
        )
        assert "$(VENV)/.bytecode" in line, line


def test_the_image_compiles_at_install_and_checks_it() -> None:
    runtime = stages()[-1]
    (install,) = [run for run in runtime.all("RUN") if "pip install" in run]
    assert "--compile" in install.split()
    assert "cache_from_source" in install and "gateway has no bytecode" in install
