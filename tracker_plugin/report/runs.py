"""The summary of a many-run command (annotate, watch): one row per run and target."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracker_plugin.core.status import Status
from tracker_plugin.report.render import Wording, as_written, format_tokens, upper_tokens
from tracker_plugin.report.tables import json_row, text_table
from tracker_plugin.report.timing import eta_text

__all__ = ["RunRow", "runs_json", "runs_table"]

_HEADER = ("run", "target", "status", "tokens", "step", "interval", "note")


@dataclass(frozen=True)
class RunRow:
    """One target of one run; a run that has no analysis has one row, without a target."""

    run: str
    ref: str
    action: str  # what the job did to the run: a :class:`tracker_plugin.jobs.runner.Action`
    target: float | None = None
    status: Status | None = None  # None: no analysis, and the action says why
    tokens: float | None = None
    step: float | None = None
    tokens_interval: tuple[float, float] | None = None
    note: str | None = None
    hours_left: float | None = None  # wall-clock hours from the run's last row
    eta_unix: float | None = None

    @property
    def shown_status(self) -> str:
        """The status column: the target's status, else what happened to the run."""
        return str(self.status if self.status is not None else self.action)

    def json(self) -> dict[str, Any]:
        """The row as the summary's JSON shows it: the status column filled as in the table."""
        return json_row(self) | {"status": self.shown_status}


def runs_json(rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    """The summary as JSON: one object per row."""
    return [row.json() for row in rows]


def runs_table(rows: Sequence[RunRow], wording: Wording = as_written) -> str:
    """The summary as text: run, target, status, tokens, step, interval, note.

    ``wording`` rewords the notes for the reader (the command line names its flags).
    """
    if not any(row.hours_left is not None for row in rows):
        return "\n".join(text_table(_HEADER, [_cells(row, wording) for row in rows]))
    # Runs with a clock: hours left and the ETA before the note, so a watch shows them move.
    header = (*_HEADER[:-1], "hours left", "eta", _HEADER[-1])
    cells = [(*c[:-1], _hours(row.hours_left), eta_text(row.eta_unix), c[-1]) for row, c in ((r, _cells(r, wording)) for r in rows)]
    return "\n".join(text_table(header, cells))


def _hours(value: float | None) -> str:
    return "-" if value is None or value != value or value == float("inf") else f"{value:,.2f}"


def _cells(row: RunRow, wording: Wording) -> tuple[str, ...]:
    interval = row.tokens_interval
    return (
        row.run,
        "-" if row.target is None else f"{row.target:g}",
        row.shown_status,
        format_tokens(row.tokens),
        "-" if row.step is None else f"{row.step:,.0f}",
        "-" if not interval else f"{format_tokens(interval[0])}-{upper_tokens(interval[1])}",
        wording(row.note) if row.note else "",
    )
