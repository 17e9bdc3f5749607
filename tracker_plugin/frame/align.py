"""Keys logged at different steps, put on one table by step: the one aligner every source uses.

A tracker hands back each key's history on its own: an MLflow metric's points, a W&B
key's rows. A train loss logged every step, an eval loss every 500 and the lr every 10
become one table with a row per step any of them was logged at, aligned on the step and
never on the position of a row. Where a key holds several values for one step (a resumed
run logged the step again), the latest wins: the one with the greatest ``order`` (MLflow's
timestamp), else the one logged last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

__all__ = ["Aligned", "KeyHistory", "align_on_step"]


class KeyHistory(NamedTuple):
    """One key's logged values: the step of each, and optionally what orders them in time."""

    step: Sequence[int] | np.ndarray
    value: Sequence[Any] | np.ndarray
    order: Sequence[float] | np.ndarray | None = None


class Aligned(NamedTuple):
    """The aligned table, and for each key the rows where it was logged as NaN.

    ``frame`` has the step column and one column per key, NaN where the key was not
    logged at that step. A NaN the run *logged* (a diverged step) is a value, unlike a
    step where the key is missing; ``logged_nan`` tells them apart.
    """

    frame: pd.DataFrame
    logged_nan: dict[str, np.ndarray]


def align_on_step(histories: Mapping[str, KeyHistory], *, step: str = "step") -> Aligned:
    """One table of ``histories`` on step: a row per step any key was logged at, in order.

    Values stay floats when every value of a key is a number, else the column holds
    objects (so that :func:`~tracker_plugin.frame.history.build_history` can name the first
    value that is not a number).
    """
    latest = {key: _latest_per_step(history) for key, history in histories.items()}
    steps = np.unique(np.concatenate([s for s, _ in latest.values()] or [np.array([], np.int64)]))
    columns: dict[str, np.ndarray] = {step: steps}
    logged_nan: dict[str, np.ndarray] = {}
    for key, (key_steps, values) in latest.items():
        where = np.searchsorted(steps, key_steps)
        column = np.full(len(steps), np.nan, dtype=object if values.dtype == object else float)
        column[where] = values
        columns[key] = column
        mask = np.zeros(len(steps), bool)
        mask[where] = _is_nan(values)
        logged_nan[key] = mask
    return Aligned(pd.DataFrame(columns), logged_nan)


def _latest_per_step(history: KeyHistory) -> tuple[np.ndarray, np.ndarray]:
    step = np.asarray(history.step, dtype=np.int64)
    value = _values(history.value)
    order = np.arange(len(step)) if history.order is None else np.asarray(history.order)
    if len(value) != len(step) or len(order) != len(step):
        raise ValueError("a key's steps, values and order differ in length")
    by_step = np.lexsort((order, step))  # by step, then order; stable for equal orders
    step, value = step[by_step], value[by_step]
    last = np.r_[step[1:] != step[:-1], True] if len(step) else np.zeros(0, bool)
    return step[last], value[last]


def _values(values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Floats when every value is a number, else objects; a logged None is NaN."""
    array = np.asarray(values) if isinstance(values, np.ndarray) else None
    if array is not None and array.dtype.kind in "fiu":
        return array.astype(float, copy=False)
    items = list(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return np.asarray(items, dtype=float).reshape(len(items))
    column = np.empty(len(items), dtype=object)
    column[:] = [math.nan if v is None else v for v in items]
    return column


def _is_nan(values: np.ndarray) -> np.ndarray:
    if values.dtype == object:
        return np.array([isinstance(v, float) and math.isnan(v) for v in values], bool)
    return np.isnan(values)
