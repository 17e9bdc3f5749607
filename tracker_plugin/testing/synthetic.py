"""Synthetic training runs with a known answer.

By default the loss follows a power law in tokens; with an lr schedule it follows the
learning-rate annealing law of Tissue et al. (2024) on the tokens clock.
:func:`multi_power_run` follows the multi-power law of Luo et al. (2025) on any planned lr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from tracker_plugin.plan.schedule import LrSchedule

__all__ = ["MultiPowerLaw", "multi_power_run", "synthetic_run"]


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
    lr_schedule: str | None = None,
    anneal_gain: float = 0.0,
    noise_correlation: float = 0.0,
) -> pd.DataFrame:
    """A run of ``steps`` steps logged every ``log_every`` steps.

    The loss is ``l0 + a * (T / 1e9) ** -alpha`` at the tokens ``T`` consumed after the
    step, plus Gaussian noise of standard deviation ``noise``. ``batch`` is tokens per
    step, or ``[(first_step, batch), ...]`` for a dynamic batch. The lr warms up linearly
    over ``warmup`` steps, then stays at ``lr_peak``.

    With ``lr_schedule`` (an ``--lr-spec`` string such as ``"cosine:warmup=100,total=5000,
    final=0.1"``; it replaces ``warmup``) the lr follows that plan and the loss follows the
    lr-annealing law: ``T`` becomes the lr-weighted tokens ``sum(lr / lr_peak * batch)``
    through the step, and ``anneal_gain * m`` is subtracted, where ``m`` is the summed
    annealing momentum ``m_i = 0.999 m_(i-1) + (lr_(i-1) - lr_i) / lr_peak`` scaled by
    ``1 - 0.999`` (so a full decay removes ``anneal_gain`` once it has taken effect). For a
    constant lr this is the plain power law.

    ``noise_correlation`` makes the noise an AR(1) process with that lag-one correlation
    (same standard deviation), as the loss of a real run wanders.

    Columns: ``step, tokens, global_batch, lr, train_loss`` (tokens consumed before the step).
    """
    rng = np.random.default_rng(seed)
    step = np.arange(steps)
    per_step = _batch_per_step(step, batch)
    tokens = np.r_[0.0, np.cumsum(per_step)[:-1]]
    after = tokens + per_step
    if lr_schedule is None:
        lr = lr_peak * np.minimum(1.0, (step + 1) / max(warmup, 1))
        clock, gain = after, np.zeros(steps)
    else:
        from tracker_plugin.plan.schedule import LrSchedule

        plan = LrSchedule.parse_spec(lr_schedule)
        shape = plan.at(step) / plan.peak
        lr = lr_peak * shape
        clock = np.cumsum(shape * per_step)
        gain = anneal_gain * _momentum(shape, per_step / per_step[0])
    loss = l0 + a * (np.maximum(clock, 1.0) / 1e9) ** -alpha - gain + _noise(rng, steps, noise, noise_correlation)
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


def _momentum(shape: np.ndarray, weight: np.ndarray, decay: float = 0.999) -> np.ndarray:
    """Tissue et al.'s summed annealing momentum, times ``1 - decay``, step by step.

    A step at ``weight`` times the reference batch decays the momentum ``weight`` times.
    """
    out = np.empty(len(shape))
    momentum = total = 0.0
    previous = shape[0]
    for i, (lr, w) in enumerate(zip(shape, weight)):
        factor = decay**w
        momentum = factor * momentum + max(previous - lr, 0.0)
        # the sum of the momentum over the w reference steps of this step
        total += momentum * (1.0 - factor) / (1.0 - decay) if w != 1.0 else momentum
        previous = lr
        out[i] = total * (1.0 - decay)
    return out


def _noise(rng: np.random.Generator, n: int, sd: float, correlation: float) -> np.ndarray:
    white = rng.normal(0.0, sd, n)
    if not correlation:
        return white
    out = np.empty(n)
    out[0] = white[0]
    scale = np.sqrt(1.0 - correlation**2)
    for i in range(1, n):
        out[i] = correlation * out[i - 1] + scale * white[i]
    return out


@dataclass(frozen=True)
class MultiPowerLaw:
    """The multi-power law's parameters (the form of ``core/models/multipower.py``).

    ``L(t) = l0 + a * (S1(t) / s_ref) ** -alpha - b * sum_k (lr_(k-1) - lr_k) * G(lr_k ** -gamma * S_k(t))``
    with ``G(x) = 1 - (c x + 1) ** -beta``; ``lr`` is the planned lr over its peak, ``S1``
    the lr summed over steps 0 to t and ``S_k`` over steps k to t, in peak-lr steps. ``b``
    is the loss a full decay removes once saturated.
    """

    l0: float = 2.5
    a: float = 0.8
    alpha: float = 0.4
    s_ref: float = 1000.0
    b: float = 0.3
    c: float = 0.01
    beta: float = 0.6
    gamma: float = 0.5

    def loss(self, shape: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The law's loss after each step in ``at``, for ``shape`` the lr over its peak at each step."""
        area = np.cumsum(shape)  # through each step
        power = self.a * (np.maximum(area[at], 1e-9) / self.s_ref) ** -self.alpha
        drop = np.r_[0.0, np.maximum(shape[:-1] - shape[1:], 0.0)]  # lr_(k-1) - lr_k, at step k
        cells = np.flatnonzero(drop > 0)
        since = np.maximum(area[at][:, None] - area[cells][None, :] + shape[cells][None, :], 0.0)
        x = since * np.maximum(shape[cells], 1e-6)[None, :] ** -self.gamma
        anneal = (1.0 - (self.c * x + 1.0) ** -self.beta) @ drop[cells]
        return self.l0 + power - self.b * anneal


def multi_power_run(
    plan: LrSchedule,
    steps: int,
    law: MultiPowerLaw | None = None,
    *,
    batch: float = 262_144.0,
    noise: float = 0.01,
    log_every: int = 10,
    lr_peak: float = 3e-4,
    seed: int = 0,
) -> pd.DataFrame:
    """A run of ``steps`` steps on the planned lr ``plan`` whose loss follows ``law`` (the
    defaults of :class:`MultiPowerLaw` when None) plus white noise of standard deviation
    ``noise``, logged every ``log_every`` steps at ``batch`` tokens a step.

    Columns: ``step, tokens, global_batch, lr, train_loss`` (tokens consumed before the step).
    """
    law = law or MultiPowerLaw()
    shape = plan.at(np.arange(steps)) / plan.peak
    at = np.arange(0, steps, log_every)
    rng = np.random.default_rng(seed)
    loss = law.loss(shape, at) + rng.normal(0.0, noise, len(at))
    return pd.DataFrame(
        {"step": at, "tokens": at * batch, "global_batch": batch, "lr": lr_peak * shape[at], "train_loss": loss}
    )
