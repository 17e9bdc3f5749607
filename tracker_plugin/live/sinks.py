"""Where a live forecast goes: the W&B run and the MLflow run the training process logs to.

The trainers' own integrations log through the module-level run of each tracker
(``wandb.run``, MLflow's active run), so a live forecast logs there too, at the trainer's
step, and only to the trackers the run reports to. A tracker module the process has not
imported is not imported here: a run that does not use it has nothing to log to.

At the end of training, :meth:`TrackerSinks.annotate` writes the annotation
``tracker-plugin annotate`` writes. MLflow: the run is annotated by id through
:class:`~tracker_plugin.trackers.mlflow_runs.MlflowSource`, the same job and the same
consistency as the command line (its history read back from the tracker). W&B: the run is
still open in this process, so its keys, files and marker go through the run itself,
after a last, empty history row at a time of ours: the annotation records the history's
fingerprint as it will be once the run closes, so ``annotate`` of the closed run finds it
current.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, MARKER, SERIES_LOSS, SERIES_TOKENS, is_own
from tracker_plugin.live.console import say_lines
from tracker_plugin.live.stream import LiveResult
from tracker_plugin.trackers.atomic import write_atomic

__all__ = ["TrackerSinks", "say_progress", "should_stop"]

_P_UNREACHABLE = 0.05  # P(reach within the plan) below this counts as out of reach


class TrackerSinks:
    """The trackers a training process reports to, found as its integrations find them."""

    def __init__(self) -> None:
        self.mlflow_run: tuple[str, str] | None = None  # (run id, tracking URI), seen while logging
        self.outcomes: list[str] = []  # what the end-of-training annotation did, per tracker
        self._charted: set[str] = set()  # W&B runs told to draw the smoothed loss against tokens

    def log(self, metrics: Mapping[str, float], step: int, args: Any = None) -> None:
        """Log ``metrics`` at ``step`` to each tracker the run reports to."""
        reports = _report_to(args)
        wandb_run = _wandb_run() if reports is None or "wandb" in reports else None
        if wandb_run is not None:
            self._chart_on_tokens(wandb_run, metrics)
            wandb_run.log({**metrics, "train/global_step": step})
        mlflow = sys.modules.get("mlflow") if reports is None or "mlflow" in reports else None
        active = mlflow.active_run() if mlflow is not None else None
        if mlflow is not None and active is not None:
            self.mlflow_run = (active.info.run_id, mlflow.get_tracking_uri())
            mlflow.log_metrics(dict(metrics), step=step)

    def _chart_on_tokens(self, run: Any, metrics: Mapping[str, float]) -> None:
        """Once per W&B run: the smoothed loss's step metric is its tokens (logged in the
        same row), so a panel draws the runs' smoothed losses on a token axis."""
        if SERIES_TOKENS not in metrics or run.id in self._charted:
            return
        run.define_metric(SERIES_TOKENS, hidden=True)
        run.define_metric(SERIES_LOSS, step_metric=SERIES_TOKENS)
        self._charted.add(run.id)

    def annotate(
        self, config: AnalysisConfig, args: Any = None, *, result: LiveResult | None = None,
        batch_size: float | None = None,
    ) -> None:
        """Write the full annotation to the MLflow run seen while logging, and to the open W&B run."""
        reports = _report_to(args)
        wandb_run = _wandb_run() if reports is None or "wandb" in reports else None
        mlflow_runs = [] if self.mlflow_run is None else [self.mlflow_run]
        self.annotate_runs(config, mlflow_runs, [] if wandb_run is None else [wandb_run], result, batch_size)

    def annotate_runs(
        self,
        config: AnalysisConfig,
        mlflow_runs: Iterable[tuple[str, str]],
        wandb_runs: Iterable[Any],
        result: LiveResult | None,
        batch_size: float | None = None,
    ) -> None:
        """Annotate MLflow runs given as (run id, tracking URI) and open W&B runs; what each
        came to goes to :attr:`outcomes`. ``batch_size`` is the tokens per step the live
        forecast composed, when the run logs no token count (``annotate --batch-size``).

        The annotation is made without the scheduler's plan: the run has finished, and
        ``tracker-plugin annotate`` with the same targets, which reads the plan the
        trainer logged in the run's params, must find it current."""
        config = replace(config, lr_schedule=None)
        for run_id, uri in mlflow_runs:
            self.outcomes.append(_annotate_mlflow(run_id, uri, config, batch_size))
        for wandb_run in wandb_runs:
            if result is not None:
                self.outcomes.append(_annotate_wandb_run(wandb_run, result, config, batch_size))


