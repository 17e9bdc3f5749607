"""The siblings a run string names, read into the evidence the project's law is fitted on.

Each run the strings name is read once through the source layer (a CSV or a folder of
them, an MLflow experiment, a W&B project, offline W&B files) and turned into its
:class:`~tracker_plugin.core.project_law.RunEvidence`: the lr it trained on (its logged
lr, else its params' plan), what its rows say of its configuration, and how well its own
early log forecast itself (backtested once, finished runs only; the law is confirmed
against it). A run that cannot be read is left out with why, never the whole read. A run
counts as finished where its tracker says so (a CSV is a finished run); a failed, crashed
or killed one did not finish its plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.forecast import resolve_plan
from tracker_plugin.core.project_law import RunEvidence, descriptors_from_history, run_evidence
from tracker_plugin.errors import TrackerPluginError
from tracker_plugin.frame.history import History
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import RunInfo, SourceOptions

__all__ = ["SiblingsRead", "history_evidence", "read_siblings"]


@dataclass(frozen=True)
class SiblingsRead:
    """The evidence of every run read, the runs left out with why, and where they came
    from (the run strings, for the report)."""

    evidence: tuple[RunEvidence, ...]
    left_out: tuple[tuple[str, str], ...]
    origin: str


def history_evidence(history: History, config: AnalysisConfig, *, finished: bool = True) -> RunEvidence:
    """A run's evidence from its history, smoothed and backtested with ``config``'s
    settings (its targets and lr plan are not used: a sibling's plan is its own)."""
    from tracker_plugin.core.project_law.own_log import own_errors

    plan = resolve_plan(history, None).schedule
    window = config.ema_steps if history.on_steps else config.ema_token_window
    settings = replace(config, lr_schedule=plan, ema_token_window=window, batch_schedule=None, project_law=None)
    own = own_errors(history, settings) if finished else ()
    end = plan.total_steps if plan is not None and plan.total_steps else float(history.last_step)
    return run_evidence(history, plan, ema_window=window, finished=finished, plan_end=max(end, float(history.last_step)),
                        descriptors=descriptors_from_history(history), own=own)


def read_siblings(specs: Sequence[str], options: SourceOptions, config: AnalysisConfig,
                  exclude: str | None = None) -> SiblingsRead:
    """Read every run ``specs`` name (in the options' states) into its evidence;
    ``exclude`` is the forecast run's name, never its own sibling.

    Raises
    ------
    SourceError
        A run string names no source that can be opened (a run in it that cannot be
        read is left out instead).
    """
    found: list[RunEvidence] = []
    left_out: list[tuple[str, str]] = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            for run in runs:
                evidence, why = _one(source.read, run, config, exclude)
                if evidence is not None:
                    found.append(evidence)
                else:
                    left_out.append((run.name or run.ref, why))
    return SiblingsRead(tuple(found), tuple(left_out), ", ".join(specs))


def _one(read: Callable[[RunInfo], History], run: RunInfo, config: AnalysisConfig, exclude: str | None) -> tuple[RunEvidence | None, str]:
    try:
        history = read(run)
        if exclude is not None and history.run == exclude:
            return None, "the forecast run itself"
        return history_evidence(history, config, finished=run.state == "finished"), ""
    except TrackerPluginError as exc:  # one unreadable sibling is left out, not the forecast
        return None, f"it could not be read: {exc.problem}"
