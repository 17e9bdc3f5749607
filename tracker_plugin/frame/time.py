"""The run's clock in the common frame: seconds at each analysed row.

A source's time column may be Unix time (W&B ``_timestamp``, MLflow's point timestamps)
or seconds since the run's own start (``_runtime``, a trainer's ``train_time``), and
either may be in milliseconds (Unix time also in µs or ns). :func:`read_clock` settles
which, and checks that the clock only moves forward: a relative clock that falls back
towards zero is a restarted logger and is stitched onto the time before it; any other
fall is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracker_plugin.errors import DataError

__all__ = ["Clock", "read_clock"]

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


@dataclass(frozen=True, eq=False)
class Clock:
    """The clock at each analysed row, and how it was read."""

    seconds: np.ndarray | None
    absolute: bool = False
    source: str | None = None
    notes: tuple[str, ...] = ()
    start: float | None = None  # the first logged time, on any row (the run's start)


def read_clock(logged: np.ndarray | None, step: np.ndarray, keep: np.ndarray, column: str | None, run: str) -> Clock:
    """Seconds at each kept row from a numeric time column (NaN where not logged).

    Rows without a time take it interpolated on step between the rows that have one.
    """
    if logged is None or column is None:
        return Clock(None)
    known = np.isfinite(logged)
    if not known.any():
        return Clock(None)
    if known.sum() < 2:  # one time (a trainer's end-of-run runtime) is no rate
        return Clock(None, notes=(f"'{column}' is logged on one row only: no clock read from it",))
    values, absolute, notes = _in_seconds(logged[known], column)
    if values is None:
        return Clock(None, notes=tuple(notes))
    values, stitched = _forward(values, step[known], absolute, column, run)
    notes += stitched
    if known.sum() < len(logged):
        values = np.interp(step, step[known], values)
    else:
        values = values.copy()
    kind = "Unix time" if absolute else "seconds since the run's start"
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
                "(fix the log or name another column with columns.time)",
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


def _typical_seconds_per_step(values: np.ndarray, step: np.ndarray) -> float:
    dt, ds = np.diff(values), np.diff(step)
    rate = dt[ds > 0] / ds[ds > 0]
    rate = rate[rate >= 0]
    return float(np.median(rate)) if len(rate) else 0.0

