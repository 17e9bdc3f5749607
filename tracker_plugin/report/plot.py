"""Plot an analysis on the token axis (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.models.schedule_law import LawFit
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot_axis import XAxis, x_axis

__all__ = ["PLOT_FORMATS", "analysis_figure", "decimated", "forecast_curve", "plot_analysis", "plot_comparison", "plot_format"]

# What matplotlib's Agg, PDF and SVG backends write, by file extension.
PLOT_FORMATS = ("png", "pdf", "svg")
# Columns of the log token axis the curves are binned into: about twice the figure's
# pixel columns, so a bin's min and max draw what every row would have drawn.
_BINS = 2048

# matplotlib's text layout (mathtext, font cache) is not thread-safe: one plot at a time.
_LOCK = threading.Lock()

_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")


def _figure() -> Any:
    """A figure with its own Agg canvas: no pyplot state, so threads can plot at once."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 6), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def plot_format(path: str | os.PathLike[str] | BinaryIO) -> str:
    """The format a plot path's extension names (png for a file object or no extension).

    Raises ValueError for an extension matplotlib is not asked to write here.
    """
    if hasattr(path, "write"):
        return "png"
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if not suffix:
        return "png"
    if suffix not in PLOT_FORMATS:
        raise ValueError(f"cannot write a .{suffix} plot; use .png, .pdf or .svg")
    return suffix


def decimated(x: np.ndarray, *ys: np.ndarray, bins: int = _BINS) -> np.ndarray:
    """Rows that draw the same curves as all of them: each log-x bin's first, last, min and max.

    ``x`` is positive and non-decreasing. A plot of millions of rows then costs a few
    thousand points, and no spike is lost.
    """
    n = len(x)
    if n <= 4 * bins:
        return np.arange(n)
    edges = np.geomspace(x[0], x[-1], bins + 1)[1:-1]
    starts = np.flatnonzero(np.r_[True, np.diff(np.searchsorted(edges, x, side="right")) != 0])
    ends = np.r_[starts[1:], n]
    keep = [starts, ends - 1]
    for y in ys:
        for reduce in (np.minimum, np.maximum):
            extreme = np.repeat(reduce.reduceat(y, starts), ends - starts)
            hit = np.flatnonzero(y == extreme)  # every row at its bin's extreme: keep one per bin
            _, first = np.unique(np.searchsorted(starts, hit, "right"), return_index=True)
            keep.append(hit[first])
    return np.unique(np.concatenate(keep))


def plot_analysis(
    analysis: Analysis,
    path: str | os.PathLike[str] | BinaryIO,
    *,
    x: str = "tokens",
    name: str | None = None,
) -> None:
    """Write a plot: raw and smoothed loss, batch stages, targets, crossings and the fit.

    The format is the extension's (see :func:`plot_format`): PNG, PDF or SVG. ``x`` is
    "tokens" (a log scale, which shows the logged run and an extrapolation several times
    longer in one picture) or "time": hours on the run's clock, the forecast converted
    with the measured throughput (:class:`NoClock` when the log has none). ``name`` is
    what people call the run (a tracker's run name), shown before its reference.
    """
    fmt = plot_format(path)
    axis = x_axis(analysis, x)
    with _LOCK:
        fig = _draw(analysis, axis, name)
        # The title in the file's own metadata too: a tracker's artifact viewer lists it.
        title = fig.axes[0].get_title().replace("\n", " | ")
        fig.savefig(path if hasattr(path, "write") else os.fspath(path), format=fmt, metadata={"Title": title})


def analysis_figure(analysis: Analysis, *, x: str = "tokens", name: str | None = None) -> Any:
    """The matplotlib Figure :func:`plot_analysis` writes (for tests and notebooks)."""
    axis = x_axis(analysis, x)
    with _LOCK:
        return _draw(analysis, axis, name)


