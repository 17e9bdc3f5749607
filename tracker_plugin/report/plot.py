"""Plot one run's analysis on the token axis or its clock (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.models.schedule_law import LawFit
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot_axis import XAxis, x_axis
from tracker_plugin.report.plot_parts import (
    LOCK,
    PLOT_FORMATS,
    SMALLEST,
    Curve,
    crossing_label,
    decimated,
    figure,
    fitted,
    forecast_curve,
    frame_loss,
    furthest,
    grid,
    interval_band,
    keep_layout,
    lay_out,
    mark_crossing,
    open_top,
    outside_legend,
    place_labels,
    plan_end_tokens,
    plot_format,
    run_title,
    save,
    set_x_limits,
    status_words,
    warning_line,
)

__all__ = ["PLOT_FORMATS", "analysis_figure", "decimated", "forecast_curve", "plot_analysis", "plot_format"]

_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")


def plot_analysis(
    analysis: Analysis,
    path: str | os.PathLike[str] | BinaryIO,
    *,
    x: str = "tokens",
    name: str | None = None,
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a plot: raw and smoothed loss, batch stages, targets, crossings and the fit.

    The format is the extension's (see :func:`plot_format`): PNG, PDF or SVG. ``x`` is
    "tokens" (a log scale, which shows the logged run and an extrapolation several times
    longer in one picture) or "time": hours on the run's clock, the forecast converted
    with the measured throughput (:class:`NoClock` when the log has none). ``name`` is
    what people call the run (a tracker's run name), shown before its reference.
    ``metadata`` goes into the file beside its title.
    """
    plot_format(path)  # refuse an unknown format before drawing
    axis = x_axis(analysis, x, span_tokens=furthest(analysis))
    with LOCK:
        save(_draw(analysis, axis, name), path, metadata)


def analysis_figure(analysis: Analysis, *, x: str = "tokens", name: str | None = None) -> Any:
    """The matplotlib Figure :func:`plot_analysis` writes (for tests and notebooks)."""
    axis = x_axis(analysis, x, span_tokens=furthest(analysis))
    with LOCK:
        return _draw(analysis, axis, name)


def _draw(analysis: Analysis, axis: XAxis, name: str | None) -> Any:
    history, smoothed = analysis.history, analysis.smoothed
    fig = figure()
    ax = fig.add_subplot()
    tokens = np.maximum(history.tokens, history.batch[0])  # log axis: step 0 sits one batch in
    fit_start = tokens[min(np.searchsorted(history.step, analysis.fit_start_step), len(tokens) - 1)]
    # Start a little before the fit: the first steps' loss says nothing about the forecast.
    x_min = max(tokens[0], 0.5 * fit_start)
    rows = decimated(tokens, history.loss, smoothed)  # on tokens: the same rows serve either axis
    raw = _raw_loss(ax, axis.x(tokens[rows]), history.loss[rows], sparse=int(np.sum(tokens >= x_min)) <= _SPARSE)
    ax.plot(axis.x(tokens[rows]), smoothed[rows], color="tab:blue", lw=1.8, label=axis.smoothed, zorder=2)
    x_max = _fit_curve(ax, analysis, axis, tokens, fit_start)
    set_x_limits(ax, axis.log, float(axis.x(x_min)), float(axis.x(max(x_max, tokens[-1]))), open_top(analysis))
    frame_loss(ax, [smoothed[history.step >= analysis.fit_start_step]], [t.target for t in analysis.targets])
    _drop_unseen(ax, raw, smoothed[rows])
    curves = list(ax.lines)  # the labels and their pointers keep clear of these
    _stages(ax, analysis, axis, x_min)
    plan_x = _plan_end(ax, analysis, axis)
    labels = _targets(ax, analysis, axis)
    axis.format(ax)
    ax.set_xlabel(axis.label)
    ax.set_ylabel(analysis.loss_key)  # its unit is the logger's: nothing here knows it
    ax.set_title(_title(analysis, name), fontsize=10, y=1.0)  # at its place: matplotlib would look for top ticks to move it over
    grid(ax)
    outside_legend(ax)
    for text in ax.texts:
        text.set_in_layout(False)  # inside the axes, placed after the layout: they must not move the axes
    lay_out(fig)
    # The labels on their own lines first: each has one place to be, at the left edge.
    labels.sort(key=lambda label: label.arrow_patch is not None)
    place_labels(ax, labels, [t.xy for t in labels], plan_x, curves=curves)
    keep_layout(fig)  # the layout is done (the labels are out of it)
    return fig


