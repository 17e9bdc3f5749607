"""The run's clock in the common frame: seconds at each analysed row.

A source's time column may be Unix time (W&B ``_timestamp``, MLflow's point timestamps)
or seconds since the run's own start (``_runtime``, a trainer's ``train_time``), and
either may be in milliseconds (Unix time also in µs or ns). :func:`read_clock` settles
which, and checks that the clock only moves forward: a relative clock that falls back
towards zero is a restarted logger and is stitched onto the time before it; any other
fall is an error.

A clock must also be the training's. A log written after the fact (a backfill, an import
from a CSV, ``mlflow.log_metrics`` in one burst) carries the times it was written at, not
the times the steps ran at: many steps share one timestamp, or the steps go faster than
any training does. Such a clock gives no hours, and a note says why.

A CSV's clock may also be dates as text (ISO 8601 / RFC 3339, ``2024-05-01T12:00:03Z``):
:func:`logged_times` reads them as Unix seconds (a date naming no zone is UTC, and a note
says so). A time column that is neither numbers nor dates is no clock, with a note: the
hours are the only thing it feeds, and ``step_time`` or ``throughput`` can still give them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError

__all__ = ["Clock", "LoggedTimes", "logged_times", "read_clock"]

# Unix time from 2001 to 5138 in seconds; the same span in ms, µs or ns is 1e3, 1e6 or 1e9
# times larger, and the spans do not overlap: the magnitude alone says the unit.
_UNIX_SECONDS = (1e9, 1e11)
_UNITS = {"seconds": 1.0, "milliseconds": 1e3, "microseconds": 1e6, "nanoseconds": 1e9}
# A column named like ``train_time_ms``, ``time (us)`` or ``elapsed_ns`` holds that unit.
_UNIT_NAME = re.compile(r"(?:^|[^a-z])(ms|us|µs|ns)(?:[^a-z]|$)", re.IGNORECASE)
_NAMED = {"ms": "milliseconds", "us": "microseconds", "µs": "microseconds", "ns": "nanoseconds"}
# Seconds since a run's start beyond this (about 31 years) are no run's clock.
_LONGEST_RUN = 1e9
# A relative clock that falls below this share of its previous value restarted.
_RESTART_SHARE = 0.5
# A bulk log, not a training clock: at least this share of the logged steps share the
# timestamp of the step before, or the steps go faster than any training does. The
# largest public runs take about 3e6 tokens/s and 50+ ms per step; tiny models on one
# device take a few ms per step. The ceilings leave 1-2 orders of magnitude of room.
_SHARED_STAMPS = 0.5
COARSE_TICK = 0.5  # seconds: a clock whose smallest tick is this long or more is coarse
_FASTEST_STEP_SECONDS = 1e-3
_MOST_TOKENS_PER_SECOND = 2e8
# A text time column is read (as numbers or as dates) when more than this share of its
# cells read one way; the rest count as not logged, and a note counts them.
_READABLE_SHARE = 0.5
# An ISO 8601 time of day (also the basic ``T120003``) that names its zone (``Z``,
# ``+02:00``, ``-0500``, ``+02``) at the end: after the time, so that a date's own ``-01``
# is no zone. Matched on upper-cased text (RFC 3339 allows ``t`` and ``z``).
_ZONE = r"[T ]\d{2}:?\d{2}(?::?\d{2}(?:[.,]\d+)?)?\s*(?:Z|[+-]\d{2}(?::?\d{2})?)$"
_NAN_SPELLINGS = ("nan", "+nan", "-nan")
_UNIX_EPOCH = pd.Timestamp(0, tz="UTC")


@dataclass(frozen=True, eq=False)
class Clock:
    """The clock at each analysed row, and how it was read."""

    seconds: np.ndarray | None
    absolute: bool = False
    source: str | None = None
    notes: tuple[str, ...] = ()
    start: float | None = None  # the first logged time, on any row (the run's start)


@dataclass(frozen=True, eq=False)
class LoggedTimes:
    """A time column's cells as numbers, and how they were read."""

    values: np.ndarray | None  # NaN where not logged or not read; None: the column is no clock
    dates: bool = False  # read from dates: Unix seconds
    notes: tuple[str, ...] = ()
    naive: bool = False  # dates naming no zone (a local clock, read as UTC)


