"""A run before it starts: its siblings read, their law fitted, its plan forecast.

:func:`plan_run` is the Python API behind ``tracker-plugin plan``: the finished runs the
siblings name are read (:mod:`.siblings_read`), the law they share is fitted for the
planned run's configuration (its batch, and its peak lr where the plan gives one), and
each planned schedule is forecast by it (:func:`tracker_plugin.core.planned.plan_forecast`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.planned import PlannedRun, plan_forecast
from tracker_plugin.core.project_law import ProjectLaw, RunEvidence, fit_project
from tracker_plugin.errors import ConfigError
from tracker_plugin.jobs.siblings_read import SiblingsRead, read_siblings
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule
from tracker_plugin.trackers import SourceOptions

__all__ = ["Siblings", "plan_run", "plan_runs", "siblings_evidence"]

# What a plan's siblings may be given as: run strings, or evidence already read.
Siblings = str | Sequence[str] | Sequence[RunEvidence] | SiblingsRead


def plan_run(
    siblings: Siblings,
    schedule: LrSchedule | str,
    targets: Sequence[float],
    *,
    batch: float | None = None,
    batch_schedule: BatchSchedule | str | None = None,
    config: AnalysisConfig | None = None,
    options: SourceOptions | None = None,
    run: str = "planned run",
) -> PlannedRun:
    """What the finished runs ``siblings`` name say of a run not started yet: each
    target's tokens, steps and hours with an interval and the chance within the plan, and
    the smoothed loss at the plan's end with its interval.

    ``siblings``: run strings (a CSV or a folder, ``mlflow:experiment/NAME``,
    ``wandb:ENTITY/PROJECT``, ``wandb-offline:DIR``; read with ``options``) or their evidence
    already read. ``schedule``: the planned lr (an :class:`LrSchedule` or a spec such as
    ``cosine:warmup=2000,total=50000,final=0.1``); ``batch``: tokens per step (or the first
    stage of ``batch_schedule``); ``config``: the smoothing window and the interval
    (``ema_token_window``, ``interval``; its targets are ``targets``).

    Raises
    ------
    ConfigError
        No batch, no target, or a plan with no planned end.
    SourceError
        A run string names no source that can be opened.
    NoSharedLaw
        The siblings share no law (the error says why): no forecast before the run starts.
    """
    (planned,) = plan_runs(siblings, [schedule], targets, batch=batch, batch_schedule=batch_schedule, config=config,
                           options=options, runs=[run])
    return planned


def plan_runs(
    siblings: Siblings,
    schedules: Sequence[LrSchedule | str],
    targets: Sequence[float],
    *,
    batch: float | None = None,
    batch_schedule: BatchSchedule | str | None = None,
    config: AnalysisConfig | None = None,
    options: SourceOptions | None = None,
    runs: Sequence[str] | None = None,
) -> list[PlannedRun]:
    """:func:`plan_run` for each of ``schedules`` on one budget of siblings (read and
    fitted once per configuration), in their order; ``runs`` names each planned run (by
    default its spec, or its schedule's description). Raises as :func:`plan_run` does."""
    config = replace(config or AnalysisConfig(targets=tuple(targets)), targets=tuple(targets))
    stages = BatchSchedule.parse(batch_schedule) if isinstance(batch_schedule, str) else batch_schedule
    first = batch if batch is not None else (stages.stages[0][1] if stages is not None else None)
    if first is None:
        raise ConfigError("a planned run needs its batch: give batch (tokens per step) or a batch_schedule")
    plans = [LrSchedule.parse_spec(s) if isinstance(s, str) else s for s in schedules]
    names = list(runs) if runs is not None else [s if isinstance(s, str) else s.description for s in schedules]
    if len(names) != len(plans):
        raise ConfigError(f"{len(names)} names for {len(plans)} plans")
    read = siblings_evidence(siblings, config, options)
    evidence, left_out = list(read.evidence), read.left_out
    unit = "steps" if evidence and all(e.on_steps for e in evidence) else "tokens"
    window = config.ema_steps if unit == "steps" else config.ema_token_window
    projects: dict[float | None, ProjectLaw] = {}
    out = []
    for plan, run in zip(plans, names):
        peak = _peak_lr(plan)
        if peak not in projects:
            descriptors = {} if unit == "steps" else {"batch": float(first)}
            projects[peak] = _with_left_out(fit_project(evidence, run=run, descriptors=descriptors, peak_lr=peak),
                                            left_out)
        out.append(plan_forecast(projects[peak], plan, config.targets, batch=1.0 if unit == "steps" else float(first),
                                 ema_window=window, batch_schedule=None if unit == "steps" else stages, unit=unit,
                                 interval=config.interval, run=run, peak_lr=peak))
    return out


def siblings_evidence(siblings: Siblings, config: AnalysisConfig, options: SourceOptions | None = None) -> SiblingsRead:
    """The siblings' evidence: read where they are run strings (with ``options``), as given
    where they are evidence already."""
    if isinstance(siblings, SiblingsRead):
        return siblings
    if isinstance(siblings, str):
        siblings = [siblings]
    if all(isinstance(s, RunEvidence) for s in siblings):
        return SiblingsRead(tuple(s for s in siblings if isinstance(s, RunEvidence)), (), "the evidence given")
    if not all(isinstance(s, str) for s in siblings):
        raise ConfigError("siblings are run strings or RunEvidence, not a mix of them")
    return read_siblings([s for s in siblings if isinstance(s, str)], options or SourceOptions(), config)


def _peak_lr(plan: LrSchedule) -> float | None:
    """The plan's absolute peak lr, where it gives one (a spec's ``peak``); None for a
    plan of multipliers (its peak 1)."""
    return float(plan.peak) if plan.peak < 1.0 else None


def _with_left_out(project: ProjectLaw, unread: tuple[tuple[str, str], ...]) -> ProjectLaw:
    """The project with the runs that could not be read among those it left out."""
    return replace(project, left_out=(*unread, *project.left_out)) if unread else project
