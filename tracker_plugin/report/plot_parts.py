"""The pieces both plots draw with: one run's (:mod:`.plot`) and the overlay of several
(:mod:`.plot_compare`). matplotlib is imported only inside them, when a plot is drawn.

Each piece takes an :class:`~tracker_plugin.report.plot_axis.XAxis`, so it lands on the
token axis or the run's clock alike.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.analysis import Analysis, TargetResult
from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.models.schedule_law import LawFit
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot_axis import XAxis

__all__ = [
    "BAND_HEIGHT",
    "LOCK",
    "OVERLAY",
    "SINGLE",
    "SMALLEST",
    "PLOT_FORMATS",
    "Curve",
    "crossing_label",
    "decimated",
    "figure",
    "fitted",
    "forecast_curve",
    "frame_loss",
    "furthest",
    "grid",
    "interval_band",
    "mark_crossing",
    "open_top",
    "outside_legend",
    "plan_end_tokens",
    "place_labels",
    "plot_format",
    "printable",
    "run_title",
    "save",
    "set_x_limits",
    "short",
    "status_words",
    "warning_line",
]

# What matplotlib's Agg, PDF and SVG backends write, by file extension.
PLOT_FORMATS = ("png", "pdf", "svg")
# An interval band's height, as a share of the loss axis: visible at any scale, thin
# enough that the bands of targets close together stay apart.
BAND_HEIGHT = 0.02
# Between two runs' bands at one target (stacked by ``interval_band``'s slot): this share
# of a band's height, so they read as two rows.
_BAND_GAP = 0.25
# Columns of the log token axis the curves are binned into: about twice the figure's
# pixel columns, so a bin's min and max draw what every row would have drawn.
_BINS = 2048
# One run's plot, in inches at ``_DPI``: 836 px wide, so that shown 580 px wide (MLflow's
# compare view puts two side by side on a laptop) its smallest text (:data:`SMALLEST`
# points) is still 9.5 px tall; the overlay of many runs keeps a larger canvas.
SINGLE = (7.6, 4.75)
OVERLAY = (10.0, 6.0)
_DPI = 110
SMALLEST = 9  # points: no text on a plot is smaller

# matplotlib's text layout (mathtext, font cache) is not thread-safe: one plot at a time.
LOCK = threading.Lock()

Curve = tuple[np.ndarray, np.ndarray]  # (tokens, loss)


def figure(size: tuple[float, float] = SINGLE) -> Any:
    """A figure with its own Agg canvas: no pyplot state, so threads can plot at once. No
    layout engine: :func:`lay_out` places the axes once."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=_DPI)
    canvas = FigureCanvasAgg(fig)
    _share_renderer(canvas)
    return fig


# One Agg renderer per thread and canvas size, shared by the figures drawn there in turn:
# matplotlib keeps the sizes of texts it has laid out per renderer, so a renderer of
# each figure's own laid out every tick label and title afresh.
_RENDERERS = threading.local()


def _share_renderer(canvas: Any) -> None:
    from matplotlib.backends.backend_agg import RendererAgg

    width, height = canvas.get_width_height(physical=True)
    key = (width, height, canvas.figure.dpi)
    shared = getattr(_RENDERERS, "by_size", None)
    if shared is None:
        shared = _RENDERERS.by_size = {}
    if key not in shared:
        shared[key] = RendererAgg(width, height, canvas.figure.dpi)
    canvas.renderer, canvas._lastKey = shared[key], key  # what get_renderer checks before making one


# Pixels between the figure's edge and the outermost text (a tick label, the title, the legend).
_EDGE = 5.0