def logged_times(cells: pd.Series, column: str) -> LoggedTimes:
    """A time column's cells as numbers: numbers as they are, ISO 8601 dates as Unix seconds.

    Text cells are read the way most of them read (numbers, else dates); cells that read
    neither way count as not logged, as a blank cell does, and a note counts them. A column
    where most cells read neither way is no clock, with a note naming it and the way out:
    a clock feeds only the hours, so it never stops the analysis.
    """
    if pd.api.types.is_bool_dtype(cells.dtype):
        return LoggedTimes(None, notes=(_no_clock(column, "holds true/false values"),))
    if pd.api.types.is_numeric_dtype(cells.dtype):
        return LoggedTimes(cells.to_numpy(dtype=float, na_value=np.nan))
    text = cells.where(cells.isna(), cells.astype(str).str.strip())
    logged = (text.notna() & (text != "") & ~text.str.lower().isin(_NAN_SPELLINGS)).to_numpy(bool)
    numbers = _as_numbers(text)
    if (~np.isnan(numbers) | ~logged).all():  # numbers, some spelled as text: the usual case
        return LoggedTimes(numbers)
    text = text.str.upper()  # RFC 3339's ``t`` and ``z``, which pandas reads only as ``T`` and ``Z``
    dates = _as_unix_seconds(text)
    use_dates = int(np.count_nonzero(~np.isnan(dates) & logged)) > int(np.count_nonzero(~np.isnan(numbers) & logged))
    values = np.where(logged, dates if use_dates else numbers, np.nan)
    unread = logged & np.isnan(values)
    if np.count_nonzero(~unread & logged) <= _READABLE_SHARE * np.count_nonzero(logged):
        why = f"holds text that is neither numbers nor ISO 8601 dates ({_first(cells, unread)})"
        return LoggedTimes(None, notes=(_no_clock(column, why),))
    notes = []
    if unread.any():
        notes.append(
            f"{np.count_nonzero(unread):,} of {np.count_nonzero(logged):,} times in '{column}' are neither numbers "
            f"nor ISO 8601 dates (the first {_first(cells, unread)}): read as not logged"
        )
    naive = use_dates and bool(_naive(text, ~np.isnan(values)).any())
    if use_dates:
        notes += _naive_note(text, ~np.isnan(values), column)
    return LoggedTimes(values, use_dates, tuple(notes), naive)


def _as_numbers(text: pd.Series) -> np.ndarray:
    try:
        return pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    except OverflowError:  # an integer past 1e308: no time, like any cell that is no number
        return np.array([_float_or_nan(cell) for cell in text])


def _float_or_nan(cell: object) -> float:
    try:
        return float(str(cell))
    except ValueError:
        return np.nan


def _as_unix_seconds(text: pd.Series) -> np.ndarray:
    """ISO 8601 / RFC 3339 dates as Unix seconds (NaN where a cell is no such date); a date
    naming no zone is taken as UTC, as the trackers' own clocks are."""
    parsed = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
    return (parsed - _UNIX_EPOCH).dt.total_seconds().to_numpy(dtype=float, na_value=np.nan)


def _naive(text: pd.Series, dates: np.ndarray) -> np.ndarray:
    return dates & ~text.str.contains(_ZONE, regex=True, na=False).to_numpy(bool)


def _naive_note(text: pd.Series, dates: np.ndarray, column: str) -> list[str]:
    naive = _naive(text, dates)
    if not naive.any():
        return []
    which = "the" if naive.sum() == dates.sum() else f"{int(naive.sum()):,} of the {int(dates.sum()):,}"
    return [f"{which} dates in '{column}' name no time zone: read as UTC"]


