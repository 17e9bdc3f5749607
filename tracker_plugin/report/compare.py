"""A comparison's rows as text, Markdown, CSV or JSON."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import asdict, fields
from enum import Enum
from typing import Any

from tracker_plugin.core.compare import ComparisonRow
from tracker_plugin.report.render import Wording, as_written, format_tokens
from tracker_plugin.report.tables import MISSING, interval, json_row, printable, text_table
from tracker_plugin.report.timing import eta_text

__all__ = ["batch_label", "render_csv", "render_json", "render_markdown", "render_text", "spreadsheet_safe"]


def batch_label(row: ComparisonRow) -> str:
    """``786,432`` for a fixed batch; ``dynamic 262,144->1,048,576`` for stages."""
    if row.batch_last is None:
        return MISSING
    if not row.dynamic:
        return f"{row.batch_last:,.0f}"
    return f"dynamic {row.batch_first:,.0f}->{row.batch_last:,.0f}"


_HEADER = ("target", "run", "batch", "status", "tokens", "step", "interval", "vs best")


def _cells(row: ComparisonRow) -> tuple[str, ...]:
    pair = None if row.tokens_low is None else (row.tokens_low, row.tokens_high)
    return (
        f"{row.target:g}",
        row.run,
        batch_label(row),
        str(row.status),
        format_tokens(row.tokens),
        MISSING if row.step is None else f"{row.step:,.0f}",
        interval(pair, format_tokens),
        _relative(row.vs_best),
    )


def _relative(ratio: float | None) -> str:
    if ratio is None or not math.isfinite(ratio):
        return MISSING
    return "best" if ratio == 1.0 else f"+{(ratio - 1) * 100:.1f}%"


_TIME_HEADER = ("hours left", "eta")


def _timed(rows: Sequence[ComparisonRow]) -> bool:
    """Whether the hours columns are shown: when some run has hours."""
    return any(r.hours_left is not None for r in rows)


def _time_cells(row: ComparisonRow) -> tuple[str, ...]:
    hours = MISSING if row.hours_left is None or not math.isfinite(row.hours_left) else f"{row.hours_left:,.2f}"
    return (hours, eta_text(row.eta_unix))


def render_text(rows: Sequence[ComparisonRow]) -> str:
    """One aligned table per target; hours left and ETA columns when some run has a clock.

    Only the tables, so that a program can read them: why a run failed is for stderr (see
    :func:`~tracker_plugin.report.tables.failure_lines`).
    """
    blocks = []
    timed = _timed(rows)
    header = _HEADER[1:] + (_TIME_HEADER if timed else ())
    for target in dict.fromkeys(r.target for r in rows):
        group = [r for r in rows if r.target == target]
        cells = [_cells(r)[1:] + (_time_cells(r) if timed else ()) for r in group]
        blocks.append("\n".join([f"target {target:g}", *text_table(header, cells)]))
    return "\n\n".join(blocks)


def _failures(group: Sequence[ComparisonRow], indent: str, wording: Wording) -> list[str]:
    """Why each failed row failed, one line per run: the table's status alone says nothing."""
    return [
        f"{indent}{printable(r.run)} failed: {printable(wording(r.note or 'no reason given'))}"
        for r in group if r.status == "failed"
    ]


def render_markdown(rows: Sequence[ComparisonRow], wording: Wording = as_written) -> str:
    """A GitHub-flavoured Markdown table per target; pipes and newlines in names escaped."""
    blocks = []
    for target in dict.fromkeys(r.target for r in rows):
        header = _HEADER[1:]
        lines = [f"### target {target:g}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        group = [r for r in rows if r.target == target]
        for row in group:
            lines.append("| " + " | ".join(_markdown_cell(c) for c in _cells(row)[1:]) + " |")
        failures = [_markdown_cell(line) for line in _failures(group, "- ", wording)]
        blocks.append("\n".join(lines + ([""] + failures if failures else [])))
    return "\n\n".join(blocks)


def _markdown_cell(text: str) -> str:
    return printable(text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " "))


# A cell starting with one of these is a formula to a spreadsheet (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def spreadsheet_safe(value: Any) -> Any:
    """Text a spreadsheet will show as text: formula-like strings get a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def render_csv(rows: Sequence[ComparisonRow]) -> str:
    """Machine-readable rows with raw numbers, safe to open in a spreadsheet."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[f.name for f in fields(ComparisonRow)], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: spreadsheet_safe("" if v is None else v) for k, v in _csv_values(row).items()})
    return buffer.getvalue()


def _csv_values(row: ComparisonRow) -> dict[str, Any]:
    """The row's fields as a spreadsheet reads them: enums as their words, numbers raw."""
    return {name: value.value if isinstance(value, Enum) else value for name, value in asdict(row).items()}


def render_json(rows: Sequence[ComparisonRow]) -> list[dict[str, Any]]:
    """Rows as plain dicts, grouped by target."""
    return [
        {"target": target, "rows": [json_row(r) for r in rows if r.target == target]}
        for target in dict.fromkeys(r.target for r in rows)
    ]