def lay_out(fig: Any) -> None:
    """Place each axes so that its tick labels, axis labels, title and legend (outside the
    axes, on the right) fit in the figure, from the sizes of their texts.

    A layout engine found these by drawing the axes' decorations twice over, and savefig
    drew them once more (constrained layout was about 40% of a plot's CPU); the sizes
    of a few texts are all it needs. The labels inside the axes are left out (they are
    placed afterwards, in the axes placed here).
    """
    import matplotlib as mpl
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    points = fig.dpi / 72.0
    for ax in fig.axes:
        legend = ax.get_legend()
        title = ax.title.get_window_extent(renderer).height if ax.get_title() else 0.0
        top = title + mpl.rcParams["axes.titlepad"] * points + _EDGE
        xlabel, ylabel = (axis.label.get_window_extent(renderer) for axis in (ax.xaxis, ax.yaxis))
        below = _tick_room(ax.xaxis, renderer, "height")
        bottom = below + xlabel.height + _EDGE
        right = _EDGE + (legend.get_window_extent(renderer).width if legend else 0.0)
        # The y tick labels are those of the axes' final height (the locator picks as many as fit).
        ax.set_position(Bbox.from_extents(0.1, bottom / height, 1 - right / width, 1 - top / height))
        aside = _tick_room(ax.yaxis, renderer, "width")
        left = aside + ylabel.width + _EDGE
        right += 0.01 * (width - left - right)  # the legend's anchor: 1.01 of the axes' width
        ax.set_position(Bbox.from_extents(left / width, bottom / height, 1 - right / width, 1 - top / height))
        # The axis labels where matplotlib would put them, past the tick labels: placed, it
        # does not measure every tick label again to find that place when it draws.
        ax.xaxis.set_label_coords(0.5, -below / (height - bottom - top))
        ax.yaxis.set_label_coords(-aside / (width - left - right), 0.5)


def _tick_room(axis: Any, renderer: Any, side: str) -> float:
    """Pixels from the axes' edge to the far side of ``axis``'s tick labels and the axis
    label's pad: the tick, its pad, the widest (or tallest) label in view."""
    low, high = sorted(axis.get_view_interval())
    ticks = [t for t in axis.get_major_locator()() if low <= t <= high]
    formatter = axis.get_major_formatter()
    texts = [text for text in formatter.format_ticks(ticks) if text]
    major = axis.majorTicks[0]
    points = axis.figure.dpi / 72.0
    size = 0.0
    # matplotlib's line of text is as tall as "lp" at least (a descender and an ascender)
    for text in texts + (["lp"] if side == "height" else []):
        w, h, _ = renderer.get_text_width_height_descent(text, major.label1.get_fontproperties(), ismath=False)
        size = max(size, w if side == "width" else h)
    return size + (major.get_tick_padding() + major.get_pad() + axis.labelpad) * points


def keep_layout(fig: Any) -> None:
    """Keep the layout worked out so far (the labels placed in it): saving must not work it
    out again. savefig draws a figure with any layout engine, even matplotlib's placeholder
    for 'none', once more before it draws it to the file; with none at all, it does not."""
    import matplotlib as mpl

    if mpl.rcParams["figure.autolayout"] or mpl.rcParams["figure.constrained_layout.use"]:
        fig.set_layout_engine("none")  # None would bring the user's rc engine back
    else:
        fig.set_layout_engine(None)


def grid(ax: Any) -> None:
    """The grid: at the major ticks, and on a log x axis at 2 to 9 of each decade too, as
    one collection of lines. matplotlib draws a minor grid line as a minor tick, each an
    artist of three lines and two texts: on a log axis eighteen of them were a tenth of a plot."""
    import matplotlib as mpl
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import LogLocator, NullLocator

    ax.grid(True, which="major", alpha=_GRID_ALPHA)
    if ax.get_xscale() != "log":
        return
    low, high = sorted(ax.get_xlim())
    major = np.asarray(ax.xaxis.get_major_locator()(), float)
    minor = [x for x in LogLocator(base=10, subs=tuple(range(2, 10))).tick_values(low, high)
             if low <= x <= high and not np.any(np.isclose(major, x, rtol=1e-9))]  # not twice where a major line is
    ax.xaxis.set_minor_locator(NullLocator())
    lines = LineCollection([[(x, 0.0), (x, 1.0)] for x in minor], transform=ax.get_xaxis_transform(),
                           colors=mpl.rcParams["grid.color"], linewidths=mpl.rcParams["grid.linewidth"],
                           linestyles=mpl.rcParams["grid.linestyle"], alpha=_GRID_ALPHA, zorder=ax.xaxis.get_zorder(),
                           snap=True)  # on whole pixels, as the major grid's lines are
    ax.add_collection(lines, autolim=False)


_GRID_ALPHA = 0.25


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


