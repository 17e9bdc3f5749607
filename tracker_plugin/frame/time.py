"""The run's clock in the common frame: seconds at each analysed row.

A source's time column may be Unix time (W&B ``_timestamp``, MLflow's point timestamps)
or seconds since the run's own start (``_runtime``, a trainer's ``train_time``), and
either may be in milliseconds. :func:`read_clock` settles which, and checks that the clock
only moves forward: a relative clock that falls back towards zero is a restarted logger
and is stitched onto the time before it; any other fall is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tracker_plugin.errors import DataError

__all__ = ["Clock", "read_clock"]

# Unix seconds from 2001 to 5138; the same in milliseconds from 2001 on.
_UNIX_SECONDS = (1e9, 1e11)
_UNIX_MILLIS = 1e12
# A column named like ``train_time_ms`` or ``time (ms)`` holds milliseconds.
_MS_NAME = re.compile(r"(^|[^a-z])ms([^a-z]|$)", re.IGNORECASE)
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
    values, stitched = _forward(values, step[known], absolute, column, run)
    notes += stitched
    if known.sum() < len(logged):
        values = np.interp(step, step[known], values)
    else:
        values = values.copy()
    kind = "Unix time" if absolute else "seconds since the run's start"
    return Clock(values[keep], absolute, f"column '{column}' ({kind})", tuple(notes), float(values[0]))


def _in_seconds(values: np.ndarray, column: str) -> tuple[np.ndarray, bool, list[str]]:
    """The values in seconds, whether they are Unix time, and a note when they were not seconds."""
    biggest = float(np.max(np.abs(values)))
    if biggest >= _UNIX_MILLIS:
        return values / 1000.0, True, [f"time column '{column}' read as Unix milliseconds"]
    if _UNIX_SECONDS[0] <= float(np.min(values)) and biggest < _UNIX_SECONDS[1]:
        return values, True, []
    if _MS_NAME.search(column):
        return values / 1000.0, False, [f"time column '{column}' read as milliseconds (its name says ms)"]
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

