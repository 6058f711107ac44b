"""Render a lint report in the terminal, with the offending spans highlighted."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from gateway.prefix.lint import LintFinding, LintReport

_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
_SHOWN = 120


def _excerpt(finding: LintFinding) -> Text:
    """Return the span with some context around it, the span itself highlighted."""
    span = finding.text if len(finding.text) <= _SHOWN else finding.text[: _SHOWN - 3] + "..."
    line = Text("    ")
    line.append(("..." if finding.before else "") + finding.before, style="dim")
    line.append(span or "∅", style="black on yellow" if span else "dim")
    line.append(finding.after + ("..." if finding.after else ""), style="dim")
    return line


def render_report(report: LintReport, console: Console) -> None:
    """Print every finding with its location, the highlighted span and the suggested fix."""
    if report.uncacheable is not None:
        blocked = report.uncacheable
        console.print(Text(f"uncacheable: {blocked.reason}", style="bold red"))
        console.print(Text(f"    fix: {blocked.fix}", style="green"))
    if report.clean:
        console.print(f"[green]No prompt-cache breakers found[/] in {report.requests} request(s).")
        return
    if not report.findings:
        return
    for finding in report.findings:
        style = _STYLE.get(finding.severity, "bold")
        head = Text()
        head.append(f"{finding.severity:<8}", style=style)
        where = f"request {finding.request} › {finding.segment} @ {finding.offset}"
        head.append(f"{where}  ", style="bold")
        head.append(finding.kind, style=style)
        console.print(head)
        console.print(_excerpt(finding), soft_wrap=True)
        console.print(Text(f"    fix: {finding.suggestion}", style="green"))
    console.print(f"[bold]{len(report.findings)}[/] finding(s) in {report.requests} request(s).")