def say_progress(result: LiveResult) -> None:
    """Each target's short ETA as a line above the trainer's progress bar (``tqdm.write``,
    which both trainers' bars use), else on stderr:
    ``loss_eta step 1,200: 3.30 forecast at step 7,163 (80%: 6,035-9,020), in 2.2 h (1.8-2.7 h)``."""
    say_lines([f"loss_eta step {result.step:,}: {line}" for line in result.lines()])


def should_stop(result: LiveResult, step: int, max_steps: int | None, min_fraction: float) -> bool:
    """Is every target out of reach within the plan, with high confidence, far enough into the run?"""
    if not max_steps or step < min_fraction * max_steps:
        return False
    chances = [t.p_reach_within_plan for t in result.analysis.targets]
    return all(p is not None and p < _P_UNREACHABLE for p in chances)


def _annotate_mlflow(run_id: str, uri: str, config: AnalysisConfig, batch_size: float | None) -> str:
    from tracker_plugin.jobs.runner import process_runs
    from tracker_plugin.trackers import MlflowOptions, ReadOptions
    from tracker_plugin.trackers.mlflow_runs import MlflowSource

    source = MlflowSource(run_id, ReadOptions(batch_size=batch_size), MlflowOptions(tracking_uri=uri))
    try:
        (outcome,) = process_runs(source, source.runs(), config, write=True, progress=False, workers=1)
    finally:
        source.close()
    return f"mlflow:{run_id}: {outcome.action}" + (f" ({outcome.error})" if outcome.error else "")


def _annotate_wandb_run(run: Any, result: LiveResult, config: AnalysisConfig, batch_size: float | None) -> str:
    from tracker_plugin.jobs.annotation import build_annotation, settings_of
    from tracker_plugin.trackers import ReadOptions

    options = ReadOptions(batch_size=batch_size)
    annotation = build_annotation(
        result.analysis, settings_of(config, options.columns, options.batch_size), _closing_progress(run),
        run_name=run.name,
    )
    # The live forecasts left their last values in the summary: keys of ours this annotation has
    # no value for are removed, as annotate removes them, so the marker matches what the run holds.
    held = {key: run.summary[key] for key in list(run.summary.keys()) if is_own(key)}
    annotation = annotation.clearing(held)
    values = {**annotation.metrics, **annotation.labels}
    for key, value in values.items():
        if key != MARKER and _missing(value) and key in held:
            del run.summary[key]
    run.summary.update({k: v for k, v in values.items() if k != MARKER and not _missing(v)})
    # Into the run's own files folder, where the SDK keeps what it uploads (and an offline
    # run keeps its files): saved as loss_eta.json and loss_eta.png.
    folder = Path(run.dir)
    for name, data in ((ARTIFACT_JSON, annotation.report_bytes()), (ARTIFACT_PNG, annotation.plot_bytes())):
        path = folder / name
        write_atomic(path, data)
        run.save(str(path), base_path=str(folder), policy="now")
    run.summary[MARKER] = annotation.marker()
    return f"wandb:{run.id}: annotated"


def _closing_progress(run: Any) -> str | None:
    """The fingerprint the run's history will have once closed (``_step N rows R t T``, as
    the readers take it): a last row, empty, logged at a time of ours, so ``annotate`` of the
    closed run finds this annotation current. None for a resumed run, whose rows this
    process does not count."""
    if getattr(run, "resumed", False):
        return None
    from tracker_plugin.trackers.wandb_data import wandb_progress

    stamp = time.time()
    run.log({"_timestamp": stamp})
    last = int(run.step) - 1
    return wandb_progress(last, last + 1, stamp)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _wandb_run() -> Any:
    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def _report_to(args: Any) -> set[str] | None:
    """The trackers a Trainer's arguments report to; None when the loop does not say (every one)."""
    if args is None:
        return None
    reports = getattr(args, "report_to", None)
    if reports is None:
        return None
    names: Iterable[str] = [reports] if isinstance(reports, str) else reports
    names = {str(n).lower() for n in names}
    return {"wandb", "mlflow"} if "all" in names else names
