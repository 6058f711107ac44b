"""The `farebox` command: serve the gateway, run the simulator, and the reports."""

from __future__ import annotations

# First: it keeps httpx's command line out and pauses the collector for serve's imports.
from gateway import serve_imports as _serve_imports

# isort: split
import builtins
import importlib
import ipaddress
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, NoReturn

import typer
from pydantic import ValidationError

from gateway import __version__
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.settings import DEFAULT_CONFIG, NoDataDirError, Settings

if TYPE_CHECKING:
    from rich.console import Console

    from gateway.services import Services

app = typer.Typer(
    name="farebox",
    help="Farebox: an OpenAI-compatible, cost-aware LLM gateway.",
    no_args_is_help=True,
    add_completion=False,
)


def err() -> Console:
    """The console for errors (rich, imported when an error is shown: `serve` never needs it)."""
    from rich.console import Console

    return Console(stderr=True)


def version_line() -> str:
    """`farebox --version`: the version, and whether the native modules were built."""
    import platform

    from gateway import rawjson
    from gateway.prefix import locate
    from gateway.upstream import replies

    modules = (
        ("prefix locator", locate.NATIVE),
        ("JSON walker", rawjson.NATIVE),
        ("stream reader", replies.PLAIN_EVENT is not None),
    )
    built = [name for name, on in modules if on]
    native = f"native: {', '.join(built)}" if built else "pure Python: no native module loaded"
    return f"farebox {__version__} ({native}; Python {platform.python_version()})"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Farebox: an OpenAI-compatible, cost-aware LLM gateway."""


def _config_lines(settings: Settings, simulator: str | None) -> list[str]:
    """What the banner says of the configuration: where it comes from, whether it reloads."""
    if settings.uses_default_config():
        lines = [
            f"  config: the embedded default, {DEFAULT_CONFIG} (part of the package: not "
            "reloaded); to change it, serve a copy, which reloads on change:",
            f"    cp {DEFAULT_CONFIG} farebox.yaml && FAREBOX_CONFIG=farebox.yaml farebox serve",
        ]
        why = "no upstream configured; set FAREBOX_CONFIG to serve real ones"
    else:
        lines = [f"  config: {settings.config_path()} (reloaded on change and on SIGHUP)"]
        why = "the configuration's `base_url: sim` models"
    if simulator:
        lines.append(f"  backend: the bundled simulator at {simulator} ({why})")
    return lines


def _urls(host: str, port: int) -> tuple[str, str]:
    """Where the gateway listens, and a base URL a client on this machine can use."""
    literal = f"[{host}]" if ":" in host else host or "0.0.0.0"  # an IPv6 address in a URL
    base = f"http://{literal}:{port}/v1"
    if host in ("0.0.0.0", "::", ""):  # every interface: no client can connect to these
        return f"{base} (every interface)", f"http://127.0.0.1:{port}/v1"
    return base, base


def _banner(settings: Settings) -> Callable[[Services], None]:
    def show(services: Services) -> None:
        from gateway.ledger.diagnosis import shown  # SQLAlchemy's URL: loaded by serve anyway

        listening, base = _urls(settings.host, settings.port)
        styled = [f"[bold]Farebox {__version__}[/] serving on {listening}"]
        if settings.admin_key is None:
            styled.append(f'  OpenAI SDK: OpenAI(base_url="{base}", api_key="anything")')
            styled.append(
                "  [bold yellow]OPEN MODE[/]: no FAREBOX_ADMIN_KEY, so no key is checked: "
                "anyone who reaches this port may call every model, read all spend, "
                "reload the policy and bill any team (docs/security.md)"
            )
        else:
            styled.append(f'  OpenAI SDK: OpenAI(base_url="{base}", api_key="<a fbx- key>")')
            styled.append("  auth: keys (every endpoint but /healthz needs one; docs/security.md)")
        lines = _config_lines(settings, services.sim_base_url)
        lines.append(f"  models: {', '.join(services.config.models) or 'none'}")
        lines.append(f"  ledger: {shown(settings.ledger_url())}")
        print_banner(styled, lines, sys.stdout)

    return show


# What rich's markup, emoji codes or control-code stripping could change in a line: any
# `[` or `]` (a tag), a backslash (an escape), `:name:` with no space, colon or slash in
# the name (every emoji code's form), a control character.
_RICH_READS = re.compile(r"[\[\]\\\x00-\x1f\x7f]|:[^\s:/]*:")
_OUR_TAGS = re.compile(r"\[(?:bold|bold yellow|/)\]")


def print_banner(styled: list[str], plain: list[str], stream: IO[str]) -> None:
    """Print the banner's lines (`styled` with rich markup, `plain` as they are) on `stream`.

    Where rich would print them unstyled (`stream` not a terminal, as under a service
    manager, a container or the benches, and nothing that makes rich style anyway) and
    would print the text as given (`_RICH_READS`), they are written here: the serving
    process then never imports rich (2.7 MiB of RSS and 22-28 ms of CPU before the first
    request). Anywhere else, rich prints them, as it always did.
    """
    bare = [_OUR_TAGS.sub("", line) for line in styled]
    if _rich_styles(stream) or any(_RICH_READS.search(line) for line in bare + plain):
        from rich.console import Console

        out = Console(soft_wrap=True, file=stream)  # never wrapped: URLs, paths stay copyable
        for line in styled:
            out.print(line)
        for line in plain:
            out.print(line, markup=False, highlight=False)
        return
    stream.write("".join(f"{line}\n" for line in bare + plain))
    stream.flush()


def _rich_styles(stream: IO[str]) -> bool:
    """Whether rich may style what it prints on `stream` (`Console.is_terminal`'s cases)."""
    if hasattr(builtins, "get_ipython"):  # Jupyter, IPython: rich decides
        return True
    if getattr(sys.stdin, "__module__", "").startswith("idlelib"):
        return True
    if os.environ.get("TTY_COMPATIBLE", "") or "FORCE_COLOR" in os.environ:
        return True
    try:
        return stream.isatty()
    except ValueError:  # closed: rich prints nothing styled either, let it say so
        return True


def _refuse(reason: str) -> NoReturn:
    """Exit 2 with one red line: never wrapped, never read as markup (it may echo input)."""
    err().print(f"farebox: {reason}", style="red", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def open_bind_refusal(settings: Settings, allow_open: bool = False) -> str | None:
    """Why open mode may not listen on `settings.host`, or None when it may."""
    if settings.admin_key is not None or allow_open or settings.allow_open:
        return None
    if settings.host == "localhost" or _is_loopback(settings.host):
        return None
    return (
        f"refusing to serve in open mode on {settings.host}: without FAREBOX_ADMIN_KEY anyone "
        "who reaches it may spend every provider key. Set FAREBOX_ADMIN_KEY, listen on "
        "127.0.0.1, or pass --allow-open (FAREBOX_ALLOW_OPEN=true) to do it anyway."
    )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve anywhere
        return False


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML config (default: FAREBOX_CONFIG or the embedded one).")
    ] = None,
    allow_open: Annotated[
        bool, typer.Option(help="Serve in open mode (no admin key) on a non-loopback address.")
    ] = False,
    workers: Annotated[
        int | None, typer.Option(help="Gateway processes on the port (FAREBOX_WORKERS).", min=1)
    ] = None,
    per_worker_state: Annotated[
        bool | None,
        typer.Option(help="Allow --workers > 1 without FAREBOX_REDIS_URL (state per worker)."),
    ] = None,
) -> None:
    """Start the gateway."""
    with _serve_imports.deferred_model_builds():  # FastAPI's OpenAPI models: on first use
        import fastapi  # noqa: F401

    from gateway.app import create_app
    from gateway.drain import DrainingServer
    from gateway.forked import fetch_forked
    from gateway.heap import freeze_imports
    from gateway.preflight import PreflightError, bind
    from gateway.pricing.serving import install_serving_digest
    from gateway.server import server_config
    from gateway.workers import Supervisor, workers_refusal

    freeze_imports()  # the lifespan's collection then walks only what start-up makes
    _serve_imports.resume_collection()  # paused since gateway.cli's first import

    given = {"host": host, "port": port, "config": config, "workers": workers}
    given["per_worker_state"] = per_worker_state
    overrides = {k: v for k, v in given.items() if v is not None}  # --port 0: any free port
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:  # its str() would echo the input: an admin key
        reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        _refuse(f"invalid settings: {reasons}")
    refusal = open_bind_refusal(settings, allow_open) or workers_refusal(settings)
    if refusal is not None:
        _refuse(refusal)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    listener = None
    try:
        listener = bind(settings.host, settings.port)  # before any banner: a busy port fails
        gateway_config = load_config(settings.config_path())
        # In one forked child: a migration's Alembic imports and litellm's parsed price map
        # never reach the serving process (one fork for both: 5-7 ms of CPU less).
        digest = fetch_forked(lambda: _preflight_steps(settings, gateway_config), PreflightError)
        if digest:
            install_serving_digest(digest)
    except (ConfigError, PreflightError) as exc:
        if listener is not None:
            listener.close()
        _refuse(str(exc))
    settings = settings.model_copy(update={"port": listener.getsockname()[1]})  # for --port 0
    if settings.workers > 1:  # forked on the one socket (gateway.workers)
        supervisor = Supervisor(settings, gateway_config, listener, on_ready=_banner(settings))
        raise typer.Exit(supervisor.run())
    # The preflight migrated the ledger; the routers no chat request needs come on first use.
    application = create_app(
        settings, gateway_config, on_ready=_banner(settings), defer_routes=True, migrated=True
    )
    server = server_config(application, settings)
    DrainingServer(server, application.state.in_flight, settings.shutdown_grace_s).run(
        sockets=[listener]
    )


