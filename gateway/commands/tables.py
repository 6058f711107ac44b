"""Terminal tables that fit the terminal: money is never cut to `0.0000…`.

Each column has a priority. When the table is wider than the console, the least important
columns are left out (the caption names them); when even the essential ones do not fit,
each row is printed as its own list of `column  value` lines. Cells are never ellipsized.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from rich.console import Console
from rich.table import Table

CENT = Decimal("0.01")
_SIGNIFICANT = 4
_BORDER = 3  # a cell's two padding spaces and its border line
_LABEL_LIMIT = 16  # a longer group name folds onto the next line instead of widening


@dataclass(frozen=True, slots=True)
class Column:
    """A column's header, its importance (0: always shown) and alignment."""

    header: str
    priority: int = 0
    label: bool = False


def money(value: Decimal) -> str:
    """USD for a person: cents from a dollar up, four significant digits below, never `1E-7`."""
    if not value:
        return "0"
    if abs(value) >= 1:
        return f"{value.quantize(CENT, rounding=ROUND_HALF_EVEN):,}"
    digits = _SIGNIFICANT - value.adjusted() - 1  # adjusted(): the exponent of the first digit
    rounded = value.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_EVEN)
    return format(rounded.normalize(), "f")


def percent(share: Decimal) -> str:
    """A share (0.385) as a person reads it: `38.5%`."""
    return f"{share * 100:.1f}%"


def _width(column: Column, cells: Sequence[str]) -> int:
    widest = max((len(cell) for cell in cells), default=0)
    if column.label:  # folds: its header words and a part of each name suffice
        longest_word = max((len(word) for word in column.header.split()), default=0)
        return max(longest_word, min(widest, _LABEL_LIMIT)) + _BORDER
    # A number column never wraps, and neither does its header.
    return max(len(column.header), widest) + _BORDER


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Return the indices of the columns to show within `width`, least important dropped."""
    shown = list(range(len(columns)))
    widths = [_width(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
    while 1 + sum(widths[i] for i in shown) > width:
        optional = [i for i in shown if columns[i].priority > 0]
        if not optional:
            break
        shown.remove(max(optional, key=lambda i: (columns[i].priority, i)))
    return shown


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    note: str = "",
) -> None:
    """Print `rows` under `columns` so that every cell shows in full at the console's width."""
    shown = fit(columns, rows, console.width)
    widths = [_width(columns[i], [row[i] for row in rows]) for i in shown]
    if 1 + sum(widths) > console.width:
        _print_rows(console, title, columns, rows, note)
        return
    table = Table(title=title)
    for i, width in zip(shown, widths, strict=True):
        column = columns[i]
        table.add_column(
            column.header,
            justify="left" if column.label else "right",
            overflow="fold",
            no_wrap=not column.label,
            min_width=width - _BORDER,  # rich wraps the header words instead of the cells
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    hidden = [columns[i].header for i in range(len(columns)) if i not in shown]
    if hidden:
        note = f"{note}; " if note else ""
        note += f"not shown at this width: {', '.join(hidden)} (see --json)"
    table.caption = note or None
    console.print(table)


def _print_rows(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    note: str,
) -> None:
    """Too narrow for a table: one block of `column  value` lines per row."""
    console.print(title, style="bold", overflow="fold")
    if note:
        console.print(note, style="dim", overflow="fold")
    for row in rows:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(overflow="fold")
        grid.add_column(justify="right", no_wrap=True)
        for column, cell in zip(columns, row, strict=True):
            grid.add_row(column.header, cell)
        console.print(grid)
        console.print()