def _draw(analysis: Analysis, axis: XAxis, name: str | None) -> Any:
    history, smoothed = analysis.history, analysis.smoothed
    fig = _figure()
    ax = fig.add_subplot()
    tokens = np.maximum(history.tokens, history.batch[0])  # log axis: step 0 sits one batch in
    fit_start = tokens[min(np.searchsorted(history.step, analysis.fit_start_step), len(tokens) - 1)]
    # Start a little before the fit: the first steps' loss says nothing about the forecast.
    x_min = max(tokens[0], 0.5 * fit_start)
    rows = decimated(tokens, history.loss, smoothed)  # on tokens: the same rows serve either axis
    ax.plot(axis.x(tokens[rows]), history.loss[rows], color="0.72", lw=0.8, label="loss (raw)")
    ax.plot(axis.x(tokens[rows]), smoothed[rows], color="tab:blue", lw=1.8, label="loss (token-window EMA)")
    x_max = _fit_curve(ax, analysis, axis, tokens, fit_start)
    # An interval open at the top needs room past the furthest forecast for its arrow.
    room = 0.25 if any(t.tokens_interval and not np.isfinite(t.tokens_interval[1]) for t in analysis.targets) else 0.05
    if axis.log:
        ax.set_xscale("log")
        ax.set_xlim(x_min, max(x_max, tokens[-1]) * (1.1 + 2 * room))
    else:
        low, high = float(axis.x(x_min)), float(axis.x(max(x_max, tokens[-1])))
        ax.set_xlim(low, high + room * (high - low or 1.0))
    _ylim(ax, analysis)
    _stages(ax, analysis, axis, x_min)
    plan_x = _plan_end(ax, analysis, axis)
    labels = _targets(ax, analysis, axis)
    axis.format(ax)
    ax.set_xlabel(axis.label)
    ax.set_ylabel(analysis.loss_key)
    ax.set_title(_title(analysis, name), fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    # Outside the axes: inside, it hid the labels of targets drawn under it.
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    for line in legend.get_lines():  # the raw loss's thin grey line vanished at legend size
        line.set_linewidth(max(line.get_linewidth(), 2.0))
    fig.tight_layout()
    _place_labels(ax, labels, [t.xy for t in labels], plan_x)
    return fig


def _title(analysis: Analysis, name: str | None = None) -> str:
    run = analysis.run if not name or name == analysis.run else f"{name}  ({analysis.run})"
    run = _printable(run)
    run = run if len(run) <= 90 else "..." + run[-87:]
    model = ""
    if analysis.selection is not None:
        model = f" | model: {analysis.selection.chosen}" + (" (auto)" if analysis.config.model == "auto" else "")
    return f"{run}\nfit from step {analysis.fit_start_step} ({analysis.fit_start_reason}){model}"


def _plan_end(ax: Any, analysis: Analysis, axis: XAxis) -> float | None:
    """A dotted line where the planned run ends, when the plan says; its x."""
    fit = analysis.fit
    timeline = getattr(fit, "timeline", None)
    if timeline is None or timeline.plan_end is None:
        return None
    x = float(axis.x(float(timeline.tokens_at(timeline.plan_end))))
    ax.axvline(x, color="0.3", ls=":", lw=1, label="planned end")
    return x


# Where a target's label may go around its marker, in points, tried in this order:
# (dx, dy, horizontal alignment, vertical alignment); then the same moved left of the
# planned-end line.
_PLACES = tuple(
    (dx, dy, "left" if dx > 0 else "right", "bottom" if dy > 0 else "top")
    for dy in (6, -6, 24, -24, 42, -42, 64, -64, 90, 120, 150)
    for dx in (6, -6)
)


def _place_labels(ax: Any, labels: Sequence[Any], markers: Sequence[tuple[float, float]], avoid_x: float | None) -> None:
    """Put each target's label where it stays in the axes, clear of the labels placed before
    it, of the markers and of the planned-end line: the first such place, else the first
    place inside the axes."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    line_px = None if avoid_x is None else float(ax.transData.transform((avoid_x, ax.get_ylim()[0]))[0])
    taken = [Bbox.from_extents(px - 5, py - 5, px + 5, py + 5) for px, py in ax.transData.transform(markers)]
    to_points = 72.0 / ax.figure.dpi

    def at(text: Any, place: tuple[float, float, str, str]) -> Any:
        text.xyann = place[:2]
        text.set_horizontalalignment(place[2])
        text.set_verticalalignment(place[3])
        text.update_positions(renderer)
        return Text.get_window_extent(text, renderer)  # the words, not the line to the marker

    for text in labels:
        places = list(_PLACES)
        if line_px is not None:  # last resort: the whole label left of the line
            anchor = float(ax.transData.transform(text.xy)[0])
            if anchor > line_px:
                shift = (line_px - 4 - anchor) * to_points
                places += [(shift, dy, "right", va) for _, dy, _, va in _PLACES[1::2]]
        fallback = None
        for place in places:
            box = at(text, place)
            if not (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1):
                continue
            fallback = fallback or place
            crosses = line_px is not None and box.x0 - 2 <= line_px <= box.x1 + 2
            if not crosses and not any(box.overlaps(other) for other in taken):
                break
        else:
            at(text, fallback or _PLACES[1])
        text.update_positions(renderer)
        taken.append(Text.get_window_extent(text, renderer))


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
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=7,
            color="0.4",
        )


def _fit_curve(ax: Any, analysis: Analysis, axis: XAxis, tokens: np.ndarray, start: float) -> float:
    """Draw the fitted law over its window and its forecast on to the furthest target; return that x.

    Past the log the curve drawn is the one the forecasts are read from: for a
    schedule-aware law the law's token-window EMA (what the smoothed loss is compared
    with), not its raw loss, which levels off lower.
    """
    fit = analysis.fit
    forecasts = [t.tokens for t in analysis.targets if t.status == Status.EXTRAPOLATED and t.tokens]
    highs = [t.tokens_interval[1] for t in analysis.targets if t.tokens_interval and np.isfinite(t.tokens_interval[1])]
    x_max = max([tokens[-1], *forecasts, *highs])
    if fit is None or isinstance(fit, FitFailure):
        return x_max
    inside = np.geomspace(start, tokens[-1], 200)
    ax.plot(axis.x(inside), fit.predict(inside), color="tab:orange", lw=1.3, label=f"{fit.name} fit")
    if x_max > tokens[-1]:
        beyond, curve = forecast_curve(analysis, x_max * 1.1)
        label = "forecast (EMA of the fit)" if isinstance(fit, LawFit) else "extrapolation"
        ax.plot(axis.x(beyond), curve, color="tab:orange", lw=1.3, ls="--", label=label)
    return x_max


def forecast_curve(analysis: Analysis, end: float) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, loss)`` of the forecast from the log's last row to ``end`` tokens."""
    fit = analysis.fit
    assert fit is not None and not isinstance(fit, FitFailure)
    last = float(np.maximum(analysis.history.tokens, analysis.history.batch[0])[-1])
    if isinstance(fit, LawFit):
        steps, curve = fit.smoothed()
        at = np.asarray(fit.timeline.tokens_at(steps), float)
        keep = (at >= last) & (at <= end)
        if keep.sum() >= 2:
            return at[keep], np.asarray(curve, float)[keep]
    beyond = np.geomspace(last, end, 200)
    return beyond, fit.predict(beyond)


