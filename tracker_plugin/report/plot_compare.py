"""Several runs' smoothed losses overlaid on one axis, with their crossings and forecasts.

Drawn with the single-run plot's pieces (:mod:`.plot_parts`): the same forecast curve
and the markers on the target lines, interval bands and arrows, WARNING lines, label placement, tick
formats and legend outside the axes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.report.plot_axis import NoClock, XAxis, x_axis
from tracker_plugin.report.plot_parts import (
    LOCK,
    OVERLAY,
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
    plot_format,
    printable,
    save,
    set_x_limits,
    short,
    warning_line,
)

__all__ = ["clockless", "comparison_figure", "plot_comparison"]

# Ten colours told apart at a glance (matplotlib's tab10, minus grey, which the key uses).
_RUN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
               "tab:olive", "tab:cyan", "black")


def clockless(analyses: Sequence[tuple[str, Analysis]]) -> list[str]:
    """The names of the runs whose log has no clock to plot against."""
    missing = []
    for name, analysis in analyses:
        try:
            x_axis(analysis, "time")
        except NoClock:
            missing.append(name)
    return missing


def plot_comparison(
    analyses: Sequence[tuple[str, Analysis]],
    path: str | os.PathLike[str] | BinaryIO,
    left_out: Sequence[str] = (),
    *,
    x: str = "tokens",
) -> None:
    """Overlay several runs' smoothed losses, with their crossings and forecasts.

    Each run gets a colour; on the target's line, a circle is a crossing the smoothed loss
    made, a diamond a forecast (read from the dashed forecast curve, a dotted tick joining
    them where they part); a filled band at the target's height the forecast's interval
    (ending in an arrow when open at the top; the runs' bands at one target stacked apart). ``x`` is "tokens" (log scale) or
    "time": each run on hours since its own first logged row (:class:`NoClock` for a run
    without a clock; :func:`clockless` names them). ``left_out`` names the runs that could
    not be analysed; the figure says so under its title.
    """
    plot_format(path)
    axes = [x_axis(a, x, unit="hours") for _, a in analyses]
    with LOCK:
        save(_draw(analyses, axes, x, left_out), path)


def comparison_figure(
    analyses: Sequence[tuple[str, Analysis]], left_out: Sequence[str] = (), *, x: str = "tokens"
) -> Any:
    """The matplotlib Figure :func:`plot_comparison` writes (for tests and notebooks)."""
    axes = [x_axis(a, x, unit="hours") for _, a in analyses]
    with LOCK:
        return _draw(analyses, axes, x, left_out)


def _draw(analyses: Sequence[tuple[str, Analysis]], axes: Sequence[XAxis], kind: str, left_out: Sequence[str]) -> Any:
    fig = figure(OVERLAY)
    ax = fig.add_subplot()
    targets = sorted({t.target for _, a in analyses for t in a.targets}, reverse=True)
    lows, highs, ends, losses, runs = [], [], [], [], []
    for k, ((name, analysis), axis) in enumerate(zip(analyses, axes, strict=True)):
        color = _RUN_COLORS[k % len(_RUN_COLORS)]
        line, low, high, end, loss = _curves(ax, analysis, axis, color, f"{short(printable(name))}{_batch_words(analysis)}")
        runs.append(line)
        ends.append(end)
        lows.append(low)
        highs.append(high)
        losses.append(loss)
    if analyses:
        frame_loss(ax, losses, targets or [float(np.min(np.concatenate(losses)))])
        top = ax.get_ylim()[1]
        # From where the first run's smoothed loss comes into the frame.
        enters = [float(axis.x(_first_below(a, top))) for (_, a), axis in zip(analyses, axes, strict=True)]
        start = min(max(enter, low) for enter, low in zip(enters, lows, strict=True))  # drawn from its fit start
        log = axes[0].log
        low = start * 0.8 if log else min(start, 0.0)
        # Up to the furthest forecast and a little past: a wide interval's far end would
        # squeeze every run into the left of the frame, so its band ends in an arrow.
        reach = max(highs)
        high = min(max(ends), reach) * 1.5 if log else min(max(ends) + 0.5 * (max(ends) - low), reach)
        set_x_limits(ax, log, low, max(high, max(ends)), any(open_top(a) for _, a in analyses) or high < reach)
    labels = []
    lifts = _band_lifts(analyses)
    for k, ((_, analysis), axis) in enumerate(zip(analyses, axes, strict=True)):
        labels += _crossings(ax, analysis, axis, _RUN_COLORS[k % len(_RUN_COLORS)], lifts[k])
    names = _target_lines(ax, targets)
    if axes:
        axes[0].format(ax)
    ax.set_xlabel(_x_label(axes, kind))
    ax.set_ylabel(_common(axes, "smoothed", "loss (EMA)"))
    ax.set_title(_title(analyses, axes, kind, left_out), fontsize=10, y=1.0)  # at its place: no top ticks to move it over
    grid(ax)
    outside_legend(ax, [*runs, *_key_handles(analyses)])
    lay_out(fig)
    for label in labels:
        label.set_in_layout(False)  # inside the axes: placing them must not move the axes again
    place_labels(ax, labels, [t.xy for t in labels], avoid=names, curves=ax.lines)
    keep_layout(fig)  # the layout is done (the labels are out of it)
    return fig


def _curves(
    ax: Any, analysis: Analysis, axis: XAxis, color: str, label: str
) -> tuple[Any, float, float, float, np.ndarray]:
    """A run's smoothed loss from its fit start and the forecast past its log (dashed); return
    its line, the x its curve starts at, the furthest x it could show (interval ends too),
    the x of its log's end or furthest crossing, and its loss after the fit start."""
    history = analysis.history
    tokens = np.maximum(history.tokens, history.batch[0])
    after = history.step >= analysis.fit_start_step
    start = int(np.argmax(after)) if after.any() else 0
    rows = start + decimated(tokens[start:], analysis.smoothed[start:])
    (line,) = ax.plot(axis.x(tokens[rows]), analysis.smoothed[rows], color=color, lw=1.6, label=label)
    end = furthest(analysis)
    if fitted(analysis) and end > tokens[-1]:
        beyond, curve = forecast_curve(analysis, end * 1.1)
        ax.plot(axis.x(beyond), curve, color=color, lw=1.2, ls="--")
    forecasts = [t.tokens for t in analysis.targets if t.tokens is not None]
    last = float(axis.x(max([float(tokens[-1]), *forecasts])))
    return line, float(axis.x(tokens[start])), float(axis.x(end)), last, analysis.smoothed[start:]


def _band_lifts(analyses: Sequence[tuple[str, Analysis]]) -> list[dict[float, float]]:
    """Per run, per target, the slot its interval band is lifted to (in band heights, see
    :func:`interval_band`): the bands of the runs with one at a target are stacked, apart,
    centred on the target line."""
    lifts: list[dict[float, float]] = [{} for _ in analyses]
    for target in {t.target for _, a in analyses for t in a.targets}:
        banded = [k for k, (_, a) in enumerate(analyses)
                  if any(t.target == target and t.tokens_interval is not None for t in a.targets)]
        for j, k in enumerate(banded):
            lifts[k][target] = (len(banded) - 1) / 2 - j
    return lifts


def _crossings(ax: Any, analysis: Analysis, axis: XAxis, color: str, lifts: dict[float, float]) -> list[Any]:
    """A run's markers, intervals and labels (placed later): its name is in the legend, its
    colour on each mark."""
    labels = []
    curve = forecast_curve(analysis, furthest(analysis) * 1.1) if fitted(analysis) else None
    for j, result in enumerate(analysis.targets):
        if result.tokens is None:
            continue
        x, y, off = mark_crossing(ax, axis, analysis, result, color, curve)
        # Short: the marker's shape says reached or forecast, the legend which run.
        lines = [f"{result.target:g}: {axis.short(result.tokens)}"]
        if off is not None:
            lines.append(f"curve at {off:.3f} here")
        warning = warning_line(analysis, result)
        if warning is not None:
            lines.append(warning.split(" (")[0])  # the warn factor is in the key
        if result.tokens_interval is not None:
            # Each run's band a little apart from the others': at one target they would overlap.
            interval_band(ax, axis, analysis, j, color, slot=lifts.get(result.target, 0.0), say_open=False)
        labels.append(crossing_label(ax, "\n".join(lines), (x, y), color, bold=warning is not None))
    return labels


def _target_lines(ax: Any, targets: Sequence[float]) -> list[Any]:
    """A grey dotted line per target, named at the left; return the names (labels keep clear of them)."""
    names = []
    for target in targets:
        ax.axhline(target, color="0.35", lw=0.8, ls=":")
        # On a white ground: a curve through the name would make it unreadable.
        names.append(ax.annotate(f"target {target:g}", xy=(0.005, target), xycoords=("axes fraction", "data"),
                                 xytext=(0, 3), textcoords="offset points", fontsize=8, color="0.3", zorder=6,
                                 bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8}))
    return names