# A log with at most this many rows in view draws its raw loss as points: a line through
# a hundred eval losses lies under the smoothed one, which is the same curve at that
# density, and would be listed in the legend without being seen.
_SPARSE = 200
_SEEN = 8.0  # pixels: a line drawn shorter than this in the axes is not drawn at all
_APART = 1.0  # pixels: a raw loss line never further than this from the smoothed one is hidden under it


def _raw_loss(ax: Any, x: np.ndarray, loss: np.ndarray, sparse: bool) -> Any:
    """The raw loss: points above the smoothed curve where the log is sparse, else a thin
    grey line beneath it."""
    if sparse:
        (line,) = ax.plot(x, loss, ls="none", marker="o", ms=2.5, color="0.45", label="loss (raw)", zorder=3)
    else:
        (line,) = ax.plot(x, loss, color="0.72", lw=0.8, label="loss (raw)", zorder=1)
    return line


def _drop_unseen(ax: Any, raw: Any, smoothed: np.ndarray) -> None:
    """Remove what would be listed in the legend without being seen: a line shorter than
    :data:`_SEEN` pixels in the axes (a forecast from the run's last row to a planned end
    just after it), and a raw loss line hidden under the smoothed one."""
    for line in list(ax.lines):
        if line.get_linestyle() in ("None", "none", "") or line.get_label().startswith("_"):
            continue
        if _seen_length(ax, line) < _SEEN:
            line.remove()
    if raw.axes is not None and raw.get_linestyle() not in ("None", "none", ""):
        x = np.asarray(raw.get_xdata(), float)
        low, high = sorted(ax.get_xlim())
        view = (x >= low) & (x <= high)
        gap = _pixels(ax, x[view], np.asarray(raw.get_ydata(), float)[view]) - _pixels(ax, x[view], smoothed[view])
        if not view.any() or np.nanmax(np.abs(gap[:, 1])) <= _APART:
            raw.remove()


def _pixels(ax: Any, x: Any, y: Any) -> np.ndarray:
    return np.asarray(ax.transData.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)])))


def _seen_length(ax: Any, line: Any) -> float:
    """How long ``line`` is inside the axes, in pixels (its points inside the limits)."""
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    inside = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
    if inside.sum() < 2:
        return 0.0
    points = _pixels(ax, x[inside], y[inside])
    return float(np.sum(np.hypot(*np.diff(points, axis=0).T)))


def _title(analysis: Analysis, name: str | None = None) -> str:
    model = ""
    if analysis.selection is not None:
        model = f" | model: {analysis.selection.chosen}" + (" (auto)" if analysis.config.model == "auto" else "")
    return f"{run_title(analysis.run, name)}\nfit from step {analysis.fit_start_step} ({analysis.fit_start_reason}){model}"


def _plan_end(ax: Any, analysis: Analysis, axis: XAxis) -> float | None:
    """A dotted line where the planned run ends, when the plan says and it is in the frame; its x."""
    end = plan_end_tokens(analysis)
    if end is None:
        return None
    x = float(axis.x(end))
    low, high = ax.get_xlim()
    if not low <= x <= high:
        return None
    ax.axvline(x, color="0.3", ls=":", lw=1, label="planned end")
    return x


def _stages(ax: Any, analysis: Analysis, axis: XAxis, x_min: float) -> None:
    if not analysis.dynamic_batch:
        return
    for k, stage in enumerate(analysis.stages):
        if k:
            ax.axvline(float(axis.x(stage.first_tokens)), color="0.5", ls=":", lw=1)
        if stage.last_tokens < x_min:
            continue
        ax.annotate(
            f"batch {stage.batch:,.0f}",
            xy=(float(axis.x(max(stage.first_tokens, x_min))), 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -13),
            textcoords="offset points",
            fontsize=SMALLEST,
            color="0.4",
        )


