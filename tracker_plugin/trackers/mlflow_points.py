"""MLflow's metric points: histories aligned on MLflow's step, a run's latest values, and
where our own rows are written.

MLflow stores a logged infinity as the largest float; it is read back as infinity. A
history cached for a finished run is checked to be what this version stores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.frame.align import KeyHistory, align_on_step
from tracker_plugin.keys import (
    is_own,
    is_series,
)
from tracker_plugin.trackers.base import Annotation, RunInfo

__all__ = ["MLFLOW_STEP"]


_MLFLOW_INF = 1.7976931348623157e308  # MLflow stores +-inf as +-max float


# MLflow's own metric step, as a frame column (a run may log a metric named ``step``).
MLFLOW_STEP = "_mlflow_step"


def _aligned(
    histories: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]], loss_key: str
) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-key ``(step, value, timestamp)`` histories as one table on MLflow's step, and the
    rows whose loss was logged as NaN; at a step logged twice the latest timestamp wins."""
    aligned = align_on_step(
        {key: KeyHistory(step, _restore_infinity(value), stamp) for key, (step, value, stamp) in histories.items()},
        step=MLFLOW_STEP,
    )
    return aligned.frame, aligned.logged_nan.get(loss_key, np.zeros(len(aligned.frame), bool))


def _restore_infinity(value: np.ndarray) -> np.ndarray:
    """MLflow stores a logged +-inf as +-the largest float: read it back as infinity."""
    value = np.asarray(value, float)
    return np.where(value >= _MLFLOW_INF, np.inf, np.where(value <= -_MLFLOW_INF, -np.inf, value))


def _short(histories: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
           latest: Mapping[str, tuple[int, int, float]]) -> list[str]:
    """The keys whose history does not reach the step of the run's latest value of them."""
    return [name for name, (step, _, _) in histories.items()
            if name in latest and (not len(step) or int(step.max()) < latest[name][0])]


def _latest(record: Any) -> dict[str, tuple[int, int, float]]:
    """Key -> (step, timestamp, value) of the run's latest value of each metric."""
    return {m.key: (int(m.step), int(m.timestamp), float(m.value)) for m in record.data.to_proto().metrics}


def _own(record: Any) -> dict[str, Any]:
    """The run's keys of ours: latest metric values (NaN where cleared) and tags."""
    own: dict[str, Any] = {k: float(v) for k, v in record.data.metrics.items() if is_own(k)}
    own.update((k, str(v)) for k, v in record.data.tags.items() if is_own(k))
    return own


def _metric_step(run: RunInfo, annotation: Annotation) -> int:
    """Where a run's numbers are logged: a finished run's at step 0, where MLflow draws a
    metric whose values all sit at step 0 as a bar (one per run, its value written on it)
    rather than a chart of one dot; a running run's at its last analysed step, so that a
    nightly pass draws how its forecast moved as it trained."""
    return 0 if run.finished else int(annotation.step)


def _write_point(latest: Mapping[str, tuple[int, int, float]], step: int) -> tuple[int, int]:
    """The step and timestamp our metric rows are logged at.

    The step is the one asked for, or a later one our keys were logged at before (a row
    at an earlier step would never become the latest; the series are not counted). The
    timestamp is one past the latest of any metric of the run: later than every earlier
    annotation's rows, and the same for two jobs that read the same run, whose identical
    rows MLflow then keeps once.
    """
    own_steps = [point[0] for key, point in latest.items() if is_own(key) and not is_series(key)]
    stamps = [point[1] for point in latest.values()]
    return max([step, *own_steps]), max([0, *stamps]) + 1


def _cached_histories(
    cached: Mapping[str, np.ndarray] | None, names: Sequence[str]
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """A cache entry's histories, or None when it is not what this version stores (arrays
    missing, of other shapes or kinds): such an entry is dropped and fetched again."""
    if cached is None:
        return None
    out = {}
    for i, name in enumerate(names):
        found = [cached.get(f"{i}.{part}") for part in ("step", "value", "timestamp")]
        arrays = [a for a in found if a is not None and a.ndim == 1 and a.dtype.kind in "iuf"]
        if len(arrays) != len(found):
            return None
        step, value, stamp = arrays
        if not len(step) == len(value) == len(stamp) or step.dtype.kind == "f" or stamp.dtype.kind == "f":
            return None
        out[name] = (step.astype(np.int64), value.astype(float), stamp.astype(np.int64))
    return out


def _first_present(candidates: Sequence[str], present: Mapping[str, Any]) -> str | None:
    return next((c for c in candidates if c in present), None)


def _same(latest: tuple[int, int, float] | None, value: float | None) -> bool:
    """Is ``value`` already the key's latest value?"""
    if latest is None:
        return False
    stored = latest[2]
    if value is None or math.isnan(value):
        return math.isnan(stored)
    return stored == float(value)


def _run_id(run: RunInfo) -> str:
    return run.ref.removeprefix("mlflow:")