def _first(cells: pd.Series, where: np.ndarray) -> str:
    row = int(np.flatnonzero(where)[0])
    return f"{str(cells.iloc[row])[:40]!r} in row {row + 1}"


def _no_clock(column: str, why: str) -> str:
    return (
        f"time column '{column}' {why}: no clock read from it (name the clock column with columns.time, or "
        "columns.time none to read no clock; for hours give step_time (seconds per step) or throughput)"
    )


def read_clock(
    logged: np.ndarray | None,
    step: np.ndarray,
    keep: np.ndarray,
    column: str | None,
    run: str,
    tokens: np.ndarray | None = None,
    *,
    dates: bool = False,
    naive: bool = False,
) -> Clock:
    """Seconds at each kept row from a time column read as numbers (NaN where not logged);
    ``dates``: they are Unix seconds read from dates (:func:`logged_times`); ``naive``:
    dates naming no zone, a local clock, which a daylight-saving change sets back an hour.

    Rows without a time take it interpolated on step between the rows that have one. A
    column that holds a bulk log's times (see the module's docstring) is no clock.
    """
    if logged is None or column is None:
        return Clock(None)
    known = np.isfinite(logged)
    if not known.any():
        return Clock(None)
    if known.sum() < 2:  # one time (a trainer's end-of-run runtime) is no rate
        return Clock(None, notes=(f"'{column}' is logged on one row only: no clock read from it",))
    # Dates are Unix seconds whatever their year: no unit is guessed from their size.
    values, absolute, notes = (logged[known], True, []) if dates else _in_seconds(logged[known], column)
    if values is None:
        return Clock(None, notes=tuple(notes))
    if naive:
        values, fallen = _daylight_saving(values, step[known], column)
        notes += fallen
    values, stitched = _forward(values, step[known], absolute, column, run)
    notes += stitched
    bulk = _bulk_log(values, step[known], None if tokens is None else tokens[known], column)
    if bulk:
        return Clock(None, notes=(bulk,))
    if known.sum() < len(logged):
        values = np.interp(step, step[known], values)
    else:
        values = values.copy()
    kind = "ISO 8601 dates, Unix time" if dates else "Unix time" if absolute else "seconds since the run's start"
    return Clock(values[keep], absolute, f"column '{column}' ({kind})", tuple(notes), float(values[0]))


def _in_seconds(values: np.ndarray, column: str) -> tuple[np.ndarray | None, bool, list[str]]:
    """The values in seconds (None: they are no clock), whether they are Unix time, and a
    note when they were not seconds."""
    low, high = float(np.min(values)), float(np.max(np.abs(values)))
    for unit, scale in _UNITS.items():
        if _UNIX_SECONDS[0] * scale <= low and high < _UNIX_SECONDS[1] * scale:
            return values / scale, True, [] if scale == 1 else [f"time column '{column}' read as Unix {unit}"]
    named = _UNIT_NAME.search(column)
    unit = _NAMED[named.group(1).lower()] if named else "seconds"
    if high / _UNITS[unit] > _LONGEST_RUN:
        # No date in any unit, and longer than any run: any reading of it would be a guess.
        return None, False, [
            f"time column '{column}' holds values up to {high:.4g}, no Unix time (from 2001) in seconds, ms, "
            "µs or ns, nor seconds since the run's start: no clock read from it (name the clock column with "
            "columns.time)"
        ]
    if named:
        return values / _UNITS[unit], False, [f"time column '{column}' read as {unit} (its name says {named.group(1)})"]
    return values, False, []


# A local clock set back by a daylight-saving change falls by this much (and a step's time).
_HOUR = 3600.0
_FALL_SLACK = 600.0