def _targets(ax: Any, analysis: Analysis, axis: XAxis) -> list[Any]:
    """Each target's line, crossing and interval; return the crossings' labels (placed later)."""
    labels = []
    curve = None
    if analysis.fit is not None and not isinstance(analysis.fit, FitFailure):
        curve = forecast_curve(analysis, max([t.tokens or 0.0 for t in analysis.targets] + [1.0]) * 1.1)
    for k, result in enumerate(analysis.targets):
        color = _COLORS[k % len(_COLORS)]
        ax.axhline(result.target, color=color, lw=0.8, ls="-.", alpha=0.7)
        if result.tokens is None:
            ax.annotate(
                f"{result.target:g}: {result.status}",
                xy=(0.01, result.target),
                xycoords=("axes fraction", "data"),
                xytext=(0, 3),
                textcoords="offset points",
                fontsize=8,
                color=color,
            )
            continue
        labels.append(_target_mark(ax, analysis, axis, k, result, color, curve))
    return labels


def _target_mark(
    ax: Any,
    analysis: Analysis,
    axis: XAxis,
    k: int,
    result: TargetResult,
    color: str,
    curve: tuple[np.ndarray, np.ndarray] | None,
) -> Any:
    """A target's crossing: its marker and interval; return its label."""
    assert result.tokens is not None
    x = float(axis.x(result.tokens))
    y = result.target
    lines = [f"{result.target:g} {result.status}", f"{axis.text(result.tokens)}, step {result.step:,.0f}"]
    if result.status == Status.EXTRAPOLATED and curve is not None and len(curve[0]) >= 2:
        # The point forecast is the median crossing of the fitted curve plus the loss's
        # fluctuations: the curve itself may level off just above the target. The marker
        # sits on the curve, and a tick joins it to the target line.
        on_curve = float(np.interp(result.tokens, curve[0], curve[1]))
        low, high = ax.get_ylim()
        if abs(on_curve - y) > 0.01 * (high - low):  # only where the eye sees the gap
            ax.plot([x, x], [y, on_curve], color=color, lw=1, ls=":")
            lines.append(f"curve at {on_curve:.3f} here (median crossing with noise)")
        y = on_curve
    marker = "o" if result.status == Status.REACHED else "D"
    warn = result.beyond_warn_factor and result.extrapolation_factor is not None
    ax.plot([x], [y], marker=marker, color=color, ms=7, ls="none", zorder=4,
            markeredgecolor="black" if warn else color, markeredgewidth=2 if warn else 1)
    if warn:
        assert result.extrapolation_factor is not None
        lines.append(
            f"WARNING: {result.extrapolation_factor:.2f}x past the log "
            f"(beyond the warn factor {analysis.config.extrapolation_warn_factor:g}x)"
        )
    if result.tokens_interval is not None:
        _interval(ax, analysis, axis, k, result, color)
    return ax.annotate(
        "\n".join(lines), xy=(x, y), xytext=(6, 6), textcoords="offset points", fontsize=8, color=color,
        fontweight="bold" if warn else "normal", zorder=5,
        # A label moved away from its marker keeps a thin line to it.
        arrowprops={"arrowstyle": "-", "color": color, "lw": 0.6, "alpha": 0.6, "shrinkA": 0, "shrinkB": 4},
    )


