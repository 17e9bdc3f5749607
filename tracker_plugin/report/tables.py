"""Tables: the one text layout every command's table uses, and the JSON form of a row.

A table's rows are frozen dataclasses (a comparison row, a run's summary row); the text
table shows them for people, :func:`json_row` gives the same row to programs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from enum import Enum
from typing import Any, Literal

__all__ = ["json_row", "json_value", "printable", "text_table"]


def printable(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes) written as escapes.

    A run name comes from whoever named the run; printed raw, a newline would break a
    table's rows and an escape sequence would recolour or rewrite the terminal.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)

Align = Literal["<", ">"]


def text_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, align: Sequence[Align] = ()) -> list[str]:
    """The lines of a table: each column as wide as its widest cell, two spaces apart.

    Cells are left-aligned unless ``align`` gives ``">"`` for their column; lines carry no
    trailing spaces, so a last column of notes may be as long as it needs.
    """
    lines = [tuple(header), *(tuple(map(printable, row)) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rest: list[Align] = ["<"] * (len(header) - len(align))
    sides = [*align, *rest]
    return ["  ".join(_pad(cell, width, side) for cell, width, side in zip(line, widths, sides)).rstrip() for line in lines]


def _pad(cell: str, width: int, side: Align) -> str:
    return cell.rjust(width) if side == ">" else cell.ljust(width)


def json_row(row: Any) -> dict[str, Any]:
    """A dataclass row as JSON values: its fields by name, see :func:`json_value`."""
    return {name: json_value(value) for name, value in asdict(row).items()}


def json_value(value: Any) -> Any:
    """An enum as its word, a tuple as a list, and an infinite number as null (JSON has none)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    return value
