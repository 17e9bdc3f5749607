"""A live run's siblings: what their law says before its first step, and the law it joins.

Given ``siblings`` (run strings, or their evidence already read), a live forecast reads
them and fits the law they share for the run's configuration once, off the training
thread, before its first forecast; it then says, once, what the law forecasts for the
run's plan (each target and the smoothed loss at the plan's end) and its later forecasts
join that law (``AnalysisConfig.project_law``). Where they share no law, or the run's
plan or tokens per step are not known before it starts, it says why in one line. Nothing
here raises into the trainer: a failure is a warning and a line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tracker_plugin.core.planned import NoSharedLaw, PlannedRun
from tracker_plugin.live.console import say_lines
from tracker_plugin.plan.schedule import STEPS_ONLY
from tracker_plugin.report.plan_end_text import plan_end_line
from tracker_plugin.report.tables import interval

if TYPE_CHECKING:
    from tracker_plugin.live.stream import LiveForecast

__all__ = ["PREFIX", "before_the_run", "planned_lines"]

PREFIX = "loss_eta before the run"


def before_the_run(live: LiveForecast, siblings: Any) -> list[str]:
    """Fit the siblings' law for ``live``'s run, give it to the run's later forecasts, and
    say what it forecasts before the first step (the lines, also written to the console).
    Never raises: a failure is warned about once and said in its line."""
    from tracker_plugin.live.stream import warn_once

    try:
        lines = _forecast(live, siblings)
    except Exception as exc:  # noqa: BLE001 - the trainer comes first
        lines = [f"the siblings gave no forecast: {warn_once(exc, set())}"]
    said = [f"{PREFIX}: {line}" for line in lines]
    say_lines(said)
    return said


def _forecast(live: LiveForecast, siblings: Any) -> list[str]:
    from tracker_plugin.jobs.plan import plan_run, siblings_evidence

    schedule = live.config.lr_schedule
    if schedule is None or schedule.total_steps is None or schedule.source == STEPS_ONLY:
        return ["no forecast from the siblings: the run's planned lr (its shape and its end) is not known "
                "(give the plan, or a scheduler stepped every step)"]
    read = siblings_evidence(siblings, live.config)
    if live.tokens_per_step is None and not all(e.on_steps for e in read.evidence):
        return ["no forecast from the siblings: they count tokens and the run's tokens per step are not known "
                "before it logs (give tokens_per_step, or seq_len)"]
    try:
        planned = plan_run(read, schedule, live.config.targets, batch=live.tokens_per_step or 1.0,
                           config=live.config, run=live.name)
    except NoSharedLaw as exc:
        live.config = replace(live.config, project_law=exc.project)  # the reports say why
        return [f"no forecast from the siblings: {exc.project.describe()}"]
    live.config = replace(live.config, project_law=planned.project)
    return planned_lines(planned)


def planned_lines(planned: PlannedRun) -> list[str]:
    """One line per target and one for the plan's end, as the live console says them:
    ``3.30 forecast at step 23,588 (80%: 21,622–25,733), P(within plan) 0.60``."""
    lines = [f"{len(planned.project.siblings)} finished sibling run(s) share a law ({planned.project.pooled.law})"
             if planned.project.pooled is not None else planned.project.describe()]
    for t in planned.targets:
        chance = "" if t.p_reach_within_plan is None else f", P(within plan) {t.p_reach_within_plan:.2f}"
        if t.step is None:
            lines.append(f"{t.target:.2f} {t.status}{chance}")
            continue
        spread = "" if t.step_interval is None else f" ({planned.interval:.0%}: {interval(t.step_interval, _steps)})"
        lines.append(f"{t.target:.2f} {t.status} at step {t.step:,.0f}{spread}{chance}")
    lines.append(plan_end_line(planned.plan_end, planned.interval))
    return lines


def _steps(value: float) -> str:
    return f"{value:,.0f}"