def save(fig: Any, path: str | os.PathLike[str] | BinaryIO, metadata: dict[str, str] | None = None) -> None:
    """Write ``fig`` in the format the path names, its title in the file's own metadata
    (a tracker's artifact viewer lists it), with ``metadata`` beside it."""
    title = fig.axes[0].get_title().replace("\n", " | ")
    kind = plot_format(path)
    # zlib's fastest level: a third of the time of its default, for a file a third larger.
    fig.savefig(path if hasattr(path, "write") else os.fspath(path), format=kind,
                metadata={"Title": title, **(metadata or {})}, **({"pil_kwargs": {"compress_level": 1}} if kind == "png" else {}))


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


def printable(name: str) -> str:
    """A run name with control characters escaped, and matplotlib's mathtext ($) defused."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name).replace("$", r"\$")


def short(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def run_title(ref: str, name: str | None = None, limit: int = 90) -> str:
    """What a title calls a run: its name, then its reference where that says more."""
    run = printable(ref if not name or name == ref else f"{name}  ({ref})")
    return run if len(run) <= limit else "..." + run[-(limit - 3):]


def fitted(analysis: Analysis) -> bool:
    return analysis.fit is not None and not isinstance(analysis.fit, FitFailure)


def forecast_curve(analysis: Analysis, end: float) -> Curve:
    """``(tokens, loss)`` of the forecast from the log's last row to ``end`` tokens.

    For a schedule-aware law, the law's token-window EMA: the curve the forecasts are
    read from (the smoothed loss is compared with it), not the law's raw loss, which
    levels off lower. It starts where the smoothed loss ends: the smoothed loss's offset
    from the law's at the last row fades as the EMA forgets it (by ``1 - 2/(span + 1)``
    a step), which is what the EMA does with it when the loss follows the law from there.
    """
    tokens, curve = _law_curve(analysis, end)
    history = analysis.history
    offset = float(analysis.smoothed[-1]) - float(curve[0])
    span = analysis.config.ema_token_window / float(history.batch[-1])  # steps
    steps_on = (tokens - tokens[0]) / float(history.batch[-1])
    return tokens, curve + offset * (1.0 - 2.0 / (span + 1.0)) ** steps_on


def _law_curve(analysis: Analysis, end: float) -> Curve:
    """The fitted law's own curve from the log's last row to ``end`` (its EMA for a schedule law)."""
    fit = analysis.fit
    assert fit is not None and not isinstance(fit, FitFailure)
    last = float(np.maximum(analysis.history.tokens, analysis.history.batch[0])[-1])
    if isinstance(fit, LawFit):
        steps, curve = fit.smoothed()
        at, curve = np.asarray(fit.timeline.tokens_at(steps), float), np.asarray(curve, float)
        keep = (at >= last) & (at <= end)
        if keep.sum() >= 2:
            # From the log's last row on, with no gap before the curve's first sample after
            # it (a crossing just past the log sits there).
            head = float(np.interp(last, at, curve))
            return np.r_[last, at[keep]], np.r_[head, curve[keep]]
    beyond = np.geomspace(last, max(end, last * 1.0001), 200)
    return beyond, fit.predict(beyond)


# The planned end is drawn, and the forecast curve runs on to it, when it lies within this
# factor of the furthest point otherwise shown: further, it would leave most of the plot empty.
_PLAN_END_REACH = 4.0


def plan_end_tokens(analysis: Analysis) -> float | None:
    """Where the planned run ends, in tokens (None: no plan with an end, or no law to draw)."""
    timeline = getattr(analysis.fit, "timeline", None)
    if timeline is None or timeline.plan_end is None:
        return None
    return float(timeline.tokens_at(timeline.plan_end))


def furthest(analysis: Analysis) -> float:
    """The furthest tokens a plot of the run shows: its log, forecasts and bounded intervals,
    and the plan's end when it is near (the forecast curve runs on to it)."""
    last = float(np.maximum(analysis.history.tokens, analysis.history.batch[0])[-1])
    forecasts = [t.tokens for t in analysis.targets if t.status.forecast and t.tokens]
    highs = [t.tokens_interval[1] for t in analysis.targets if t.tokens_interval and np.isfinite(t.tokens_interval[1])]
    shown = float(max([last, *forecasts, *highs]))
    end = plan_end_tokens(analysis)
    if end is not None and shown < end <= _PLAN_END_REACH * shown:
        return end
    return shown


