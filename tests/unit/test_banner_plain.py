"""`farebox serve`'s banner, written without rich where rich would write the text bare.

Off a terminal rich prints a line's text with its markup tags taken out; `print_banner`
writes exactly that itself (so the serving process never imports rich), and hands every
line to rich where rich could style it or change it (a terminal, FORCE_COLOR, a `[`, an
emoji code, a control character). Each case is compared with rich's own output.
"""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from gateway.cli import print_banner

STYLED = [
    "[bold]Farebox 1.2.3[/] serving on http://127.0.0.1:4000/v1",
    '  OpenAI SDK: OpenAI(base_url="http://127.0.0.1:4000/v1", api_key="anything")',
    "  [bold yellow]OPEN MODE[/]: no FAREBOX_ADMIN_KEY, so no key is checked: anyone",
]
PLAIN = [
    "  config: /etc/farebox/farebox.yaml (reloaded on change and on SIGHUP)",
    "  backend: the bundled simulator at http://127.0.0.1:39213 (the configuration's models)",
    "  models: chat, opus, gpt",
    "  ledger: sqlite+aiosqlite:////var/lib/farebox/farebox.db",
]
# Text that rich reads: markup, an escape, emoji codes, control characters.
ODD = [
    "  config: /srv/[prod]/farebox.yaml",
    "  config: /srv/a\\[b]/farebox.yaml",
    "  config: /srv/:smile:/farebox.yaml",
    "  config: /srv/:thumbs_up-emoji:.yaml",
    "  ledger: postgresql+asyncpg://u:p@db:5432/x",
    "  config: /srv/a\rb/farebox.yaml",
    "  models: a\tb",
]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def by_rich(styled: list[str], plain: list[str], stream: io.StringIO) -> str:
    out = Console(soft_wrap=True, file=stream)
    for line in styled:
        out.print(line)
    for line in plain:
        out.print(line, markup=False, highlight=False)
    return stream.getvalue()


@pytest.fixture
def no_color_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_color_env")
def test_off_a_terminal_the_banner_is_rich_text_without_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected = by_rich(STYLED, PLAIN, io.StringIO())
    assert "[bold]" not in expected and "OPEN MODE: no FAREBOX_ADMIN_KEY" in expected
    monkeypatch.setitem(sys.modules, "rich.console", None)  # any import of it fails
    written = io.StringIO()
    print_banner(STYLED, PLAIN, written)
    assert written.getvalue() == expected


@pytest.mark.usefixtures("no_color_env")
@pytest.mark.parametrize("line", ODD)
def test_text_rich_would_read_is_printed_by_rich(line: str) -> None:
    for styled, plain in (([*STYLED[:1], line], PLAIN), (STYLED, [*PLAIN, line])):
        written = io.StringIO()
        print_banner(styled, plain, written)
        assert written.getvalue() == by_rich(styled, plain, io.StringIO())


@pytest.mark.usefixtures("no_color_env")
def test_a_terminal_gets_rich_styles() -> None:
    written = Terminal()
    print_banner(STYLED, PLAIN, written)
    assert written.getvalue() == by_rich(STYLED, PLAIN, Terminal())
    assert "\x1b[1m" in written.getvalue()  # bold, as rich writes it on a terminal


@pytest.mark.parametrize("env", [("FORCE_COLOR", "1"), ("TTY_COMPATIBLE", "1")])
def test_forced_colour_is_left_to_rich(
    monkeypatch: pytest.MonkeyPatch, env: tuple[str, str], no_color_env: None
) -> None:
    monkeypatch.setenv(*env)
    written = io.StringIO()
    print_banner(STYLED, PLAIN, written)
    assert written.getvalue() == by_rich(STYLED, PLAIN, io.StringIO())
    assert "\x1b[" in written.getvalue()
