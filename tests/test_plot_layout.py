"""Plots that read right, checked on the drawn artists (not pixels): the bundled runs and
synthetic runs of 30, 300 and 30,000 rows, on tokens and on their clock.

- the forecast starts where the smoothed loss ends;
- each target's marker lies on its target line, at the target's tokens;
- the time axis says its unit, and the drawn x is in that unit;
- no label overlaps a curve or another label (boxes from the renderer);
- a forecast's interval is a filled band of real width and height;
- the x axis's right third is not empty;
- nothing is drawn past the planned end as a forecast for a ``not_reached`` or ``unlikely`` target.

The cases are those benchmarks/make_doc_plots.py draws into docs/plots/.
"""

from __future__ import annotations

import math
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot import analysis_figure
from tracker_plugin.report.plot_axis import x_axis
from tracker_plugin.report.plot_parts import furthest, plan_end_tokens

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import make_doc_plots as doc  # noqa: E402 - the script that draws docs/plots/

BUNDLED = [p.stem for p in doc.RUNS]
# The 30-row log's forecast is the costliest to fit (its law barely pinned): with --all.
_SLOW_ROWS = 30


def _synthetic(rows: int, *rest: str) -> object:
    marks = [pytest.mark.slow] if rows == _SLOW_ROWS else []
    return pytest.param(f"synthetic-{rows}", *rest, marks=marks, id="-".join((f"synthetic-{rows}", *rest)))


CASES = [(name, "tokens") for name in BUNDLED] + [_synthetic(rows, x) for rows in doc.SIZES for x in ("tokens", "time")]


@cache
def analysis_of(name: str) -> Analysis:
    if name.startswith("synthetic-"):
        return doc.synthetic(int(name.split("-")[1]))
    return doc.bundled(ROOT / "examples" / "runs" / f"{name}.csv")


@cache
def drawn(name: str, x: str) -> tuple:
    fig = analysis_figure(analysis_of(name), x=x)
    fig.canvas.draw()
    return fig, fig.axes[0]


def _labels(ax, analysis: Analysis) -> list:
    """The targets' labels: the annotations whose first word is a target."""
    targets = {f"{t.target:g}" for t in analysis.targets}
    return [t for t in ax.texts if t.get_text().split(" ")[0] in targets]


def _centre(band) -> float:
    """The height a filled band is drawn at: the middle of its vertices."""
    ys = band.get_paths()[0].vertices[:, 1]
    return float((ys.min() + ys.max()) / 2)


def _forecast(ax):
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    return dashed[0] if dashed else None


def _to_px(ax, x, y):
    return ax.transData.transform(np.column_stack([np.asarray(x, float), np.asarray(y, float)]))


@pytest.mark.parametrize(("name", "x"), CASES)
def test_the_forecast_starts_where_the_smoothed_loss_ends(name: str, x: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, x)
    line = _forecast(ax)
    if line is None:
        assert all(not t.status.forecast for t in analysis.targets)
        return
    smoothed = [line for line in ax.lines if line.get_label().startswith("loss (") and "EMA" in line.get_label()][0]
    end = _to_px(ax, smoothed.get_xdata()[-1:], smoothed.get_ydata()[-1:])[0]
    start = _to_px(ax, line.get_xdata()[:1], line.get_ydata()[:1])[0]
    assert np.hypot(*(end - start)) < 1.0  # within a pixel
    assert float(line.get_ydata()[0]) == pytest.approx(float(analysis.smoothed[-1]), abs=1e-9)


