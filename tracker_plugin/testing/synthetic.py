"""Synthetic training runs whose loss follows a known power law in tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["synthetic_run"]


def synthetic_run(
    steps: int,
    *,
    batch: float | Sequence[tuple[int, float]] = 524_288.0,
    l0: float = 2.0,
    a: float = 3.0,
    alpha: float = 0.3,
    noise: float = 0.02,
    warmup: int = 100,
    lr_peak: float = 3e-4,
    log_every: int = 1,
    seed: int = 0,
) -> pd.DataFrame:
    """A run of ``steps`` steps logged every ``log_every`` steps.

    The loss is ``l0 + a * (T / 1e9) ** -alpha`` at the tokens ``T`` consumed after the
    step, plus Gaussian noise of standard deviation ``noise``. ``batch`` is tokens per
    step, or ``[(first_step, batch), ...]`` for a dynamic batch. The lr warms up linearly
    over ``warmup`` steps, then stays at ``lr_peak``.

    Columns: ``step, tokens, global_batch, lr, train_loss`` (tokens consumed before the step).
    """
    rng = np.random.default_rng(seed)
    step = np.arange(steps)
    per_step = _batch_per_step(step, batch)
    tokens = np.r_[0.0, np.cumsum(per_step)[:-1]]
    after = tokens + per_step
    loss = l0 + a * (after / 1e9) ** -alpha + rng.normal(0.0, noise, steps)
    lr = lr_peak * np.minimum(1.0, (step + 1) / max(warmup, 1))
    rows = slice(None, None, log_every)
    return pd.DataFrame(
        {
            "step": step[rows],
            "tokens": tokens[rows],
            "global_batch": per_step[rows],
            "lr": lr[rows],
            "train_loss": loss[rows],
        }
    )


def _batch_per_step(step: np.ndarray, batch: float | Sequence[tuple[int, float]]) -> np.ndarray:
    if isinstance(batch, (int, float)):
        return np.full(len(step), float(batch))
    stages = sorted(batch)
    per_step = np.full(len(step), float(stages[0][1]))
    for first, size in stages:
        per_step[step >= first] = float(size)
    return per_step