def _daylight_saving(values: np.ndarray, step: np.ndarray, column: str) -> tuple[np.ndarray, list[str]]:
    """A naive local clock with each fall-back (the clock set back up to an hour, once in
    a few months) undone: the times from there on read an hour later, and a note says where."""
    back = np.flatnonzero(np.diff(values) < 0)
    fallen = [i for i in back if values[i] - values[i + 1] <= _HOUR + _FALL_SLACK and values[i + 1] + _HOUR >= values[i]]
    if not fallen or len(fallen) != len(back):
        return values, []  # other falls too: no daylight-saving change explains them
    values = values.astype(float).copy()
    for i in fallen:
        values[i + 1:] += _HOUR
    where = ", ".join(f"{int(step[i + 1]):,}" for i in fallen)
    return values, [f"the dates in '{column}' name no time zone and fall back about an hour at step {where} "
                    "(a daylight-saving change of a local clock): read an hour later from there"]


def _forward(
    values: np.ndarray, step: np.ndarray, absolute: bool, column: str, run: str
) -> tuple[np.ndarray, list[str]]:
    """The clock with logger restarts stitched; an error where it otherwise goes back."""
    back = np.flatnonzero(np.diff(values) < 0)
    if not len(back):
        return values, []
    values = values.astype(float).copy()
    restarts = []
    for i in back:
        before, after = values[i], values[i + 1]
        if absolute or after > _RESTART_SHARE * before:
            raise DataError(
                f"the clock goes backwards from {before:g} s at step {int(step[i])} to {after:g} s at step "
                f"{int(step[i + 1])}; a restarted logger's clock is stitched only when it starts again near 0 "
                "(fix the log, name another column with columns.time, or give columns.time none)",
                run=run,
                column=column,
            )
        # The restarted logger counts from about 0 again: carry on from the time before,
        # plus one typical step for the gap the restart left.
        steps = max(int(step[i + 1] - step[i]), 1)
        typical = _typical_seconds_per_step(values[: i + 1], step[: i + 1])
        values[i + 1 :] += before - after + typical * steps
        restarts.append(int(step[i + 1]))
    where = ", ".join(f"{s:,}" for s in restarts)
    return values, [f"the clock in '{column}' restarted at step {where} (a logger restart): stitched on"]


def _bulk_log(seconds: np.ndarray, step: np.ndarray, tokens: np.ndarray | None, column: str) -> str | None:
    """Why the times in ``column`` are a bulk log's rather than the training's, or None."""
    moved = np.diff(step) > 0
    pairs = int(moved.sum())
    if pairs < 2:
        return None
    why = ""
    gaps = np.diff(seconds)[moved]
    shared = int(np.count_nonzero(gaps <= 0))
    span, steps = float(seconds[-1] - seconds[0]), float(step[-1] - step[0])
    # Whole-second stamps on sub-second steps share stamps by their resolution alone:
    # only a clock that can tell milliseconds apart is judged by its shared stamps.
    fine = not (gaps > 0).any() or float(gaps[gaps > 0].min()) < COARSE_TICK
    if fine and shared >= _SHARED_STAMPS * pairs:
        why = f"{shared:,} of {pairs + 1:,} logged steps share the timestamp of the step before"
    elif span < _FASTEST_STEP_SECONDS * steps:
        why = f"{steps:,.0f} steps in {span:.3g} s ({1e3 * span / steps:.2g} ms per step)"
    elif tokens is not None and np.isfinite(tokens[[0, -1]]).all():
        rate = float(tokens[-1] - tokens[0]) / span if span > 0 else np.inf
        if rate > _MOST_TOKENS_PER_SECOND:
            why = f"{tokens[-1] - tokens[0]:,.0f} tokens in {span:.3g} s ({rate:.2g} tokens per second)"
    if not why:
        return None
    return (
        f"'{column}' holds the times the log was written, not the training's ({why}: a bulk log, "
        "such as a backfill or an import): no hours (give step_time (seconds per step) or throughput)"
    )


def _typical_seconds_per_step(values: np.ndarray, step: np.ndarray) -> float:
    dt, ds = np.diff(values), np.diff(step)
    rate = dt[ds > 0] / ds[ds > 0]
    rate = rate[rate >= 0]
    return float(np.median(rate)) if len(rate) else 0.0