def _preflight_steps(settings: Settings, config: GatewayConfig) -> bytes:
    """In serve's forked child: migrate the ledger (PreflightError says why it cannot), then
    read litellm's price map for what serving `config` reads (`serving_digest`), so the
    serving process keeps only that. b"" if the reading fails: the app then reads the map
    itself, as it always could (and says what is wrong)."""
    from gateway.preflight import check_ledger
    from gateway.pricing.serving import serving_digest

    check_ledger(settings)
    try:
        return serving_digest(config)
    except Exception:  # the migration is done: a failed digest must not stop the start
        logging.getLogger("farebox").debug(
            "price map read in this process: %s", traceback.format_exc()
        )
        return b""


# Every command but serve, in `farebox --help`'s order: where it is defined (a Typer app
# is a group of subcommands) and its help when not its docstring. Each imports its own
# modules when registered.
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "sim": (
        "gateway.sim.command",
        "sim",
        "Run the bundled simulator (a stand-in for vLLM and Anthropic).",
    ),
    "cost": ("gateway.commands.cost", "cost", None),
    "report": ("gateway.commands.report", "report", None),
    "lint": ("gateway.commands.lint", "lint", None),
    "policy": ("gateway.commands.policy", "app", None),
    "keys": ("gateway.commands.keys", "app", None),
    "audit": ("gateway.commands.audit", "audit", None),
}