def open_top(analysis: Analysis) -> bool:
    """Whether some interval is open at the top (it needs room for its arrow)."""
    return any(t.tokens_interval is not None and not np.isfinite(t.tokens_interval[1]) for t in analysis.targets)


def set_x_limits(ax: Any, log: bool, low: float, high: float, open_top: bool) -> None:
    """x from ``low`` to past ``high`` (in the axis's own units), with room past the
    furthest forecast for an open interval's arrow; log or linear."""
    room = 0.15 if open_top else 0.04  # a share of the axis past ``high``
    if log:
        ax.set_xscale("log")
        top = float(np.exp(np.log(high) + room / (1 - room) * (np.log(high) - np.log(low)))) if high > low else high * 1.1
        ax.set_xlim(low, top)
    else:
        ax.set_xlim(low, high + room / (1 - room) * (high - low or 1.0))


def frame_loss(ax: Any, losses: Sequence[np.ndarray], targets: Sequence[float]) -> None:
    """Frame the smoothed loss from the fit start whole, and the targets: the loss before
    the fit start (the first steps', falling fast) would flatten the rest, and a frame
    that cut the curve from the fit start left the axes' left part empty."""
    losses = [loss[np.isfinite(loss)] for loss in losses]
    losses = [loss for loss in losses if len(loss) >= 2]
    if not losses:
        return
    low = min(min(float(loss.min()) for loss in losses), *targets)
    high = max(max(float(loss.max()) for loss in losses), *targets)
    pad = 0.06 * (high - low or 1.0)
    ax.set_ylim(low - pad, high + pad)


def warning_line(analysis: Analysis, result: TargetResult) -> str | None:
    """The label's WARNING line for a forecast past the warn factor; None otherwise."""
    if not result.beyond_warn_factor or result.extrapolation_factor is None:
        return None
    return f"WARNING: {result.extrapolation_factor:.2f}x past the log, over {analysis.config.extrapolation_warn_factor:g}x"


def mark_crossing(
    ax: Any, axis: XAxis, analysis: Analysis, result: TargetResult, color: str, curve: Curve | None
) -> tuple[float, float, float | None]:
    """A crossing's marker on its target line: a circle where the smoothed loss crossed, a
    diamond for a forecast, black-edged past the warn factor. Returns its ``(x, y)`` and,
    when the forecast's curve is off the target where the eye sees it, the curve's value there.

    The point forecast is the median crossing of the fitted curve plus the loss's
    fluctuations: the curve itself may level off just above the target. The marker sits
    on the target line, and a dotted tick joins it to the curve.
    """
    assert result.tokens is not None
    x, y, off = float(axis.x(result.tokens)), result.target, None
    if result.status.forecast and curve is not None and len(curve[0]) >= 2:
        on_curve = float(np.interp(result.tokens, curve[0], curve[1]))
        low, high = ax.get_ylim()
        if abs(on_curve - y) > 0.01 * (high - low):  # only where the eye sees the gap
            ax.plot([x, x], [y, on_curve], color=color, lw=1, ls=":")
            off = on_curve
    warn = warning_line(analysis, result) is not None
    ax.plot([x], [y], marker="o" if result.status == Status.REACHED else "D", color=color, ms=7, ls="none",
            zorder=4, markeredgecolor="black" if warn else color, markeredgewidth=2 if warn else 1)
    return x, y, off


def status_words(status: Status) -> str:
    """A status as a label says it: the JSON's word, its underscores spaced
    (``not reached``, ``forecast beyond plan``)."""
    return str(status).replace("_", " ")


def crossing_label(ax: Any, text: str, xy: tuple[float, float], color: str, bold: bool, pointer: bool = True) -> Any:
    """A crossing's label, placed later by :func:`place_labels`; a label moved away from its
    marker keeps a thin line to it (``pointer``), one that crosses no curve."""
    arrow = {"arrowstyle": "-", "color": color, "lw": 0.6, "alpha": 0.6, "shrinkA": 0, "shrinkB": _SHRINK}
    return ax.annotate(
        text, xy=xy, xytext=(6, 6), textcoords="offset points", fontsize=SMALLEST, color=color,
        fontweight="bold" if bold else "normal", zorder=5, arrowprops=arrow if pointer else None,
    )