def _x_label(axes: Sequence[XAxis], kind: str) -> str:
    if kind == "time":
        return "hours since each run's first logged row"
    return _common(axes, "label", "tokens (steps for the runs on steps)")


def _common(axes: Sequence[XAxis], name: str, mixed: str) -> str:
    """What every run's axis says as ``name`` (its label, its smoothing), or ``mixed`` when
    they differ (runs on tokens beside runs on steps)."""
    said = {getattr(axis, name) for axis in axes}
    return said.pop() if len(said) == 1 else mixed


def _title(analyses: Sequence[tuple[str, Analysis]], axes: Sequence[XAxis], kind: str, left_out: Sequence[str]) -> str:
    import textwrap

    # At most two lines of names (about as many characters as the title's width holds).
    names = textwrap.wrap(", ".join(printable(name) for name, _ in analyses), 85, break_on_hyphens=False)
    if len(names) > 2:
        names = [names[0], names[1][:82] + "..."]
    on_steps = bool(axes) and all(axis.on_steps for axis in axes)
    what = "hours" if kind == "time" else "steps" if on_steps else "tokens"
    lines = [*(names or ["no runs could be analysed"]), f"{what} to each target, runs side by side"]
    if left_out:
        shown = ", ".join(short(printable(name), 30) for name in left_out[:5]) + (" ..." if len(left_out) > 5 else "")
        lines.append(f"left out, could not be analysed ({len(left_out)}): {shown}")
    return "\n".join(lines)


