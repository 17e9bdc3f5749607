"""Tables: the one text layout every command's table uses, the one way a cell shows an
interval or a missing value, and the JSON form of a row.

A table's rows are frozen dataclasses (a comparison row, a run's summary row); the text
table shows them for people, :func:`json_row` gives the same row to programs.

Cells, the same in every table and report:

- a missing value is :data:`MISSING` (``-``);
- an interval is ``low–high`` (``4.92B–6.10B``), an end with no bound is ``∞``
  (``99.19B–∞``); where the output cannot encode those (a latin-1 or cp1252 terminal)
  they are ``-`` and ``inf`` (``99.19B-inf``): see :func:`glyphs`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Literal

__all__ = [
    "ASCII",
    "MISSING",
    "UNICODE",
    "Glyphs",
    "display_width",
    "failure_lines",
    "glyphs",
    "glyphs_for",
    "interval",
    "json_row",
    "json_value",
    "printable",
    "terminal_text",
    "text_table",
    "using_glyphs",
]

# A value a row has none of: the same one character in every table and report.
MISSING = "-"


@dataclass(frozen=True)
class Glyphs:
    """How an interval is drawn: what stands between its ends, and an end with no bound."""

    to: str
    infinity: str


UNICODE = Glyphs(to="\u2013", infinity="\u221e")  # 99.19B–∞
ASCII = Glyphs(to="-", infinity="inf")  # 99.19B-inf

# Tables are drawn for stdout: unless a caller chooses (:func:`using_glyphs`), the glyphs
# are the ones stdout's encoding can write, looked up when a table is drawn.
_GLYPHS: ContextVar[Glyphs | None] = ContextVar("tracker_plugin_glyphs", default=None)


def glyphs() -> Glyphs:
    """The glyphs tables are drawn with now: the chosen ones, else those stdout can write."""
    return _GLYPHS.get() or glyphs_for(getattr(sys.stdout, "encoding", None))


def glyphs_for(encoding: str | None) -> Glyphs:
    """Unicode where ``encoding`` can write it (UTF-8, or a stream with none: text in
    memory), ASCII where it cannot: a latin-1 or cp1252 terminal would fail on ``∞``."""
    if not encoding:
        return UNICODE
    try:
        (UNICODE.to + UNICODE.infinity).encode(encoding)
    except (UnicodeError, LookupError):
        return ASCII
    return UNICODE


@contextmanager
def using_glyphs(chosen: Glyphs) -> Iterator[Glyphs]:
    """Draw the tables made inside the block with ``chosen``."""
    token = _GLYPHS.set(chosen)
    try:
        yield chosen
    finally:
        _GLYPHS.reset(token)


def interval(pair: tuple[float | None, float | None] | None, number: Callable[[float], str]) -> str:
    """``low–high`` with each end written by ``number``; an end that is None or infinite
    has no bound (``∞``, as the JSON's null end means), no interval at all is :data:`MISSING`."""
    if pair is None or (pair[0] is None and pair[1] is None):
        return MISSING
    shown = glyphs()

    def end(value: float | None) -> str:
        return shown.infinity if value is None or not math.isfinite(value) else number(value)

    return f"{end(pair[0])}{shown.to}{end(pair[1])}"


# Joins emoji into one picture (a scientist: woman + ZWJ + microscope); not a control.
_JOINER = "\u200d"


def printable(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes) written as escapes.

    A run name comes from whoever named the run; printed raw, a newline would break a
    table's rows and an escape sequence would recolour or rewrite the terminal.
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c == _JOINER else c.encode("unicode_escape").decode("ascii") for c in text
    )


def terminal_text(text: str) -> str:
    """:func:`printable`, and what stdout cannot write escaped too: printed, it would stop
    the command (a CJK run name on a latin-1 terminal); escaped, a table still lines up.
    For text bound for a terminal only (a plot's title keeps its characters)."""
    text = printable(text)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    if _writable(text, encoding):
        return text
    return "".join(c if _writable(c, encoding) else c.encode("unicode_escape").decode("ascii") for c in text)


def _writable(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeError, LookupError):
        return False
    return True


def display_width(text: str) -> int:
    """The columns ``text`` takes on a terminal: two for a CJK character or an emoji, none
    for a combining accent; ``len`` where a character has no width (a control)."""
    # Imported when a table is drawn, not when the command line loads: --help stays fast.
    from wcwidth import wcswidth

    width = int(wcswidth(text))
    return len(text) if width < 0 else width


Align = Literal["<", ">"]


def text_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, align: Sequence[Align] = ()) -> list[str]:
    """The lines of a table: each column as wide as its widest cell on the screen, two
    spaces apart.

    Cells are left-aligned unless ``align`` gives ``">"`` for their column; lines carry no
    trailing spaces, so a last column of notes may be as long as it needs. Widths are
    counted in terminal columns, so names in CJK or with emoji keep the columns straight.
    """
    lines = [tuple(header), *(tuple(map(terminal_text, row)) for row in rows)]
    widths = [max(display_width(line[i]) for line in lines) for i in range(len(header))]
    rest: list[Align] = ["<"] * (len(header) - len(align))
    sides = [*align, *rest]
    return ["  ".join(_pad(cell, width, side) for cell, width, side in zip(line, widths, sides)).rstrip() for line in lines]


def _pad(cell: str, width: int, side: Align) -> str:
    fill = " " * (width - display_width(cell))
    return fill + cell if side == ">" else cell + fill


def failure_lines(failures: Sequence[tuple[str, str, str]], total: int) -> list[str]:
    """What failed, for stderr: a count, then one line per run (name, run string, reason);
    one line, ``error: RUN: REASON``, when the one run of a command failed.

    ``failures`` are (name, ref, reason); a reason is kept to its line, whatever it holds.
    """
    if not failures:
        return []
    if total == 1 and len(failures) == 1:  # the one run asked for: one line, as any command's error
        _, ref, reason = failures[0]
        return [f"error: {terminal_text(ref)}: {terminal_text(reason)}"]
    lines = [f"{len(failures)} of {total} runs failed:"]
    for name, ref, reason in failures:
        where = terminal_text(name) if name == ref else f"{terminal_text(name)} ({terminal_text(ref)})"
        lines.append(f"  {where}: {terminal_text(reason)}")
    return lines


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
