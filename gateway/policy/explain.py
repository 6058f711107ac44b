"""Explain a decision: JSON for `farebox policy explain --json`, and a terminal rendering."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.policy.decision import Decision

if TYPE_CHECKING:  # rich is imported to render, not with the package: `serve` never renders
    from rich.console import Console
    from rich.table import Table


def explain(decision: Decision, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the decision as JSON-ready data; with `body`, the body as it would be sent."""
    data: dict[str, Any] = {
        "rule": decision.rule,
        "step_kind": decision.step_kind,
        "family": decision.family,
        "alias": decision.alias,
        "tier": {"served": decision.tier, "requested": decision.tier_requested},
        "effort": decision.effort,
        "pin_effort": decision.pin_effort,
        "thinking_budget": decision.thinking_budget,
        "max_output_tokens": decision.max_output_tokens,
        "thinking_enforcement": decision.thinking_enforcement,
        "stream_enforcement": decision.thinking_enforcement == "stream",
        "closes_at_budget": decision.closes_at_budget,
        "can_continue": decision.can_continue,
        "edits": {"set": dict(decision.set_fields), "remove": sorted(decision.remove)},
        "headers": dict(decision.headers),
        "clamps": [
            {"field": c.field, "original": c.original, "new": c.new, "reason": c.reason}
            for c in decision.clamps
        ],
        "notes": list(decision.notes),
        "fallbacks": [step.model_dump(exclude_defaults=True) for step in decision.fallbacks],
        "retry": decision.retry.model_dump(),
        "breaker": decision.breaker.model_dump(),
        "timeouts": decision.timeouts.model_dump(),
        "rejection": None,
    }
    if decision.rejection is not None:
        rejection = decision.rejection
        data["rejection"] = {"field": rejection.field, "message": rejection.message}
    if body is not None and decision.rejection is None:
        data["body"] = decision.apply(body)
    return data


ENFORCEMENT_TEXT = {
    "backend": "held by the backend",
    "stream": "held by Farebox on the stream (cut, then continued)",
    "hint": "asked for only; nothing stops the model thinking past it",
}


def _enforcement_text(decision: Decision) -> str:
    held = decision.thinking_enforcement
    if held is None:
        return "-"
    if decision.closes_at_budget:
        return f"{held}: held by Farebox on the stream (cut; the reply ends there)"
    return f"{held}: {ENFORCEMENT_TEXT[held]}"


def _summary(decision: Decision) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    tier = decision.tier + (
        f" (asked: {decision.tier_requested})" if decision.tier_requested else ""
    )
    budget = decision.thinking_budget
    rows = [
        ("rule", decision.rule),
        ("step", decision.step_kind),
        ("alias", f"{decision.alias} ({decision.family})"),
        ("tier", tier),
        (
            "effort",
            f"{decision.effort or '-'}{' (pinned per task)' if decision.pin_effort else ''}",
        ),
        ("thinking budget", "-" if budget is None else str(budget)),
        (
            "output cap",
            "-" if decision.max_output_tokens is None else str(decision.max_output_tokens),
        ),
        ("thinking cap", _enforcement_text(decision)),
    ]
    for key, value in rows:
        table.add_row(key, escape(value))
    return table


def _edits(decision: Decision, console: Console) -> None:
    from rich.markup import escape

    for key, value in decision.set_fields.items():
        console.print(f"  [green]set[/]    {key} = {escape(repr(value))}", soft_wrap=True)
    for key in sorted(decision.remove):
        console.print(f"  [red]remove[/] {escape(key)}")
    for key, value in decision.headers.items():
        console.print(f"  [cyan]header[/] {key}: {escape(value)}")


def render_decision(decision: Decision, console: Console) -> None:
    """Print the decision: the rule, the caps, each edit, clamp and note, and the fallbacks."""
    from rich.markup import escape

    if decision.rejection is not None:
        console.print(f"[bold red]rejected[/] by rule '{escape(decision.rule)}'")
        console.print(f"  {decision.rejection.field}: {escape(decision.rejection.message)}")
        return
    console.print(_summary(decision))
    console.print(
        "[bold]edits[/]" if decision.set_fields or decision.remove else "[dim]no edits[/]"
    )
    _edits(decision, console)
    for clamp in decision.clamps:
        console.print(
            f"  [yellow]clamp[/]  {clamp.field}: {clamp.original} -> {clamp.new} "
            f"({escape(clamp.reason)})"
        )
    for note in decision.notes:
        console.print(f"  [dim]note[/]   {escape(note)}")
    for step in decision.fallbacks:
        where = f"{step.alias or decision.alias}/{step.tier or 'same tier'}"
        when = f" from {step.from_tier}" if step.from_tier else ""
        later = " after retries" if step.after_retries else ""
        statuses = ", ".join(str(status) for status in step.statuses)
        console.print(f"  [magenta]fallback[/]{when} on {statuses}{later} -> {escape(where)}")