@pytest.mark.parametrize(("name", "x"), CASES)
def test_each_marker_lies_on_its_target_line_at_its_tokens(name: str, x: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, x)
    axis = x_axis(analysis, x, span_tokens=furthest(analysis))
    markers = [line for line in ax.lines if line.get_marker() in ("o", "D") and line.get_label() != "loss (raw)"]
    located = [t for t in analysis.targets if t.status.located]
    assert len(markers) == len(located)
    timing = analysis.timing
    for marker, result in zip(markers, located):
        assert float(marker.get_ydata()[0]) == result.target
        k = analysis.targets.index(result)
        seconds = None if timing is None else timing.targets[k].seconds
        where = axis.at_seconds(seconds) if x == "time" and seconds is not None else float(axis.x(result.tokens))
        assert float(marker.get_xdata()[0]) == pytest.approx(where, rel=1e-6)
        lines = [line for line in ax.lines if line.get_linestyle() == "-." and float(line.get_ydata()[0]) == result.target]
        assert lines, f"no target line at {result.target}"


@pytest.mark.parametrize("name", [_synthetic(rows) for rows in doc.SIZES])
def test_the_time_axis_says_its_unit_and_draws_in_it(name: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, "time")
    label = ax.get_xlabel()
    unit = 60.0 if "(minutes)" in label else 3600.0 if "(hours)" in label else None
    assert unit is not None, label
    history = analysis.history
    raw = next(line for line in ax.lines if line.get_label() == "loss (raw)")
    seconds = np.asarray(history.time, float) - history.time_start
    drawn_x = np.asarray(raw.get_xdata(), float)
    assert drawn_x[-1] == pytest.approx(seconds[-1] / unit, rel=1e-9)
    # Minutes for a plot under two hours, else hours: 0.05 h says nothing at a glance.
    span = ax.get_xlim()[1] * unit / 3600.0
    assert (unit == 60.0) == (span < 2.0 * 1.2)  # the frame runs a little past the last point
    # Every time a label says is in the axis's unit.
    for text in _labels(ax, analysis):
        words = text.get_text()
        assert (" min" in words) == (unit == 60.0) or not words.split("\n")[1:], words


def _curve_paths(ax):
    return [line.get_transform().transform_path(line.get_path()) for line in ax.lines
            if line.get_label() in ("loss (raw)",) or "EMA" in line.get_label() or "fit" in line.get_label()
            or line.get_linestyle() == "--"]


@pytest.mark.parametrize(("name", "x"), CASES)
def test_no_label_overlaps_a_curve_or_another_label(name: str, x: str) -> None:
    from matplotlib.text import Text

    fig, ax = drawn(name, x)
    renderer = fig.canvas.get_renderer()
    labels = _labels(ax, analysis_of(name))
    assert len(labels) == len(analysis_of(name).targets)
    boxes = [Text.get_window_extent(t, renderer) for t in labels]
    paths = _curve_paths(ax)
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    for k, (text, box) in enumerate(zip(labels, boxes)):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, text.get_text()
        assert not box.overlaps(legend)
        assert not any(path.intersects_bbox(box, filled=False) for path in paths), text.get_text()
        assert not any(box.overlaps(other) for other in boxes[k + 1:]), text.get_text()


@pytest.mark.parametrize(("name", "x"), CASES)
def test_an_interval_is_a_visible_filled_band(name: str, x: str) -> None:
    analysis = analysis_of(name)
    fig, ax = drawn(name, x)
    renderer = fig.canvas.get_renderer()
    for result in analysis.targets:
        if result.tokens_interval is None or not result.status.forecast:
            continue
        low, high = result.tokens_interval
        if math.isfinite(high) and high / low < 1.01:
            continue  # a trivial interval may be thin
        bands = [c for c in ax.collections
                 if _centre(c) == pytest.approx(result.target, abs=1e-9)]
        assert len(bands) == 1, result.target
        box = bands[0].get_window_extent(renderer)
        assert box.width >= 3.0 and box.height >= 3.0, (result.target, box)


@pytest.mark.parametrize(("name", "x"), CASES)
def test_the_right_third_is_not_empty(name: str, x: str) -> None:
    _, ax = drawn(name, x)
    x0, x1 = ax.get_xlim()
    to_share = (lambda v: (np.log(v) - np.log(x0)) / (np.log(x1) - np.log(x0))) if ax.get_xscale() == "log" else (
        lambda v: (v - x0) / (x1 - x0))
    data = [float(np.nanmax(np.asarray(line.get_xdata(), float))) for line in ax.lines
            if line.get_linestyle() in ("-", "--") and len(line.get_xdata()) > 1]
    assert max(to_share(v) for v in data) >= 2 / 3