def _interval(ax: Any, analysis: Analysis, axis: XAxis, k: int, result: TargetResult, color: str) -> None:
    """The forecast's interval as a band at the target; an open top ends in an arrow, not at the edge."""
    assert result.tokens_interval is not None
    lo, hi = result.tokens_interval
    level: str | None = f"{analysis.config.interval:.0%} interval"
    if any(line.get_label() == level for line in ax.lines):  # one legend entry, from the first band
        level = None
    left, right = float(axis.x(lo)), float(axis.x(hi)) if np.isfinite(hi) else math.inf
    timed = analysis.timing.targets[k] if analysis.timing is not None and k < len(analysis.timing.targets) else None
    if axis.kind == "time" and timed is not None and timed.seconds_interval is not None:
        # The report's hours: the forecast's interval widened by the throughput's spread.
        left, right = (v / 3600.0 for v in timed.seconds_interval)
    if np.isfinite(right):
        ax.plot([left, right], [result.target] * 2, color=color, lw=4, alpha=0.35,
                solid_capstyle="butt", label=level)
        return
    # Open at the top: the band stops short of the edge and ends in an arrow, so it
    # reads as going on, not as ending where the axes do.
    x0, x1 = ax.get_xlim()

    def along(share: float) -> float:
        if axis.log:
            return float(np.exp(np.log(x0) + share * (np.log(x1) - np.log(x0))))
        return x0 + share * (x1 - x0)

    end = max(along(0.95), left)
    ax.plot([left, end], [result.target] * 2, color=color, lw=4, alpha=0.35, solid_capstyle="butt", label=level)
    ax.annotate("", xy=(along(0.995), result.target), xytext=(end, result.target),
                arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.5, "alpha": 0.6})
    ax.annotate("no upper bound", xy=(end, result.target), xytext=(0, -11), textcoords="offset points",
                fontsize=7, color=color, ha="right")


def _ylim(ax: Any, analysis: Analysis) -> None:
    """Frame the loss after the fit start: the first steps' loss would flatten the rest."""
    history = analysis.history
    after = analysis.smoothed[history.step >= analysis.fit_start_step]
    if len(after) < 2:
        return
    targets = [t.target for t in analysis.targets]
    low = min(float(after.min()), *targets)
    # A lagging EMA (or a loss still falling fast) starts far above the targets: frame
    # the targets, as the comparison plot does, not the first steps after the fit start.
    top = max(targets)
    high = min(float(np.percentile(after, 99)), top + 2.0 * max(top - low, 0.05 * abs(top)))
    high = max(high, top)
    pad = 0.08 * (high - low or 1.0)
    ax.set_ylim(low - pad, high + pad)


_RUN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
               "tab:gray", "tab:olive", "tab:cyan")


def plot_comparison(
    analyses: Sequence[tuple[str, Analysis]],
    path: str | os.PathLike[str] | BinaryIO,
    left_out: Sequence[str] = (),
) -> None:
    """Overlay several runs' smoothed losses on one token axis, with their forecasts.

    Each run gets a colour; each target a marker shape. A solid curve is the logged
    (smoothed) loss, its dashed continuation the fitted law out to the forecast, and a
    bar at the target's height the forecast's interval. ``left_out`` names the runs that
    could not be analysed; the figure says so under its title.
    """
    fmt = plot_format(path)
    with _LOCK:
        _draw_comparison(analyses, path, fmt, left_out)


