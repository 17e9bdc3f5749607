"""Build what an analysis writes back to a run (see :mod:`tracker_plugin.keys` for the keys).

The report makes the values; this assembles them, with the settings fingerprint and the
source's progress marker, into the :class:`~tracker_plugin.trackers.base.Annotation` a
tracker writes.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from dataclasses import asdict
from typing import Any

from tracker_plugin.core.analysis import Analysis, AnalysisConfig
from tracker_plugin.frame.history import Columns
from tracker_plugin.jobs.series import series_provenance, smoothed_series
from tracker_plugin.keys import (
    PLAN_END,
    PLAN_END_TEXT,
    PNG_DIGEST,
    PROVENANCE,
    TARGET_METRICS,
    plot_digest,
    report_digest,
    target_key,
)
from tracker_plugin.report.plan_end_text import plan_end_text
from tracker_plugin.report.plot_skipped import skipped_plot
from tracker_plugin.report.render import to_json
from tracker_plugin.report.target_text import target_text
from tracker_plugin.report.timing import target_seconds
from tracker_plugin.trackers.base import Annotation, encode_report

__all__ = ["build_annotation", "settings_hash", "settings_of"]


def settings_of(
    config: AnalysisConfig, columns: Columns, batch_size: float | None, *, series: bool = True
) -> dict[str, Any]:
    """Every setting that changes what gets written, as plain JSON values. ``series``:
    write the smoothed loss back as a series for the trackers' charts (:mod:`.series`)."""
    from tracker_plugin._version import __version__

    settings = asdict(config)
    settings["batch_schedule"] = None if config.batch_schedule is None else str(config.batch_schedule)
    settings["lr_schedule"] = None if config.lr_schedule is None else config.lr_schedule.fingerprint()
    # A calibration is a setting only where one was asked for: the runs annotated before
    # there was one keep their fingerprint.
    cal = settings.pop("calibration")
    # The project's law is the runs' evidence, not a setting: the book's digest stands for it.
    settings.pop("project_law")
    if config.calibration.asked:
        settings["calibration"] = {k: cal[k] for k in ("runs", "bias", "width", "left_out")}
    settings["columns"] = asdict(columns)
    settings["batch_size"] = batch_size
    settings["series"] = series
    settings["version"] = __version__
    return settings