@pytest.mark.parametrize(("name", "x"), CASES)
def test_nothing_is_forecast_past_the_planned_end_for_a_target_not_reached(name: str, x: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, x)
    missed = [t for t in analysis.targets if t.status in (Status.NOT_REACHED, Status.UNLIKELY)]
    for result in missed:
        assert result.tokens is None and result.tokens_interval is None
        assert not [line for line in ax.lines if line.get_marker() in ("o", "D") and float(line.get_ydata()[0]) == result.target]
        assert not [c for c in ax.collections
                    if _centre(c) == pytest.approx(result.target, abs=1e-9)]
    end = plan_end_tokens(analysis)
    line = _forecast(ax)
    if missed and end is not None and line is not None:
        axis = x_axis(analysis, x, span_tokens=furthest(analysis))
        assert float(np.max(line.get_xdata())) <= float(axis.x(end)) * (1 + 1e-9)


def test_the_bundled_finished_runs_say_not_reached_below_their_best() -> None:
    for name in BUNDLED:
        analysis = analysis_of(name)
        low = analysis.targets[-1]
        assert low.status == Status.NOT_REACHED and low.run_finished, (name, low)
        assert low.best_loss == pytest.approx(float(np.min(analysis.smoothed)), abs=1e-12)
        assert low.p_reach_within_plan == 0.0


# -- what a laptop screen and MLflow's compare view show ------------------------------------

COMPARE_WIDTH = 580  # px: each run's plot in MLflow's compare view at 1440x900
LEGIBLE = 9.0  # px: the smallest text height that still reads at that width
SEEN = 8.0  # px: a line shorter than this inside the axes is not seen


def _seen(ax, line) -> float:
    """How long a line is inside the axes, in pixels."""
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    inside = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
    points = _to_px(ax, x[inside], y[inside])
    if line.get_linestyle() in ("None", "none", ""):
        return float(len(points)) * SEEN  # points drawn as markers: each is seen
    return float(np.sum(np.hypot(*np.diff(points, axis=0).T))) if len(points) > 1 else 0.0


@pytest.mark.parametrize(("name", "x"), CASES)
def test_the_legend_lists_only_what_is_drawn_and_seen(name: str, x: str) -> None:
    _, ax = drawn(name, x)
    listed = [t.get_text() for t in ax.get_legend().get_texts()]
    lines = {line.get_label(): line for line in ax.lines}
    bands = {c.get_label() for c in ax.collections}
    for label in listed:
        if label in bands:
            continue
        assert label in lines, (label, sorted(lines))
        line = lines[label]
        if label == "planned end":  # a vertical line in axes height: drawn inside the x-limits
            low, high = sorted(ax.get_xlim())
            assert low <= float(line.get_xdata()[0]) <= high
            continue
        assert _seen(ax, line) >= SEEN, (label, _seen(ax, line))
    # The raw loss is seen: points above the smoothed curve, or a line that parts from it.
    raw, smoothed = lines.get("loss (raw)"), next(line for line in ax.lines if "EMA" in line.get_label())
    if raw is not None and raw.get_linestyle() not in ("None", "none", ""):
        xs = np.asarray(raw.get_xdata(), float)
        low, high = sorted(ax.get_xlim())
        view = (xs >= low) & (xs <= high)
        gap = _to_px(ax, xs[view], np.asarray(raw.get_ydata(), float)[view])[:, 1] - _to_px(
            ax, xs[view], np.asarray(smoothed.get_ydata(), float)[view])[:, 1]
        assert np.max(np.abs(gap)) > 1.0, name
    elif raw is not None:
        assert raw.get_zorder() > smoothed.get_zorder()
    assert "EMA of the fit" not in " ".join(listed)