def _fit_curve(ax: Any, analysis: Analysis, axis: XAxis, tokens: np.ndarray, start: float) -> float:
    """Draw the fitted law over its window and its forecast on to the furthest target; return that x
    (in tokens). Past the log the curve drawn is :func:`forecast_curve`'s."""
    fit = analysis.fit
    x_max = furthest(analysis)
    if fit is None or isinstance(fit, FitFailure):
        return x_max
    inside = np.geomspace(start, tokens[-1], 200)
    ax.plot(axis.x(inside), fit.predict(inside), color="tab:orange", lw=1.3, label=f"{fit.name} fit")
    if x_max > tokens[-1]:
        # Up to the furthest point shown, and never past the plan's end: the run stops there.
        plan_end = plan_end_tokens(analysis)
        beyond, curve = forecast_curve(analysis, x_max if plan_end is None else min(x_max, plan_end))
        label = "forecast" if isinstance(fit, LawFit) else "extrapolation"
        ax.plot(axis.x(beyond), curve, color="tab:orange", lw=1.3, ls="--", label=label)
    return x_max


def _targets(ax: Any, analysis: Analysis, axis: XAxis) -> list[Any]:
    """Each target's line, crossing and interval; return the crossings' labels (placed later)."""
    labels = []
    curve = forecast_curve(analysis, furthest(analysis)) if fitted(analysis) else None
    for k, result in enumerate(analysis.targets):
        color = _COLORS[k % len(_COLORS)]
        ax.axhline(result.target, color=color, lw=0.8, ls="-.", alpha=0.7)
        if result.tokens is None:
            labels.append(_unlocated_label(ax, analysis, axis, result, color))
            continue
        labels.append(_target_mark(ax, analysis, axis, k, result, color, curve))
    return labels


def _unlocated_label(ax: Any, analysis: Analysis, axis: XAxis, result: TargetResult, color: str) -> Any:
    """The label of a target with no place on the axis, on its target line: at the run's end
    for ``not_reached`` and ``unlikely`` (the best smoothed loss, the end, the chance within
    the plan), else at the left edge. No marker: nothing was reached or forecast."""
    lines = [f"{result.target:g} {status_words(result.status)}"]
    if (result.status in (Status.NOT_REACHED, Status.UNLIKELY) and result.end_tokens is not None
            and result.best_loss is not None):
        ends = "ended" if result.run_finished else "ends"
        lines[0] += f", best {result.best_loss:.3f}"
        chance = result.p_reach_within_plan
        within = f", P(within plan) {chance:.2f}" if chance is not None and not result.run_finished else ""
        lines.append(f"the run {ends} at {axis.short(result.end_tokens)}{within}")
    # On its own target line, from the left, where the falling curves leave the low lines
    # clear: no pointer, which would run across the curves to the run's end.
    return crossing_label(ax, "\n".join(lines), (ax.get_xlim()[0], result.target), color, bold=False, pointer=False)


def _target_mark(
    ax: Any, analysis: Analysis, axis: XAxis, k: int, result: TargetResult, color: str, curve: Curve | None
) -> Any:
    """A target's crossing: its marker and interval; return its label."""
    assert result.tokens is not None and result.step is not None
    x, y, off = mark_crossing(ax, axis, analysis, result, color, curve)
    lines = [f"{result.target:g} {status_words(result.status)}", axis.text(result.tokens, result.step)]
    if off is not None:
        lines.append(f"the curve at {off:.3f} here")
    warning = warning_line(analysis, result)
    if warning is not None:
        lines.append(warning)
    if result.tokens_interval is not None:
        interval_band(ax, axis, analysis, k, color)
    return crossing_label(ax, "\n".join(lines), (x, y), color, bold=warning is not None)