def _first_below(analysis: Analysis, level: float) -> float:
    """The tokens where a run's smoothed loss first comes under ``level`` (its last, if never)."""
    tokens = np.maximum(analysis.history.tokens, analysis.history.batch[0])
    below = np.flatnonzero(analysis.smoothed <= level)
    return float(tokens[below[0]] if len(below) else tokens[-1])


def _batch_words(analysis: Analysis) -> str:
    """``  (batch 524,288)``, ``  (batch 262,144->1,048,576)``; nothing on steps (a batch of 1)."""
    if x_axis(analysis, "tokens").steps:
        return ""
    first, last = analysis.stages[0].batch, analysis.stages[-1].batch
    return f"  (batch {last:,.0f})" if not analysis.dynamic_batch else f"  (batch {first:,.0f}->{last:,.0f})"


def _key_handles(analyses: Sequence[tuple[str, Analysis]]) -> list[Any]:
    """What the marks mean, drawn in grey so they read apart from the runs' colours."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    first = next((a for _, a in analyses), None)
    level = first.config.interval if first is not None else 0.8
    warn = first.config.extrapolation_warn_factor if first is not None else None
    handles = [
        Line2D([], [], marker="o", color="0.3", ls="none", label="reached (smoothed loss crossed)"),
        Line2D([], [], marker="D", color="0.3", ls="none", label="forecast, on the target's line"),
        Line2D([], [], color="0.3", ls="--", label="forecast curve (EMA of the fit)"),
        Patch(color="0.3", alpha=0.3, lw=0, label=f"{level:.0%} interval (arrow: it goes on past the frame)"),
    ]
    if any(t.beyond_warn_factor for _, a in analyses for t in a.targets):
        handles.append(Line2D([], [], marker="D", color="0.3", markeredgecolor="black", markeredgewidth=2,
                              ls="none", label=f"past the warn factor ({warn:g}x)"))
    return handles
