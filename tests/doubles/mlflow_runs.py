"""Log training logs into MLflow as a training script would: for tests, examples, benchmarks.

A log is a dataframe with one row per logged step; each non-blank cell becomes one metric
point at its row's step (NaN and inf are logged as such when spelled ``nan``/``inf`` in
the file; a blank cell is "not logged"). Points are sent with ``log_batch`` in MLflow's
largest batches, several batches at once on a server.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["log_csv", "log_frame", "log_run"]

_BATCH = 1000  # MLflow's limit of metrics per log_batch request


def log_frame(
    client: Any,
    run_id: str,
    frame: pd.DataFrame,
    *,
    step: str = "step",
    keys: Sequence[str] | None = None,
    start_ms: int | None = None,
    stamps_ms: Sequence[int] | None = None,
    workers: int = 4,
) -> int:
    """Log ``frame``'s ``keys`` (default: every column but ``step``); return the points logged.

    Row ``i`` is logged at time ``stamps_ms[i]`` when given (a training loop's own times),
    else at ``start_ms + i`` milliseconds, so later rows are later in MLflow too (a resumed
    run re-logging steps wins over the first attempt).
    """
    from mlflow.entities import Metric

    start_ms = int(time.time() * 1000) if start_ms is None else start_ms
    steps = frame[step].to_numpy(dtype=np.int64)
    if stamps_ms is not None and len(stamps_ms) != len(frame):
        raise ValueError(f"stamps_ms has {len(stamps_ms)} values for {len(frame)} rows")
    stamps = (
        np.asarray(stamps_ms, dtype=np.int64)
        if stamps_ms is not None
        else start_ms + np.arange(len(frame), dtype=np.int64)
    )
    metrics = []
    for key in keys if keys is not None else [c for c in frame.columns if c != step]:
        values = pd.to_numeric(frame[key], errors="coerce").to_numpy(dtype=float)
        logged = _logged(frame[key])
        metrics += [
            Metric(key, float(values[i]), int(stamps[i]), int(steps[i])) for i in np.flatnonzero(logged)
        ]
    # Time order within a batch, as a training loop would send them.
    metrics.sort(key=lambda m: (m.timestamp, m.key))
    batches = [metrics[i : i + _BATCH] for i in range(0, len(metrics), _BATCH)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(lambda batch: client.log_batch(run_id, metrics=batch), batches))
    return len(metrics)


def log_run(
    client: Any,
    experiment_id: str,
    frame: pd.DataFrame,
    *,
    name: str,
    step: str = "step",
    keys: Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    status: str = "FINISHED",
    stamps_ms: Sequence[int] | None = None,
    workers: int = 4,
) -> str:
    """Create a run named ``name``, log ``params``, ``tags`` and ``frame``; end it with ``status``.

    ``status="RUNNING"`` leaves the run running. Returns the run id.
    """
    from mlflow.entities import Param

    run = client.create_run(experiment_id, run_name=name, tags=dict(tags or {}))
    run_id = run.info.run_id
    if params:
        client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])
    log_frame(client, run_id, frame, step=step, keys=keys, stamps_ms=stamps_ms, workers=workers)
    if status != "RUNNING":
        client.set_terminated(run_id, status=status)
    return run_id


def log_csv(
    client: Any,
    experiment_id: str,
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    params: Mapping[str, Any] | None = None,
    workers: int = 4,
) -> str:
    """Log a CSV training log (a ``step`` column and one column per key) as a finished run."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    name = name or os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return log_run(client, experiment_id, frame, name=name, params=params, workers=workers)


def _logged(column: pd.Series) -> np.ndarray:
    """Cells that hold a value: numbers, and the spellings nan/inf (a blank is not logged)."""
    if pd.api.types.is_numeric_dtype(column.dtype):
        return column.notna().to_numpy()
    return (column.notna() & (column.astype(str).str.strip() != "")).to_numpy()
