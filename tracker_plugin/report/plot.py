"""Plot an analysis on the token axis (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.status import Status

__all__ = ["PLOT_FORMATS", "decimated", "plot_analysis", "plot_comparison", "plot_format"]

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


def plot_analysis(analysis: Analysis, path: str | os.PathLike[str] | BinaryIO) -> None:
    """Write a plot: raw and smoothed loss, batch stages, targets, crossings and the fit.

    The format is the extension's (see :func:`plot_format`): PNG, PDF or SVG. The x axis
    is tokens on a log scale, which shows the logged run and an extrapolation several
    times longer in one picture.
    """
    fmt = plot_format(path)
    with _LOCK:
        _draw(analysis, path, fmt)


def _draw(analysis: Analysis, path: str | os.PathLike[str] | BinaryIO, fmt: str) -> None:
    history, smoothed = analysis.history, analysis.smoothed
    fig = _figure()
    ax = fig.add_subplot()
    tokens = np.maximum(history.tokens, history.batch[0])  # log axis: step 0 sits one batch in
    fit_start = tokens[min(np.searchsorted(history.step, analysis.fit_start_step), len(tokens) - 1)]
    # Start a little before the fit: the first steps' loss says nothing about the forecast.
    x_min = max(tokens[0], 0.5 * fit_start)
    rows = decimated(tokens, history.loss, smoothed)
    ax.plot(tokens[rows], history.loss[rows], color="0.75", lw=0.8, label="loss (raw)")
    ax.plot(tokens[rows], smoothed[rows], color="tab:blue", lw=1.8, label="loss (token-window EMA)")
    _stages(ax, analysis, x_min)
    x_max = _fit_curve(ax, analysis, tokens, fit_start)
    _plan_end(ax, analysis)
    _targets(ax, analysis)
    ax.set_xscale("log")
    ax.set_xlim(x_min, max(x_max, tokens[-1]) * 1.15)
    _ylim(ax, analysis)
    ax.set_xlabel("tokens")
    ax.set_ylabel(analysis.loss_key)
    ax.set_title(_title(analysis), fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path if hasattr(path, "write") else os.fspath(path), format=fmt)


def _title(analysis: Analysis) -> str:
    run = _printable(analysis.run)
    run = run if len(run) <= 70 else "..." + run[-67:]
    model = ""
    if analysis.selection is not None:
        model = f" | model: {analysis.selection.chosen}" + (" (auto)" if analysis.config.model == "auto" else "")
    return f"{run}\nfit from step {analysis.fit_start_step} ({analysis.fit_start_reason}){model}"


def _plan_end(ax: Any, analysis: Analysis) -> None:
    """A dotted line where the planned run ends, when the plan says."""
    fit = analysis.fit
    timeline = getattr(fit, "timeline", None)
    if timeline is None or timeline.plan_end is None:
        return
    ax.axvline(float(timeline.tokens_at(timeline.plan_end)), color="0.3", ls=":", lw=1, label="planned end")


def _stages(ax: Any, analysis: Analysis, x_min: float) -> None:
    if not analysis.dynamic_batch:
        return
    for k, stage in enumerate(analysis.stages):
        if k:
            ax.axvline(stage.first_tokens, color="0.5", ls=":", lw=1)
        if stage.last_tokens < x_min:
            continue
        ax.annotate(
            f"batch {stage.batch:,.0f}",
            xy=(max(stage.first_tokens, x_min), 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=7,
            color="0.4",
        )


def _fit_curve(ax: Any, analysis: Analysis, tokens: np.ndarray, start: float) -> float:
    """Draw the fitted law over its window and on to the furthest forecast; return that x."""
    fit = analysis.fit
    forecasts = [t.tokens for t in analysis.targets if t.status == Status.EXTRAPOLATED and t.tokens]
    highs = [t.tokens_interval[1] for t in analysis.targets if t.tokens_interval and np.isfinite(t.tokens_interval[1])]
    x_max = max([tokens[-1], *forecasts, *highs])
    if fit is None or isinstance(fit, FitFailure):
        return x_max
    inside = np.geomspace(start, tokens[-1], 200)
    beyond = np.geomspace(tokens[-1], x_max * 1.1, 200)
    ax.plot(inside, fit.predict(inside), color="tab:orange", lw=1.3, label=f"{fit.name} fit")
    if x_max > tokens[-1]:
        ax.plot(beyond, fit.predict(beyond), color="tab:orange", lw=1.3, ls="--", label="extrapolation")
    return x_max


def _targets(ax: Any, analysis: Analysis) -> None:
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
        marker = "o" if result.status == Status.REACHED else "D"
        ax.plot([result.tokens], [result.target], marker=marker, color=color, ms=7, ls="none")
        if result.tokens_interval is not None:
            lo, hi = result.tokens_interval
            hi = hi if np.isfinite(hi) else ax.get_xlim()[1]
            level = f"{analysis.config.interval:.0%} interval" if k == 0 else None
            ax.plot([lo, hi], [result.target] * 2, color=color, lw=4, alpha=0.35, solid_capstyle="butt", label=level)
        ax.annotate(
            f"{result.target:g} {result.status}\n{result.tokens:.3g} tok, step {result.step:,.0f}",
            xy=(result.tokens, result.target),
            xytext=(6, 6),
            textcoords="offset points",
            fontsize=8,
            color=color,
        )


def _ylim(ax: Any, analysis: Analysis) -> None:
    """Frame the loss after the fit start: the first steps' loss would flatten the rest."""
    history = analysis.history
    after = analysis.smoothed[history.step >= analysis.fit_start_step]
    if len(after) < 2:
        return
    lows = [float(after.min()), *(t.target for t in analysis.targets)]
    high = float(np.percentile(after, 99))
    low = min(lows)
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
