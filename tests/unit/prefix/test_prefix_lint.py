"""`farebox lint`: reports, JSON, the rich renderer and the command's exit status."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gateway.prefix import lint_conversation, lint_request
from gateway.prefix.lint_cli import LintInputError, lint_command, read_requests
from gateway.prefix.render import render_report

SYSTEM = "You are a support agent for Northwind. Follow the returns policy."


def _body(system: str = SYSTEM, *turns: str) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i, turn in enumerate(turns or ("Where is my order?",)):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": turn})
    return {"model": "gpt-5", "messages": messages}


VOLATILE = _body(SYSTEM + " Now: 2026-03-12T14:03:07Z.")


def test_lint_request_reports_span_kind_and_fix() -> None:
    report = lint_request(VOLATILE)
    [finding] = report.findings
    assert (finding.segment, finding.kind, finding.text) == (
        "system",
        "timestamp",
        "2026-03-12T14:03:07Z",
    )
    assert "end of the last user message" in finding.suggestion
    assert finding.before.endswith("Now: ") and finding.after.startswith(".")


def test_to_json_has_one_entry_per_span() -> None:
    payload = json.loads(lint_request(VOLATILE).to_json())
    assert payload["requests"] == 1
    [entry] = payload["findings"]
    assert {"segment", "offset", "length", "kind", "text", "suggestion"} <= set(entry)


def test_conversation_confirms_a_value_that_changes() -> None:
    later = _body(
        SYSTEM + " Now: 2026-03-12T14:09:55Z.", "Where is my order?", "Shipped.", "Thanks"
    )
    report = lint_conversation([VOLATILE, later])
    assert [(f.request, f.severity) for f in report.findings] == [(0, "warning"), (1, "error")]


def test_conversation_does_not_repeat_an_unchanged_segment() -> None:
    later = _body(VOLATILE["messages"][0]["content"], "Where is my order?", "Shipped.", "Thanks")
    report = lint_conversation([VOLATILE, later])
    assert [f.request for f in report.findings] == [0]


def _console(width: int = 200) -> Console:
    return Console(record=True, width=width, file=io.StringIO(), color_system="standard")


def test_render_highlights_the_span() -> None:
    console = _console()
    render_report(lint_request(VOLATILE), console)
    text = console.export_text(clear=False)
    assert "system @" in text and "2026-03-12T14:03:07Z" in text and "fix:" in text
    styled = console.export_text(styles=True)
    assert "43m2026-03-12T14:03:07Z" in styled  # the span, and only it, on a yellow background


def test_render_clean_report() -> None:
    console = _console(120)
    render_report(lint_request(_body()), console)
    assert "No prompt-cache breakers" in console.export_text()


def test_read_requests_accepts_json_array_jsonl_and_wrappers() -> None:
    one = json.dumps(VOLATILE)
    assert read_requests(one) == [VOLATILE]
    assert read_requests(json.dumps([VOLATILE, VOLATILE])) == [VOLATILE, VOLATILE]
    jsonl = one + "\n\n" + json.dumps({"request": VOLATILE}) + "\n"
    assert read_requests(jsonl) == [VOLATILE, VOLATILE]
    with pytest.raises(LintInputError, match="line 1"):
        read_requests('{"model": "x"}\n{"model": "y"}\n')


def _write(tmp_path: Path, name: str, bodies: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(b) for b in bodies) + "\n", encoding="utf-8")
    return path


def test_lint_command_exit_status_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirty = _write(tmp_path, "dirty.jsonl", [VOLATILE])
    assert lint_command(dirty, json_output=True) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["findings"][0]["kind"] == "timestamp"
    clean = _write(tmp_path, "clean.jsonl", [_body()])
    assert lint_command(clean, json_output=True) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_lint_command_renders_and_reports_unreadable_files(tmp_path: Path) -> None:
    dirty = _write(tmp_path, "dirty.jsonl", [VOLATILE])
    console = _console(160)
    assert lint_command(dirty, json_output=False, console=console) == 1
    assert "timestamp" in console.export_text()
    assert lint_command(tmp_path / "missing.jsonl", json_output=False) == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n", encoding="utf-8")
    assert lint_command(broken, json_output=True) == 2