_SHRINK = 5  # points between a pointer's end and its marker (a marker is 3.5 points wide)


def interval_band(
    ax: Any, axis: XAxis, analysis: Analysis, k: int, color: str, *, slot: float = 0.0, say_open: bool = True
) -> None:
    """Target ``k``'s forecast interval as a band at its height (``slot`` band heights and
    a gap above it, so several runs' bands at one target stay apart); an open top ends in an arrow, not
    at the edge, with "no upper bound" beside it when ``say_open``. The first band drawn
    names the level in the legend.
    """
    result = analysis.targets[k]
    assert result.tokens_interval is not None
    lo, hi = result.tokens_interval
    level: str | None = f"{analysis.config.interval:.0%} interval"
    if any(band.get_label() == level for band in ax.collections):  # one legend entry, from the first band
        level = None
    left, right = float(axis.x(lo)), float(axis.x(hi)) if np.isfinite(hi) else math.inf
    timing = analysis.timing
    timed = timing.targets[k] if timing is not None and k < len(timing.targets) else None
    if axis.kind == "time" and timed is not None and timed.seconds_interval is not None:
        # The report's times: the forecast's interval widened by the throughput's spread.
        left, right = (axis.at_seconds(v) for v in timed.seconds_interval)
    plan_end = plan_end_tokens(analysis)
    if plan_end is not None and right > float(axis.x(plan_end)):
        # Clipped at the planned end: the run stops there, and the share of the interval
        # beyond it is the chance the text gives of not reaching the target within the plan.
        right = float(axis.x(plan_end))
        if right <= left:
            return
    at = ax.transData
    low, high = ax.get_ylim()
    half = BAND_HEIGHT / 2 * (high - low)  # a filled band, as tall at any loss scale
    y = result.target + slot * 2.0 * half * (1.0 + _BAND_GAP)

    def band(x_from: float, x_to: float) -> None:
        ax.fill_between([x_from, x_to], [y - half] * 2, [y + half] * 2, color=color, alpha=0.3, lw=0,
                        label=level, transform=at, zorder=3)

    x0, x1 = ax.get_xlim()
    if np.isfinite(right) and right <= x1:
        band(left, right)
        return
    # Open at the top (or going on past the frame): the band stops short of the edge and
    # ends in an arrow, so it reads as going on, not as ending where the axes do.

    def along(share: float) -> float:
        if axis.log:
            return float(np.exp(np.log(x0) + share * (np.log(x1) - np.log(x0))))
        return x0 + share * (x1 - x0)

    end = max(along(0.95), left)
    band(left, end)
    ax.annotate("", xy=(along(0.995), y), xytext=(end, y), xycoords=at, textcoords=at,
                arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.5, "alpha": 0.6})
    if say_open and not np.isfinite(right):
        ax.annotate("no upper bound", xy=(end, y), xycoords=at, xytext=(0, -12), textcoords="offset points",
                    fontsize=SMALLEST, color=color, ha="right")


def outside_legend(ax: Any, handles: Sequence[Any] | None = None) -> Any:
    """The legend right of the axes: inside, it hid the labels of targets drawn under it."""
    kw: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": SMALLEST, "borderaxespad": 0.0}
    legend = ax.legend(**kw) if handles is None else ax.legend(handles=list(handles), **kw)
    for line in legend.get_lines():  # a thin line (the raw loss's grey) vanished at legend size
        line.set_linewidth(max(line.get_linewidth(), 2.0))
    return legend


# Where a target's label may go around its marker, in points, tried in this order:
# (dx, dy, horizontal alignment, vertical alignment); then the same moved left of the
# planned-end line.
_PLACES = tuple(
    (dx, dy, "left" if dx > 0 else "right", "bottom" if dy > 0 else "top")
    # further aside only where nothing near is clear: a label at a finished run's end, where
    # the curves come down to its target, may have to go well left of it
    for dxs in ((6, -6), (40, -40), (120, -120), (240, -240))
    for dy in (6, -6, 24, -24, 42, -42, 64, -64, 90, 120, 150)
    for dx in dxs
)


