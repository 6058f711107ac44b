"""`farebox serve` imports no other command's modules; another named command imports only its
own; `--help` and any command line that names no command (and a program importing the CLI
to invoke it) has every command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = (
    "import json, sys; program = sys.argv.pop(1); sys.argv = [program, *sys.argv[1:]]; "
    "import gateway.cli as cli; "
    "names = [c.name or c.callback.__name__ for c in cli.app.registered_commands]; "
    "names += [g.name for g in cli.app.registered_groups]; "
    "print(json.dumps([names, 'gateway.sim.command' in sys.modules]))"
)
EVERY = ["serve", "sim", "cost", "report", "lint", "audit", "policy", "keys"]  # commands, groups


def _registered(*argv: str, program: str = "farebox") -> tuple[list[str], bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, program, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    names, sim_loaded = json.loads(done.stdout)
    return names, sim_loaded


def test_serve_registers_only_itself_and_loads_no_simulator() -> None:
    assert _registered("serve", "--port", "0") == (["serve"], False)


def test_a_named_command_registers_only_itself() -> None:
    assert _registered("report", "--json") == (["serve", "report"], False)
    assert _registered("keys", "list") == (["serve", "keys"], False)
    assert _registered("sim", "--help") == (["serve", "sim"], True)
    # `python -m gateway` is the same program
    assert _registered("lint", program="/x/gateway/__main__.py") == (["serve", "lint"], False)


def test_help_no_command_or_a_wrong_one_registers_every_command() -> None:
    for argv in (["--help"], ["--version"], [], ["reprot"]):
        names, sim_loaded = _registered(*argv)
        assert names == EVERY, argv
        assert sim_loaded


def test_another_program_importing_the_cli_gets_every_command() -> None:
    # pytest and scripts invoke `cli.app` themselves, whatever their own arguments say
    for program in ("/usr/bin/pytest", "-c"):
        assert _registered("report", program=program) == (EVERY, True)


def test_a_mistyped_command_is_answered_with_the_list() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "reprot"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert done.returncode == 2 and "No such command 'reprot'" in done.stderr
    assert "Did you mean 'report'?" in done.stderr


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
