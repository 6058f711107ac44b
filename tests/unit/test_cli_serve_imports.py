"""`farebox serve` imports no other command's modules; every other command line has them."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = (
    "import json, sys; sys.argv = ['farebox', *sys.argv[1:]]; import gateway.cli as cli; "
    "names = [c.name or c.callback.__name__ for c in cli.app.registered_commands]; "
    "print(json.dumps([names, 'gateway.sim.command' in sys.modules]))"
)


def _registered(*argv: str) -> tuple[list[str], bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True, timeout=60
    )
    names, sim_loaded = json.loads(done.stdout)
    return names, sim_loaded


def test_serve_registers_only_itself_and_loads_no_simulator() -> None:
    assert _registered("serve", "--port", "0") == (["serve"], False)


def test_any_other_command_line_registers_every_command() -> None:
    for argv in (["--help"], ["sim", "--help"], ["report"], []):
        names, sim_loaded = _registered(*argv)
        assert {"serve", "sim", "cost", "report", "lint", "audit"} <= set(names), argv
        assert sim_loaded


def test_serve_help_still_answers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "--workers" in done.stdout


HTTPX_CLI = (
    "import json, sys; sys.argv = ['farebox', *sys.argv[1:]]; import gateway.cli, httpx; "
    "print(json.dumps([sys.modules.get('httpx._main') is not None, 'pygments' in sys.modules, "
    "'tiktoken' in sys.modules]))"
)


def _httpx_cli(*argv: str) -> list[bool]:
    done = subprocess.run(
        [sys.executable, "-c", HTTPX_CLI, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: list[bool] = json.loads(done.stdout)
    return loaded


def test_serve_loads_neither_httpx_command_line_nor_tiktoken() -> None:
    # httpx's command line (pygments, rich's help) and tiktoken: 1.5 and 0.9 MiB a process
    assert _httpx_cli("serve", "--port", "0") == [False, False, False]


def test_other_command_lines_keep_httpx_as_it_is() -> None:
    assert _httpx_cli("report")[:2] == [True, True]