def place_labels(
    ax: Any,
    labels: Sequence[Any],
    markers: Sequence[tuple[float, float]],
    avoid_x: float | None = None,
    avoid: Sequence[Any] = (),
    curves: Sequence[Any] = (),
) -> None:
    """Put each target's label where it stays in the axes, clear of the labels placed before
    it, of the markers, of the texts ``avoid``, of the lines ``curves`` and of the
    planned-end line at ``avoid_x``, its pointer crossing no curve: the first such place,
    else the first clear of all but the pointer (which is then not drawn), else the first
    clear of all but the curves, else the first place inside the axes."""
    from matplotlib.path import Path
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    paths = [line.get_transform().transform_path(line.get_path()) for line in curves]
    shrink = _SHRINK * ax.figure.dpi / 72.0

    def on_a_curve(box: Any) -> bool:
        return any(path.intersects_bbox(box, filled=False) for path in paths)

    def pointer_crosses(text: Any, box: Any) -> bool:
        """Would the label's pointer (from its box to its marker) cross a curve?"""
        if text.arrow_patch is None:
            return False
        anchor = ax.transData.transform(text.xy)
        centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
        length = float(np.hypot(*(centre - anchor)))
        if length <= shrink:
            return False
        end = anchor + (centre - anchor) * shrink / length
        segment = Path(np.array([centre, end]))
        return any(path.intersects_path(segment, filled=False) for path in paths)

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    line_px = None if avoid_x is None else float(ax.transData.transform((avoid_x, ax.get_ylim()[0]))[0])
    taken = [Bbox.from_extents(px - 5, py - 5, px + 5, py + 5) for px, py in ax.transData.transform(markers)]
    taken += [Text.get_window_extent(text, renderer) for text in avoid]
    to_points = 72.0 / ax.figure.dpi

    def at(text: Any, place: tuple[float, float, str, str]) -> Any:
        text.xyann = place[:2]
        text.set_horizontalalignment(place[2])
        text.set_verticalalignment(place[3])
        text.update_positions(renderer)
        return Text.get_window_extent(text, renderer)  # the words, not the line to the marker

    def boxes(text: Any) -> Callable[[tuple[float, float, str, str]], Any]:
        """The label's box at each place, from its box at one: its size does not change
        with its place (laying the words out at each place cost most of a plot's labels)."""
        first = at(text, _PLACES[0])
        dx, dy, _, _ = _PLACES[0]
        anchor = (first.x0 - dx / to_points, first.y0 - dy / to_points)  # the first place is left, bottom
        width, height = first.width, first.height

        def box(place: tuple[float, float, str, str]) -> Any:
            x = anchor[0] + place[0] / to_points
            y = anchor[1] + place[1] / to_points
            x0 = x if place[2] == "left" else x - width if place[2] == "right" else x - width / 2
            y0 = y if place[3] == "bottom" else y - height if place[3] == "top" else y - height / 2
            return Bbox.from_bounds(x0, y0, width, height)

        return box

    for text in labels:
        box_at = boxes(text)
        places = list(_PLACES)
        if line_px is not None:  # last resort: the whole label left of the line
            anchor = float(ax.transData.transform(text.xy)[0])
            if anchor > line_px:
                shift = (line_px - 4 - anchor) * to_points
                places += [(shift, dy, "right", va) for _, dy, _, va in _PLACES[1:22:2]]
        chosen, inside, clear, off_curves = None, None, None, None
        for place in places:
            box = box_at(place)
            if not (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1):
                continue
            inside = inside or place
            crosses = line_px is not None and box.x0 - 2 <= line_px <= box.x1 + 2
            if crosses or any(box.overlaps(other) for other in taken):
                continue
            clear = clear or place
            if on_a_curve(box):
                continue
            off_curves = off_curves or place
            if not pointer_crosses(text, box):
                chosen = place
                break
        # else the words clear of the curves first; their pointer, if it would cross one, goes
        box = at(text, chosen or off_curves or clear or inside or _PLACES[1])
        if pointer_crosses(text, box):  # no place kept it clear: the label stands without one
            text.arrow_patch.set_visible(False)
        taken.append(box)