def _add(name: str) -> None:
    module, attribute, help_text = COMMANDS[name]
    found = getattr(importlib.import_module(module), attribute)
    if isinstance(found, typer.Typer):
        app.add_typer(found, name=name)
    else:
        app.command(name, help=help_text)(found)


def register_commands(argv: list[str]) -> None:
    """Register what the command line `argv` (the program first) can run.

    `farebox serve` registers nothing more (serve is defined above). Another named command,
    run as the `farebox` program, registers only itself: importing the others' modules (the
    simulator's app, httpx, the ledger's queries) cost each start hundreds of ms of CPU
    (bench/cli_start.py). Anything else registers them all: `--help`, no argument, a
    mistyped name (help and "No such command" list them), and a program that imports this
    module to invoke `app` itself (the tests' CliRunner).
    """
    named = argv[1] if len(argv) > 1 else None
    if named == "serve":  # the same test as gateway.serve_imports
        return
    if named in COMMANDS and _is_farebox(argv[0]):
        _add(named)
        return
    for name in COMMANDS:
        _add(name)


def _is_farebox(program: str) -> bool:
    """Whether `program` (argv[0]) is the `farebox` script or `python -m gateway`."""
    path = Path(program)
    return path.stem == "farebox" or path.parts[-2:] == ("gateway", "__main__.py")


register_commands(sys.argv)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except NoDataDirError as exc:  # one line with the fix, not a traceback
        err().print(str(exc), markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