def _draw_comparison(
    analyses: Sequence[tuple[str, Analysis]], path: str | os.PathLike[str] | BinaryIO, fmt: str, left_out: Sequence[str]
) -> None:
    fig = _figure()
    ax = fig.add_subplot()
    targets = sorted({t.target for _, a in analyses for t in a.targets}, reverse=True)
    lows, highs, x_lo, x_hi = [], [], [], []
    for k, (name, analysis) in enumerate(analyses):
        color = _RUN_COLORS[k % len(_RUN_COLORS)]
        history = analysis.history
        tokens = np.maximum(history.tokens, history.batch[0])
        after = history.step >= analysis.fit_start_step
        start = int(np.argmax(after)) if after.any() else 0
        label = f"{_short(_printable(name))}  (batch {_batch_text(analysis)})"
        rows = start + decimated(tokens[start:], analysis.smoothed[start:])
        ax.plot(tokens[rows], analysis.smoothed[rows], color=color, lw=1.6, label=label)
        x_lo.append(tokens[start])
        x_hi.append(tokens[-1])
        lows.append(float(np.min(analysis.smoothed[start:])))
        highs.append(float(np.percentile(analysis.smoothed[start:], 95)))
        forecasts = [t.tokens for t in analysis.targets if t.status == Status.EXTRAPOLATED and t.tokens]
        fit = analysis.fit
        if forecasts and fit is not None and not isinstance(fit, FitFailure):
            end = max(forecasts)
            beyond = np.geomspace(tokens[-1], end, 100)
            ax.plot(beyond, fit.predict(beyond), color=color, lw=1.2, ls="--")
        for result in analysis.targets:
            if result.tokens is None:
                continue
            filled = result.status == Status.REACHED
            ax.plot([result.tokens], [result.target], marker="o", ms=7, ls="none", color=color,
                    markerfacecolor=color if filled else "white", markeredgewidth=1.5, zorder=3)
            x_hi.append(result.tokens)
            if result.tokens_interval is not None:
                lo, hi = result.tokens_interval
                if not np.isfinite(hi):  # unbounded: draw the band to the furthest forecast
                    hi = max(result.tokens * 2, lo)
                ax.plot([lo, hi], [result.target] * 2, color=color, lw=5, alpha=0.3, solid_capstyle="butt")
                x_hi.append(hi)
    for target in targets:
        ax.axhline(target, color="0.35", lw=0.8, ls=":")
        ax.annotate(f"target {target:g}", xy=(0.005, target), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize=8, color="0.3")
    ax.set_xscale("log")
    if x_lo:
        # Frame the targets: the early loss of a run (or its lagging EMA) would flatten them.
        low = min(lows + targets)
        top = max(targets) if targets else max(highs)
        high = min(max(highs), top + 1.5 * max(top - low, 0.05 * abs(top)))
        pad = 0.06 * (high - low or 1.0)
        ax.set_ylim(low - pad, high + pad)
        enters = [_first_below(a, high + pad) for _, a in analyses]
        ax.set_xlim(min([*enters, *x_hi]) * 0.8, max(x_hi) * 1.2)
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss (token-window EMA)")
    title = "Tokens to each target, runs side by side"
    if left_out:
        names = ", ".join(_short(_printable(name), 30) for name in left_out[:5]) + (" ..." if len(left_out) > 5 else "")
        title += f"\nleft out, could not be analysed ({len(left_out)}): {names}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    runs_legend = ax.legend(loc="upper right", fontsize=8, title="run", title_fontsize=8)
    ax.add_artist(runs_legend)
    ax.legend(handles=_key_handles(analyses), loc="lower left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path if hasattr(path, "write") else os.fspath(path), format=fmt)


def _printable(name: str) -> str:
    """A run name with control characters escaped, and matplotlib's mathtext ($) defused."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name).replace("$", r"\$")


def _first_below(analysis: Analysis, level: float) -> float:
    """The tokens where a run's smoothed loss first comes under ``level`` (its last, if never)."""
    tokens = np.maximum(analysis.history.tokens, analysis.history.batch[0])
    below = np.flatnonzero(analysis.smoothed <= level)
    return float(tokens[below[0]] if len(below) else tokens[-1])


def _batch_text(analysis: Analysis) -> str:
    first, last = analysis.stages[0].batch, analysis.stages[-1].batch
    return f"{last:,.0f}" if not analysis.dynamic_batch else f"{first:,.0f}->{last:,.0f}"


def _key_handles(analyses: Sequence[tuple[str, Analysis]]) -> list[Any]:
    """What the marks mean, drawn in grey so they read apart from the runs' colours."""
    from matplotlib.lines import Line2D

    level = next((a.config.interval for _, a in analyses), 0.8)
    return [
        Line2D([], [], marker="o", color="0.3", ls="none", label="reached (smoothed loss crossed)"),
        Line2D([], [], marker="o", color="0.3", markerfacecolor="white", ls="none", label="forecast"),
        Line2D([], [], color="0.3", ls="--", label="fitted law beyond the log"),
        Line2D([], [], color="0.3", lw=5, alpha=0.3, label=f"{level:.0%} interval of the forecast"),
    ]


def _short(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."