def settings_hash(settings: dict[str, Any]) -> str:
    """A short, stable fingerprint of :func:`settings_of`'s result."""
    canonical = json.dumps(settings, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build_annotation(
    analysis: Analysis, settings: dict[str, Any], progress: str | None = None, run_name: str | None = None,
    record: dict[str, Any] | None = None, plot: bool = True, project: dict[str, Any] | None = None,
) -> Annotation:
    """The keys and artifacts for ``analysis``, made with ``settings`` (see :func:`settings_of`).

    ``progress`` is the source's fingerprint of the analysed history; it defaults to the
    last analysed step. The provenance tag records the report's digest, so the completion
    marker (the hash of every key, see :meth:`~tracker_plugin.trackers.base.Annotation.marker`)
    commits to the report too. ``run_name`` is what people call the run (its tracker's
    run name), which titles the plot artifact. ``record`` is a finished run's evidence for
    its project's law (:mod:`tracker_plugin.jobs.project_book`), kept in the provenance
    tag; ``project`` what a running run's forecast took from that law (the sibling runs it
    was fitted on, or why none was used). Without
    ``plot``, ``loss_eta.png`` is a picture that says no plot was drawn
    (:mod:`tracker_plugin.report.plot_skipped`), a few milliseconds where a plot takes a
    hundred and more.
    """
    fingerprint = settings_hash(settings)
    progress = progress if progress is not None else f"step {analysis.observed_step}"
    report = to_json(analysis)
    report["settings_hash"] = fingerprint
    report["progress"] = progress
    # The plot's own inputs, in the keys (checked before a run is read) and the report.
    report["plot_sha256"] = plot_digest(run_name, plot)
    digest = report_digest(encode_report(report))
    series = smoothed_series(analysis) if settings.get("series") else None
    provenance = {
        "version": str(settings.get("version", "")),
        "loss_key": analysis.loss_key,
        "progress": progress,
        "last_step": int(analysis.observed_step),
        "last_tokens": analysis.in_tokens(analysis.observed_tokens),
        "settings_hash": fingerprint,
        "report_sha256": digest,
        "plot_sha256": report["plot_sha256"],
        "series": None if series is None else series_provenance(series),
        "settings": settings,
    }
    calibration = calibration_provenance(analysis)
    if calibration is not None:
        provenance["calibration"] = calibration
    if record is not None:
        provenance["siblings"] = record
    if project is not None:
        provenance["project_law"] = project
    labels: dict[str, str | None] = {PROVENANCE: json.dumps(provenance, default=list)}
    labels.update((target_key(result.target), target_text(analysis, k)) for k, result in enumerate(analysis.targets))
    end = plan_end_text(analysis)
    if end is not None:  # none known: not written (one held from before is cleared as a dropped target's is)
        labels[PLAN_END_TEXT] = end
    return Annotation(
        run=analysis.run,
        metrics=annotation_metrics(analysis),
        labels=labels,
        report=report,
        progress=progress,
        settings_hash=fingerprint,
        step=int(analysis.observed_step),
        plot=(lambda: _plot_png(analysis, run_name, digest)) if plot else (lambda: skipped_plot({PNG_DIGEST: digest})),
        series=series,
    )


def calibration_provenance(analysis: Analysis) -> dict[str, Any] | None:
    """What the calibration set and from what, in short (the report lists the runs): the
    runs table's reader sees "bias -0.021 from 7 finished runs (prior 0)"."""
    cal = analysis.config.calibration
    if not cal.asked:
        return None
    return {
        "runs": len(cal.runs),
        "cases": cal.cases,
        "cut": cal.cut,
        "left_out": len(cal.left_out),
        "bias": {"value": round(cal.bias, 4), "siblings": _rounded(cal.raw_bias, 4), "prior": 0.0,
                 "weight": _rounded(cal.bias_weight, 4), "spread": cal.spread},
        "width": {"value": round(cal.width, 4), "siblings": _rounded(cal.raw_width, 4), "prior": 1.0,
                  "weight": _rounded(cal.width_weight, 4)},
    }


def annotation_metrics(analysis: Analysis) -> dict[str, float | None]:
    """The numbers an annotation writes (:mod:`tracker_plugin.keys`): every key of every
    target, None where there is no value, rounded to what a person reads; the live
    forecasts log the finite ones."""
    metrics: dict[str, float | None] = {}
    for k, result in enumerate(analysis.targets):
        located = result.status.located
        # On the step axis there are no tokens (None): the values would be steps.
        tokens = analysis.in_tokens(result.tokens) if located else None
        _, seconds_left, _ = target_seconds(analysis, k)
        values = (
            _rounded(None if tokens is None else tokens / 1e9, 4),
            _rounded(result.step if located else None, None),
            _rounded(None if seconds_left is None else seconds_left / 3600.0, 3),
        )
        for name, value in zip(TARGET_METRICS, values, strict=True):
            metrics[target_key(result.target, name)] = value
    metrics[PLAN_END] = None if analysis.plan_end is None else _rounded(analysis.plan_end.loss, 4)
    return metrics


def _rounded(value: float | None, digits: int | None) -> float | None:
    """``value`` to ``digits`` significant digits (None: to a whole number); None where not finite."""
    if value is None or not math.isfinite(value):
        return None
    return float(round(value)) if digits is None else float(f"{value:.{digits}g}")


def _plot_png(analysis: Analysis, name: str | None, report: str) -> bytes:
    """``loss_eta.png``, rendered when a tracker writes it (matplotlib is imported only then).

    It carries the report's digest (which commits to the plot's inputs too) in its
    metadata: a tracker can tell a picture another job wrote from this one's.
    """
    from tracker_plugin.report.plot import plot_analysis

    buffer = io.BytesIO()
    # Titled by the run's name: its ref is an id.
    plot_analysis(analysis, buffer, name=name, metadata={PNG_DIGEST: report})
    return buffer.getvalue()

