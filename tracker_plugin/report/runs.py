"""The summary of a many-run command (annotate, watch): one row per run and target.

Each row says what the job did to the run (its action: ``annotated``, ``unchanged``,
``failed`` ...) beside the numbers: a run left unchanged shows those of the annotation it
holds, read back from its stored report (:func:`held_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tracker_plugin.core.status import Status
from tracker_plugin.report.render import Wording, as_written, format_tokens
from tracker_plugin.report.tables import MISSING, interval, json_row, text_table
from tracker_plugin.report.timing import eta_text

__all__ = ["RunRow", "held_rows", "runs_json", "runs_table"]

_HEADER = ("run", "action", "target", "status", "tokens", "step", "interval", "note")


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
    would_write: dict[str, Any] | None = None  # a dry run's changes to the run: {key: {"old", "new"}}

    @property
    def shown_status(self) -> str:
        """The JSON's status: the target's status, else what happened to the run (as it was
        before the table had an action column; programs read it so)."""
        return str(self.status if self.status is not None else self.action)

    def json(self) -> dict[str, Any]:
        """The row as the summary's JSON shows it: every field, the status always filled."""
        return json_row(self) | {"status": self.shown_status}


def runs_json(rows: Sequence[RunRow]) -> list[dict[str, Any]]:
    """The summary as JSON: one object per row."""
    return [row.json() for row in rows]


def runs_table(rows: Sequence[RunRow], wording: Wording = as_written) -> str:
    """The summary as text: run, action, target, status, tokens, step, interval, note.

    ``wording`` rewords the notes for the reader (the command line names its flags).
    """
    if not any(row.hours_left is not None for row in rows):
        return "\n".join(text_table(_HEADER, [_cells(row, wording) for row in rows]))
    # Runs with a clock: hours left and the ETA before the note, so a watch shows them move.
    header = (*_HEADER[:-1], "hours left", "eta", _HEADER[-1])
    cells = [(*c[:-1], _hours(row.hours_left), eta_text(row.eta_unix), c[-1]) for row, c in ((r, _cells(r, wording)) for r in rows)]
    return "\n".join(text_table(header, cells))


def _hours(value: float | None) -> str:
    return MISSING if value is None or not math.isfinite(value) else f"{value:,.2f}"


def _cells(row: RunRow, wording: Wording) -> tuple[str, ...]:
    return (
        row.run,
        str(row.action),
        MISSING if row.target is None else f"{row.target:g}",
        MISSING if row.status is None else str(row.status),
        format_tokens(row.tokens),
        MISSING if row.step is None else f"{row.step:,.0f}",
        interval(row.tokens_interval, format_tokens),
        wording(row.note) if row.note else "",
    )


def held_rows(run: str, ref: str, action: str, report: Any) -> list[RunRow]:
    """The rows of the annotation a run holds, from its stored report (``loss_eta.json``, the
    ``analyze --json`` document): what a run left ``unchanged`` shows instead of blanks.

    The document comes from the tracker, so it is read for what it should hold and no
    more: a value of another kind is missing, and a report with no targets gives no rows.
    """
    targets = report.get("targets") if isinstance(report, dict) else None
    if not isinstance(targets, list):
        return []
    return [_held_row(run, ref, action, t) for t in targets if isinstance(t, dict) and _number(t.get("target")) is not None]


def _held_row(run: str, ref: str, action: str, target: dict[str, Any]) -> RunRow:
    pair = target.get("tokens_interval")
    seconds_left = _number(target.get("seconds_left"))
    note = target.get("note")
    return RunRow(
        run, ref, action,
        target=_number(target.get("target")),
        status=_status(target.get("status")),
        tokens=_number(target.get("tokens")),
        step=_number(target.get("step")),
        # A null end is an open one (the JSON has no infinity).
        tokens_interval=(_end(pair[0]), _end(pair[1])) if isinstance(pair, list) and len(pair) == 2 else None,
        note=note if isinstance(note, str) else None,
        hours_left=None if seconds_left is None else seconds_left / 3600.0,
        eta_unix=_unix(target.get("eta")),
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _end(value: Any) -> float:
    number = _number(value)
    return math.inf if number is None else number


def _status(word: Any) -> Status | None:
    try:
        return Status(word) if isinstance(word, str) else None
    except ValueError:  # a word this version does not know: shown as missing
        return None


def _unix(iso: Any) -> float | None:
    """``2026-12-02T14:20:00Z`` as Unix seconds (the report's ``eta``)."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