@pytest.mark.parametrize(("name", "x"), CASES)
def test_no_pointer_crosses_a_curve(name: str, x: str) -> None:
    fig, ax = drawn(name, x)
    paths = _curve_paths(ax)
    pointers = [t.arrow_patch for t in ax.texts if t.arrow_patch is not None and t.arrow_patch.get_visible()]
    for arrow in pointers:
        drawn_path = arrow.get_path()  # in display coordinates once drawn
        assert not any(path.intersects_path(drawn_path, filled=False) for path in paths), name
    # The labels of targets with no place on the axis stand on their own lines: no pointer.
    unplaced = {f"{t.target:g}" for t in analysis_of(name).targets if t.tokens is None}
    for text in _labels(ax, analysis_of(name)):
        if text.get_text().split(" ")[0] in unplaced:
            assert text.arrow_patch is None


@pytest.mark.parametrize(("name", "x"), CASES)
def test_the_curve_from_the_fit_start_fills_the_axes(name: str, x: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, x)
    low, high = ax.get_ylim()
    after = analysis.smoothed[analysis.history.step >= analysis.fit_start_step]
    assert low <= float(np.min(after)) and float(np.max(after)) <= high  # the whole curve from the fit start
    smoothed = next(line for line in ax.lines if "EMA" in line.get_label())
    xs, ys = np.asarray(smoothed.get_xdata(), float), np.asarray(smoothed.get_ydata(), float)
    inside = (ys >= low) & (ys <= high) & (xs >= min(ax.get_xlim()))
    frame = ax.get_window_extent()
    first = float(_to_px(ax, xs[inside][:1], ys[inside][:1])[0, 0])
    assert (first - frame.x0) / frame.width <= 0.2, name  # no empty left part: the curve starts near the edge


@pytest.mark.parametrize(("name", "x"), CASES)
def test_an_interval_band_stops_at_the_planned_end(name: str, x: str) -> None:
    analysis = analysis_of(name)
    _, ax = drawn(name, x)
    end = plan_end_tokens(analysis)
    if end is None:
        return
    axis = x_axis(analysis, x, span_tokens=furthest(analysis))
    for band in ax.collections:
        right = float(band.get_paths()[0].vertices[:, 0].max())
        assert right <= float(axis.x(end)) * (1 + 1e-9), (name, band.get_label())


@pytest.mark.parametrize(("name", "x"), CASES)
def test_every_text_reads_at_the_compare_views_width(name: str, x: str) -> None:
    fig, ax = drawn(name, x)
    scale = COMPARE_WIDTH / (fig.get_figwidth() * fig.dpi)
    texts = [*fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))]
    shown = [t for t in texts if t.get_visible() and t.get_text().strip()]
    assert len(shown) > 10
    for text in shown:
        height = text.get_fontsize() * fig.dpi / 72.0 * scale
        assert height >= LEGIBLE, (text.get_text()[:40], round(height, 1))


@pytest.mark.parametrize(("name", "x"), CASES)
def test_every_text_and_the_legend_lie_inside_the_figure_clear_of_the_axes(name: str, x: str) -> None:
    """The axes are placed from the sizes of the texts around them (no layout engine):
    the tick labels, axis labels, title and legend all lie inside the figure, and the
    legend right of the axes."""
    fig, ax = drawn(name, x)
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    # An axis's box: the tick labels it draws (those in view) and its label.
    boxes = [ax.xaxis.get_tightbbox(renderer), ax.yaxis.get_tightbbox(renderer), ax.title.get_window_extent(renderer)]
    legend = ax.get_legend().get_window_extent(renderer)
    for box in [*boxes, legend]:
        assert page.x0 - 0.5 <= box.x0 and box.x1 <= page.x1 + 0.5, (name, box)
        assert page.y0 - 0.5 <= box.y0 and box.y1 <= page.y1 + 0.5, (name, box)
    frame = ax.get_window_extent(renderer)
    assert legend.x0 >= frame.x1
    assert frame.width >= 0.6 * page.width and frame.height >= 0.6 * page.height  # the axes keep most of the page
