"""What an analysis says: each target's result (:class:`TargetResult`, with its stability
sweep) and the whole run's (:class:`Analysis`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracker_plugin.core.analysis_config import AnalysisConfig
from tracker_plugin.core.forecast import Selection
from tracker_plugin.core.models import FitFailure, Model
from tracker_plugin.core.project_law.forecast import PlanEnd, ProjectForecast
from tracker_plugin.core.status import Status, Verdict
from tracker_plugin.core.throughput import Timing
from tracker_plugin.frame.history import BatchStage, History
from tracker_plugin.plan.schedule import Plan

__all__ = ["Analysis", "Sweep", "SweepRow", "TargetResult"]


@dataclass(frozen=True)
class SweepRow:
    """One window of the stability sweep: the fit on the run up to ``max_step``."""

    max_step: int
    max_tokens: float
    tokens: float | None
    step: float | None
    fit: Model | None
    note: str | None = None


@dataclass(frozen=True)
class Sweep:
    """Refits on growing windows, and whether the forecast has settled."""

    rows: tuple[SweepRow, ...]
    verdict: Verdict
    changes: tuple[float, float] | None
    tolerance: float


@dataclass(frozen=True)
class TargetResult:
    """What the analysis says about one target loss."""

    target: float
    status: Status
    tokens: float | None = None
    step: float | None = None
    tokens_interval: tuple[float, float] | None = None
    step_interval: tuple[float, float] | None = None
    fit: Model | None = None
    extrapolation_factor: float | None = None
    note: str | None = None
    beyond_warn_factor: bool = False
    sweep: Sweep | None = None
    p_reach_within_plan: float | None = None
    # The bootstrap's sorted crossings in tokens (inf: never), for backtests' calibration.
    tokens_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)
    tokens_raw_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # before the stretch
    tokens_loss_horizons: tuple[float, ...] = field(default=(), repr=False, compare=False)  # each raw draw's
    tokens_plan_draws: tuple[float, ...] = field(default=(), repr=False, compare=False)  # on the plausible plans
    tokens_plan_ends: tuple[float, ...] = field(default=(), repr=False, compare=False)  # their plans' ends
    # The central plan's crossing where the point is over the plausible plans (TargetForecast.central).
    tokens_central: float | None = field(default=None, repr=False, compare=False)
    # ``not_reached``: the best smoothed loss of the log and its step, and where the run
    # ended (the log's last row, when it reached the plan's end) or ends (the plan's end).
    best_loss: float | None = None
    best_step: float | None = None
    end_step: float | None = None
    end_tokens: float | None = None
    run_finished: bool = False
    # The law's crossing and interval past the plan's end (``not_reached``): never reported
    # (a run does not train past its plan), kept so a backtest scores the law as before.
    law_tokens: float | None = field(default=None, repr=False, compare=False)
    law_interval: tuple[float, float] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Analysis:
    """The full result for one run.

    ``history`` and ``smoothed`` are the analysed rows and their smoothed loss, which the
    plots draw; they are left out of comparisons and the repr.
    """

    run: str
    loss_key: str
    config: AnalysisConfig
    fit_start_step: int
    fit_start_reason: str
    observed_step: int
    observed_tokens: float
    stages: tuple[BatchStage, ...]
    batch_source: str
    targets: tuple[TargetResult, ...]
    history: History = field(repr=False, compare=False)
    smoothed: np.ndarray = field(repr=False, compare=False)
    notes: tuple[str, ...] = ()
    fit: Model | FitFailure | None = None
    selection: Selection | None = None
    plan: Plan | None = None
    # The wall-clock side: throughput, and each target's seconds (in ``targets`` order).
    timing: Timing | None = None
    # The smoothed loss forecast at the planned end (None: no planned end, or the power law),
    # and the project's law's forecast of the run where one was given and shared.
    plan_end: PlanEnd | None = None
    project: ProjectForecast | None = field(default=None, repr=False, compare=False)

    @property
    def dynamic_batch(self) -> bool:
        return len(self.stages) > 1

    @property
    def on_steps(self) -> bool:
        """No tokens to be had: the analysis ran on steps (a batch of one per step), so its
        token counts are step counts."""
        return self.history.on_steps

    def in_tokens(self, value: float | None) -> float | None:
        """A count on the analysis's axis as tokens: None on the step axis, where it counts
        steps (what reports, keys and tables write in a field that says tokens)."""
        return None if self.on_steps else value
