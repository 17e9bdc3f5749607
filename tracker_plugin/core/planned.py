"""A run not started yet, as its plan and its project's law say it will go.

The project's law (:mod:`tracker_plugin.core.project_law`) fitted on the finished runs of
the run's configuration is put on the run's planned lr and batch: each target's tokens,
steps and hours with the interval and the chance within the plan, and the smoothed loss
at the plan's end with its interval. Where the runs share no law there is no plan to
tell: :func:`plan_forecast` raises :class:`NoSharedLaw`, with the reason.

Pure: a fitted project and a plan in, a frozen :class:`PlannedRun` out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tracker_plugin.core.clock import tokens_to_step
from tracker_plugin.core.project_law.forecast import PlanEnd, ProjectForecast, TargetLaw, forecast_plan
from tracker_plugin.core.project_law.project import ProjectLaw
from tracker_plugin.core.status import Status
from tracker_plugin.errors import ConfigError, DataError
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

__all__ = ["NoSharedLaw", "PlannedRun", "PlannedTarget", "plan_forecast"]


class NoSharedLaw(DataError):
    """The runs offered as siblings share no law: nothing forecasts a run before it starts.

    ``project`` is the fit that says why (its ``reason`` and the runs it left out)."""

    def __init__(self, project: ProjectLaw) -> None:
        self.project = project
        super().__init__(f"the siblings give no forecast before the run starts: {project.describe()}")


@dataclass(frozen=True)
class PlannedTarget:
    """One target of a run not started: ``forecast`` (the law reaches it within the plan)
    or ``unlikely`` (past the plan's end, or never within the law's horizon: a chance).
    Tokens, steps and seconds (from the run's start, at the siblings' pace; None where none
    logged a clock) with their intervals; the chance of reaching it within the plan."""

    target: float
    status: Status
    tokens: float | None
    step: float | None
    tokens_interval: tuple[float, float] | None
    step_interval: tuple[float, float] | None
    p_reach_within_plan: float | None
    seconds: float | None = None
    seconds_interval: tuple[float, float] | None = None
    note: str | None = None


@dataclass(frozen=True)
class PlannedRun:
    """What the project's law says of a run before it starts (see the module's docstring).

    ``curve``: the predicted smoothed loss as ``(steps, tokens, loss)`` arrays, from the
    end of the warmup to past the plan's end; ``plan_end_seconds``: hours to the plan's end
    at the siblings' pace (None: no sibling logged a clock)."""

    run: str
    schedule: LrSchedule
    batch: float
    batch_schedule: BatchSchedule | None
    unit: str
    ema_window: float
    interval: float
    targets: tuple[PlannedTarget, ...]
    plan_end: PlanEnd
    project: ProjectLaw
    forecast: ProjectForecast = field(repr=False)
    plan_end_seconds: float | None = None

    @property
    def on_steps(self) -> bool:
        return self.unit == "steps"

    @property
    def curve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.forecast.steps, self.forecast.tokens, self.forecast.loss

    @property
    def seconds_per_token(self) -> float | None:
        return self.forecast.seconds_per_token


def plan_forecast(
    project: ProjectLaw,
    schedule: LrSchedule,
    targets: Sequence[float],
    *,
    batch: float,
    ema_window: float,
    batch_schedule: BatchSchedule | None = None,
    unit: str = "tokens",
    interval: float = 0.8,
    run: str = "planned run",
    peak_lr: float | None = None,
) -> PlannedRun:
    """The run of ``schedule`` and ``batch`` (tokens per step; its later stages in
    ``batch_schedule``) forecast by ``project`` before its first step.

    Raises
    ------
    ConfigError
        The plan has no planned end (a run not started is forecast to its end).
    NoSharedLaw
        The project's runs share no law (its reason says why).
    """
    if schedule.total_steps is None:
        raise ConfigError(f"the plan ({schedule.description}) has no planned last step: give the run's total steps",
                          run=run)
    if not project.shared:
        raise NoSharedLaw(project)
    found = forecast_plan(project, run, schedule, list(targets), batch=batch, ema_window=ema_window, peak_lr=peak_lr,
                          unit=unit, level=interval, batch_schedule=batch_schedule)
    assert found.plan_end is not None  # the plan has an end
    start = History(run, "loss", np.array([0], np.int64), np.zeros(1), np.array([float(batch)]), np.array([math.nan]),
                    on_steps=unit == "steps")

    def step(tokens: float) -> float:
        return tokens_to_step(tokens, start, batch_schedule)

    end_tokens = found.plan_end.tokens
    planned = tuple(_target(t, end_tokens, step) for t in found.targets)
    pace = found.seconds_per_token
    return PlannedRun(run, schedule, float(batch), batch_schedule, unit, float(ema_window), interval, planned,
                      found.plan_end, project, found, None if pace is None else pace * end_tokens)


def _target(law: TargetLaw, end_tokens: float, to_step: Callable[[float], float]) -> PlannedTarget:
    """``to_step``: tokens to the step on the run's planned batch."""
    if law.tokens is None:
        note = "the project's law does not reach it within 20x the plan"
        return PlannedTarget(law.target, Status.UNLIKELY, None, None, None, None, law.p_within_plan, note=note)
    interval = law.interval
    steps = None if interval is None else (to_step(interval[0]), to_step(interval[1]))
    within = law.tokens <= end_tokens
    past = None if within else "the project's law puts it past the plan's end"
    return PlannedTarget(law.target, Status.FORECAST if within else Status.UNLIKELY, law.tokens,
                         to_step(law.tokens), interval, steps, law.p_within_plan,
                         law.seconds, law.seconds_interval, past)
