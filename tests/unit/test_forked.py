"""gateway.forked: a start-up step runs in a child; its imports stay there, its errors come back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.forked import ForkedStepError, call_forked, fetch_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


class StepRefusedError(Exception):
    """The error a caller expects from its step."""


def test_the_step_runs_in_another_process_and_its_effects_on_disk_stay(tmp_path: Path) -> None:
    out = tmp_path / "pid"
    call_forked(lambda: out.write_text(str(os.getpid())))
    assert int(out.read_text()) != os.getpid()


def test_the_expected_error_comes_back_with_its_message() -> None:
    def refuse() -> None:
        raise StepRefusedError("cannot reach the ledger database: start it")

    with pytest.raises(StepRefusedError, match=r"^cannot reach the ledger database: start it$"):
        call_forked(refuse, StepRefusedError)


def test_any_other_failure_comes_back_with_the_childs_traceback() -> None:
    def fail() -> None:
        raise KeyError("missing-table")

    with pytest.raises(ForkedStepError) as caught:
        call_forked(fail, StepRefusedError)
    assert "KeyError: 'missing-table'" in str(caught.value)
    assert "fail failed (exit 1)" in str(caught.value)


def test_what_the_step_imports_never_reaches_the_parent() -> None:
    # In a fresh interpreter: this test process may have imported the module already.
    probe = (
        "import sys; from gateway.forked import call_forked; "
        "call_forked(lambda: __import__('xml.dom.minidom')); "
        "print('xml.dom.minidom' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_what_the_step_prints_is_written_before_the_child_exits() -> None:
    probe = (
        "from gateway.forked import call_forked; "
        "call_forked(lambda: print('migrated in the child', end=''))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "migrated in the child"


def test_fetch_forked_returns_the_bytes_or_raises_the_expected_error() -> None:
    def refuse() -> bytes:
        raise StepRefusedError("cannot reach the ledger database: start it")

    assert fetch_forked(lambda: str(os.getpid()).encode()) != str(os.getpid()).encode()
    with pytest.raises(StepRefusedError, match=r"^cannot reach the ledger database: start it$"):
        fetch_forked(refuse, StepRefusedError)
    with pytest.raises(ForkedStepError, match="StepRefusedError"):
        fetch_forked(refuse)  # not expected: the child's traceback
