"""The analysis's settings: :class:`AnalysisConfig`, checked as it is made, and the fewest
rows a forecast is attempted on."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracker_plugin.core.models.schedule_law import MIN_POINTS_NO_DECAY
from tracker_plugin.core.project_law.project import ProjectLaw
from tracker_plugin.core.siblings import NONE, Calibration
from tracker_plugin.defaults import CLOCKS, DEFAULTS, MODELS
from tracker_plugin.errors import ConfigError
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

__all__ = ["MIN_FIT_ROWS", "MIN_LAW_ROWS", "AnalysisConfig"]

# Fewer rows than this after the fit start and no extrapolation is attempted: the power
# law's limit is the original script's; a schedule-aware law needs two more rows than the
# parameters its window identifies (three when it has seen no lr decay; the law itself
# asks for one more when it has).
MIN_FIT_ROWS = 10
MIN_LAW_ROWS = MIN_POINTS_NO_DECAY


@dataclass(frozen=True)
class AnalysisConfig:
    """Every setting that changes an analysis's result.

    The defaults (:data:`tracker_plugin.defaults.DEFAULTS`, which the command line shows
    too) are those of the original ``find_target_loss.py``, except the model:
    ``auto`` chooses a schedule-aware law on the run's own evidence; ``power-law`` is the
    original's. ``lr_schedule``, ``clock``, ``interval`` and ``anneal_gain`` matter to
    the schedule-aware models only. ``max_fit_points`` caps the rows the power law is
    fitted on (evenly spaced, for speed on huge logs); None, the default, fits every row,
    as the original does, which is what its parity needs: on an ill-conditioned window a
    thinned fit lands far from the full one.
    """

    targets: tuple[float, ...]
    ema_token_window: float = DEFAULTS["ema_token_window"]
    # The EMA window when the run has no tokens to be had (History.on_steps): in steps.
    ema_steps: float = DEFAULTS["ema_steps"]
    model: str = DEFAULTS["model"]
    lr_schedule: LrSchedule | None = None
    clock: str = DEFAULTS["clock"]
    interval: float = DEFAULTS["interval"]
    anneal_gain: float = DEFAULTS["anneal_gain"]
    fit_start_step: int | None = DEFAULTS["fit_start_step"]
    fit_last_stage: bool = DEFAULTS["fit_last_stage"]
    batch_schedule: BatchSchedule | None = None
    extrapolation_warn_factor: float = DEFAULTS["extrapolation_warn_factor"]
    stability_sweep: bool = DEFAULTS["stability_sweep"]
    sweep_step: int = DEFAULTS["sweep_step"]
    sweep_min_window: int = DEFAULTS["sweep_min_window"]
    convergence_tol: float = DEFAULTS["convergence_tol"]
    max_fit_points: int | None = None
    # Wall-clock time: a rate when the log has no clock, pauses in the rate, a deadline
    # (``+HOURS`` after the last row, or an ISO date); see ``core.throughput``.
    step_time: float | None = DEFAULTS["step_time"]
    throughput: float | None = DEFAULTS["throughput"]
    count_pauses: bool = DEFAULTS["count_pauses"]
    deadline: str | None = DEFAULTS["deadline"]
    # What the finished runs of the project say (core.siblings): the schedule-aware laws'
    # forecasts are calibrated with it; NONE, the default, leaves them as they are.
    calibration: Calibration = NONE
    # The project's law (core.project_law): the finished runs of the run's configuration,
    # fitted together; its forecast joins the run's own. None, the default: the run alone.
    project_law: ProjectLaw | None = None

    def __post_init__(self) -> None:
        targets = tuple(self.targets)
        if not targets:
            raise ConfigError("give at least one target loss")
        for target in targets:
            if isinstance(target, bool) or not isinstance(target, (int, float)) or not math.isfinite(target):
                raise ConfigError(f"targets must be finite numbers, got {target!r}")
            if target <= 0:
                raise ConfigError(f"targets are losses above 0, got {target!r}")
        object.__setattr__(self, "targets", tuple(float(t) for t in targets))
        _positive("ema_token_window", self.ema_token_window)
        _positive("ema_steps", self.ema_steps)
        _positive("extrapolation_warn_factor", self.extrapolation_warn_factor)
        _positive("sweep_step", self.sweep_step)
        _positive("convergence_tol", self.convergence_tol)
        if self.sweep_min_window < 0:
            raise ConfigError(f"sweep_min_window must be >= 0, got {self.sweep_min_window}")
        if self.fit_start_step is not None and self.fit_start_step < 0:
            raise ConfigError(f"fit_start_step must be >= 0, got {self.fit_start_step}")
        if self.max_fit_points is not None and self.max_fit_points < 16:
            raise ConfigError(f"max_fit_points must be at least 16 (or None for every row), got {self.max_fit_points}")
        for name in ("step_time", "throughput"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; choose from {', '.join(MODELS)}")
        if self.clock not in CLOCKS:
            raise ConfigError(f"unknown clock {self.clock!r}; choose from {', '.join(CLOCKS)}")
        if not (isinstance(self.interval, (int, float)) and 0 < self.interval < 1):
            raise ConfigError(f"interval is a coverage between 0 and 1 (0.8 for 80%), got {self.interval!r}")
        if not (isinstance(self.anneal_gain, (int, float)) and 0 <= self.anneal_gain < 1):
            raise ConfigError(f"anneal_gain is a share of the loss in [0, 1), got {self.anneal_gain!r}")
        if not isinstance(self.calibration, Calibration):
            raise ConfigError(f"calibration must be a Calibration (tracker_plugin.core.siblings), got {self.calibration!r}")
        if self.project_law is not None and not isinstance(self.project_law, ProjectLaw):
            raise ConfigError(f"project_law must be a ProjectLaw (tracker_plugin.core.project_law), got {self.project_law!r}")


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
