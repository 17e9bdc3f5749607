"""Tokens and tokens per step as a log gives them: a token count, a batch column, the
batch in the run's name (``_1Mbs``) or ``batch_size``.

Tokens are summed from tokens per step where a run logs no count (a logging gap filled
with the batch of the row before it); a logged count must be finite, move and never
decrease, or the error names the step where it does not.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError

if TYPE_CHECKING:
    pass

__all__ = ["batch_from_name"]


_BATCH_IN_NAME = re.compile(r"_([\d.]+)([MK])bs", re.IGNORECASE)


def batch_from_name(name: str) -> float | None:
    """Tokens per step written in a run or file name as ``_1Mbs`` or ``_512Kbs``."""
    match = _BATCH_IN_NAME.search(name)
    if not match:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value * (1_000_000 if match.group(2).upper() == "M" else 1_000)


def _filled(values: np.ndarray) -> np.ndarray:
    """Each missing value replaced by the last one before it (or the first one after)."""
    if not np.isnan(values).any():
        return values
    return pd.Series(values).ffill().bfill().to_numpy()


def _batch(
    logged: np.ndarray | None, column: str | None, step: np.ndarray, batch_size: float | None, run: str
) -> tuple[np.ndarray, str]:
    if logged is not None and not np.isnan(logged).all():
        batch = _filled(logged)
        source = f"column '{column}'"
    else:
        given = batch_size
        source = "batch_size"
        if given is None:
            given = batch_from_name(run)
            source = "run name"
        if given is None:
            raise DataError(
                "no such column and no batch size given; pass batch_size (tokens per step), "
                "name the batch column with columns.batch, or put the size in the name (_1Mbs)",
                run=run,
                column="global_batch" if column is None else column,
            )
        batch = np.full(len(step), float(given))
    bad = ~np.isfinite(batch) | (batch < 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"the batch must be at least 1 token per step, found {float(batch[i]):g} at step {step[i]}",
            run=run,
            column=column or "batch",
        )
    return batch, source


def _tokens(
    logged: np.ndarray | None, column: str | None, step: np.ndarray, batch: np.ndarray, run: str
) -> np.ndarray:
    """Tokens consumed before each step: the logged ones, the gaps filled from the batch."""
    with np.errstate(over="ignore", invalid="ignore"):
        tokens = _tokens_unchecked(logged, column, step, batch, run)
    if not np.isfinite(tokens).all():  # an absurd batch summed past the largest float
        i = int(np.flatnonzero(~np.isfinite(tokens))[0])
        raise DataError(f"tokens summed from the batch overflow at step {step[i]}", run=run, column=column or "batch")
    return tokens


def _tokens_unchecked(
    logged: np.ndarray | None, column: str | None, step: np.ndarray, batch: np.ndarray, run: str
) -> np.ndarray:
    if logged is None or np.isnan(logged).all():
        return _accumulated(step, batch)
    invalid = np.isinf(logged) | (logged < 0)
    if invalid.any():
        i = int(np.flatnonzero(invalid)[0])
        raise DataError(f"tokens must be finite and >= 0, found {float(logged[i]):g} at step {step[i]}", run=run, column=column)
    known = np.isfinite(logged)
    if known.all():
        tokens = logged
    else:
        accumulated = _accumulated(step, batch)
        tokens = np.where(known, logged, accumulated + _filled(logged - accumulated))
    if len(tokens) > 1 and tokens[-1] == tokens[0] and step[-1] > step[0]:
        # A count that never moves is not a token count (a zero-filled column): the
        # forecast would divide by it.
        raise DataError(
            f"stays at {tokens[0]:.6g} from step {step[0]} to step {step[-1]}: it does not count tokens "
            "(name the right column with columns.tokens)",
            run=run,
            column=column,
        )
    drop = np.flatnonzero(np.diff(tokens) < 0)
    if len(drop):
        i = int(drop[0])
        raise DataError(
            f"decreases from {tokens[i]:.6g} at step {step[i]} to {tokens[i + 1]:.6g} at step {step[i + 1]}",
            run=run,
            column=column,
        )
    return tokens


def _accumulated(step: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Tokens summed from the batch: a logging gap is filled with the batch of the row before it."""
    accumulated = np.empty(len(step))
    accumulated[0] = step[0] * batch[0]
    accumulated[1:] = accumulated[0] + np.cumsum(batch[:-1] * np.diff(step))
    return accumulated
