"""CSV export never hands a spreadsheet a formula: text starting with = + - @ TAB or CR gets a
leading quote (OWASP CSV injection), while numbers, negative ones too, stay numbers."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from gateway.ledger import SpendRow, export_csv
from gateway.ledger.queries import TaskOutcomes

D = Decimal
HOSTILE = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(1)", "\tcmd", "\r=1"]


def _spend(group: str | None, cost: Decimal = D("0.5")) -> SpendRow:
    return SpendRow(group, 1, 10, 0, 0, 0, 5, 0, cost, D(0), D(0), D(0), D(0), cost)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_formula_in_a_text_cell_is_quoted(name: str) -> None:
    parsed = list(csv.DictReader(io.StringIO(export_csv([_spend(name)]), newline="")))
    assert parsed[0]["group"] == f"'{name}"
    assert parsed[0]["cost_total"] == "0.5"


def test_harmless_text_and_numbers_are_unchanged() -> None:
    rows = [_spend("team-a"), _spend("a=b"), _spend(None), _spend("x", D("-0.25"))]
    parsed = list(csv.DictReader(io.StringIO(export_csv(rows))))
    assert [row["group"] for row in parsed] == ["team-a", "a=b", "", "x"]
    assert parsed[3]["cost_total"] == "-0.25"  # a refund is a number, not a formula


def test_every_text_column_is_escaped_not_just_the_first() -> None:
    outcome = TaskOutcomes("@team", 1, D("-1"), 0, D(0), 0, D(0))
    line = export_csv([outcome]).splitlines()[1]
    assert line == "'@team,1,-1,0,0,0,0"


def test_line_breaks_stay_inside_their_cell() -> None:
    text = export_csv([_spend("a\rb"), _spend("c\nd")])
    assert text.endswith("\r\n")  # RFC 4180 rows
    parsed = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [row["group"] for row in parsed] == ["a\rb", "c\nd"]
