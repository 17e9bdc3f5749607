"""A history's steps: rows of one step merged, what a restart re-logged replaced, the rest
sorted, and each step checked to be a whole number from 0 to 1e15.

A drop in the step is a restart when the rows after it log the loss again at steps the
log had already reached; the later rows win, and :func:`restart_notes` says which steps
each restart replaced, of which attempt.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError

if TYPE_CHECKING:
    pass

__all__ = ["RESTART_NOTE", "Restart", "restart_notes"]


_MAX_STEP = 1e15


def _resolve_steps(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str], int]:
    """Merge consecutive rows of one step, replace what a restart re-logged, sort the rest.

    Returns the rows in increasing step order, the notes saying what was done, and how
    many rows (after merging) were dropped: replaced by a restart or repeating a step out
    of order.
    """
    notes: list[str] = []
    step = cols["step"]
    if np.all(step[1:] > step[:-1]):
        return cols, notes, 0
    group = np.r_[0, np.cumsum(step[1:] != step[:-1])]
    if group[-1] + 1 < len(step):
        # A trainer may write a step's train and eval keys in separate rows: merge them.
        merged = pd.DataFrame(cols).groupby(group, sort=False).last()
        cols = {key: merged[key].to_numpy() for key in cols}
        cols["nan_loss"] = cols["nan_loss"].astype(bool)
        step = cols["step"]
    drops = np.flatnonzero(step[1:] < step[:-1]) + 1
    if not len(drops):
        return cols, notes, 0
    if len(drops) <= _MAX_RESTARTS:
        has_loss = ~np.isnan(cols["loss"]) | cols["nan_loss"]
        order, restarts = _restarted_order(step, drops, has_loss)
    else:  # shuffled or reversed: no restart can be told apart, only an order
        order, restarts = np.argsort(step, kind="stable"), []
    replaced = sum(r.rows for r in restarts)
    notes += restart_notes(restarts)
    # What is left out of order: sort it (stably, so a repeated step keeps its first row).
    order = order[np.argsort(step[order], kind="stable")]
    ordered = step[order]
    repeat = np.r_[False, ordered[1:] == ordered[:-1]]
    order = order[~repeat]
    if np.any(order[1:] < order[:-1]):
        how = "in descending order" if len(drops) == len(step) - 1 else f"out of order (the step goes back at {len(drops)} rows)"
        notes.append(f"sorted the rows by step: they were logged {how}")
    if repeat.any():
        notes.append(f"dropped {int(repeat.sum())} out-of-order rows that repeat an earlier step (kept its first row)")
    cols = {key: values[order] for key, values in cols.items()}
    return cols, notes, replaced + int(repeat.sum())


# More drops than this and the log is shuffled or reversed, not restarted.
_MAX_RESTARTS = 64


def _restarted_order(step: np.ndarray, drops: np.ndarray, has_loss: np.ndarray) -> tuple[np.ndarray, list[Restart]]:
    """Rows kept after each real restart (later rows win), in log order; and the restarts.

    A drop in the step is a restart when the rows after it log the loss again at steps the
    log had already reached: at least two of them, and at least half of those at steps seen
    before (the checkpoint's cadence). The later attempt replaces every row of the abandoned
    one from its restart step on, those past where it has logged so far too (a resumed run
    that has not caught up yet): the abandoned attempt's rows are no part of the run. One
    stray row going back (a step 0 near the end of a log), or rows going back that log no
    loss (an eval key's rows appended at the end), is no restart: it is sorted in place.
    """
    bounds = np.r_[0, drops, len(step)]
    line = np.arange(bounds[1])  # the rows of the main line, strictly increasing in step
    attempt = np.ones(len(step), np.int64)  # which attempt logged each row
    strays: list[np.ndarray] = []
    restarts: list[Restart] = []
    for start, end in zip(bounds[1:-1], bounds[2:]):
        segment = np.arange(start, end)
        top = step[line[-1]]
        overlap = segment[step[segment] <= top]
        logging = overlap[has_loss[overlap]]
        cut = int(np.searchsorted(step[line], step[start]))
        at = np.searchsorted(step[line], step[logging])
        repeats = int(np.count_nonzero((at < len(line)) & (step[line[np.minimum(at, len(line) - 1)]] == step[logging])))
        if len(logging) >= 2 and repeats >= max(1, len(logging) // 2):
            gone = line[cut:]
            attempt[segment] = attempt[line[-1]] + 1
            restarts.append(Restart(
                attempt=int(attempt[start]), step=float(step[start]), last=float(step[segment[-1]]),
                rows=len(gone), first_replaced=float(step[gone[0]]) if len(gone) else math.nan,
                last_replaced=float(step[gone[-1]]) if len(gone) else math.nan,
                of=tuple(sorted(set(attempt[gone].tolist()))),
            ))
            line = np.r_[line[:cut], segment]
        else:
            attempt[segment] = attempt[line[-1]]
            strays.append(overlap)
            line = np.r_[line, segment[step[segment] > top]]
    order = np.concatenate([line, *strays]) if strays else line
    return order.astype(np.intp), restarts


@dataclass(frozen=True)
class Restart:
    """One restart of a log: attempt ``attempt`` went back to ``step`` and logged up to
    ``last``, replacing ``rows`` rows of steps ``first_replaced``-``last_replaced`` that the
    attempts ``of`` had logged."""

    attempt: int
    step: float
    last: float
    rows: int
    first_replaced: float
    last_replaced: float
    of: tuple[int, ...]


# The restarts a note names one by one; more are counted.
_NAMED_RESTARTS = 3
RESTART_NOTE = "the log restarts at step"


def restart_notes(restarts: Sequence[Restart]) -> list[str]:
    """One line per restart: which steps the later attempt replaced, of which attempt."""
    notes = []
    for r in restarts[:_NAMED_RESTARTS]:
        if not r.rows:
            continue
        whose = " and ".join(map(str, r.of))
        whose = f"attempt {whose}'s" if len(r.of) == 1 else f"attempts {whose}'"
        steps = f"step {r.first_replaced:g}" if r.rows == 1 else f"steps {r.first_replaced:g}-{r.last_replaced:g}"
        text = f"{RESTART_NOTE} {r.step:g} (attempt {r.attempt}): it replaced {whose} {r.rows} rows of {steps}"
        if r.last < r.last_replaced:
            text += (f"; it has logged up to step {r.last:g} so far, and the abandoned rows past it are dropped "
                     "too (kept the later attempt)")
        notes.append(text)
    if len(restarts) > _NAMED_RESTARTS:
        rest = restarts[_NAMED_RESTARTS:]
        notes.append(f"and {len(rest)} more restarts replaced {sum(r.rows for r in rest)} rows (kept the later attempts)")
    return notes


def _valid_steps(step: np.ndarray) -> np.ndarray:
    """Which values are steps: whole numbers from 0 to 1e15 (NaN: none)."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(step) & (step >= 0) & (step == np.round(step)) & (step <= _MAX_STEP)


def _integer_steps(step: np.ndarray, column: str, run: str) -> np.ndarray:
    bad = ~_valid_steps(step)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"steps must be whole numbers from 0 to 1e15, found {float(step[i]):g} in row {i + 1}",
            run=run,
            column=column,
        )
    return step.astype(np.int64)
