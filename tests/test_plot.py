"""The single-run plot, read back from its matplotlib Figure: what a user sees, checked.

The runs are the bundled nanoGPT example (a forecast whose fitted curve levels off just
above its target, an interval open at the top, a planned end), a dynamic-batch run with
forecasts past the warn factor, a speedrun log with a clock, and an HF run on steps (no tokens).
The overlay of runs on steps is checked here too (the rest of the overlay in test_compare.py).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.cli.entry import main
from tracker_plugin.core.analysis import Analysis, run_analysis
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot import analysis_figure
from tracker_plugin.report.plot_axis import tick_steps, tick_tokens
from tracker_plugin.report.plot_compare import comparison_figure
from tracker_plugin.trackers import ReadOptions
from tracker_plugin.trackers.csvfile import CsvSource

ROOT = Path(__file__).resolve().parents[1]
NANO = ROOT / "examples" / "runs" / "nanogpt-124M-adamw-llmc.csv"
DYNAMIC = ROOT / "tests" / "data" / "parity_dynamic.csv"
CLOCKED = ROOT / "tests" / "data" / "modded-short-2024-11-24_WindowWarmup.csv"


@cache
def nano() -> Analysis:
    """The nanoGPT run cut at 7,000 of its 9,536 steps: a run still going (its lr plan is
    not known to end, so its forecasts are beyond the plan)."""
    return tp.analyze(pd.read_csv(NANO).head(7000), [3.6, 3.3, 3.2], run="nanogpt")


@cache
def dynamic() -> Analysis:
    return tp.analyze(pd.read_csv(DYNAMIC), [3.5, 3.1], run="dynamic")


@cache
def clocked() -> Analysis:
    columns = tp.Columns().with_overrides(loss="val_loss")
    return tp.analyze(pd.read_csv(CLOCKED), [3.5, 3.2], run="modded", columns=columns, batch_size=1,
                      ema_token_window=250)


def _drawn(analysis: Analysis, **kw: str) -> tuple:
    fig = analysis_figure(analysis, **kw)
    fig.canvas.draw()  # lay out the text, as saving does
    return fig, fig.axes[0]


def _labels(ax) -> list:
    """The targets' crossing labels (the annotations with a status in their first line)."""
    return [t for t in ax.texts if re.match(r"^[\d.]+ (reached|forecast|not reached|unreachable)", t.get_text())]


def _centre(band) -> float:
    """The height a filled band is drawn at: the middle of its vertices."""
    ys = band.get_paths()[0].vertices[:, 1]
    return float((ys.min() + ys.max()) / 2)


def _dashed(ax):
    (line,) = [line for line in ax.lines if line.get_linestyle() == "--"]
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _marker_and_curve(analysis: Analysis, target: float) -> tuple[float, float, float, float, list[str]]:
    """The forecast marker's (x, y), the dashed curve's value there, 1% of the y range, and
    the target's label."""
    _, ax = _drawn(analysis)
    x, y = _dashed(ax)
    (marker,) = [line for line in ax.lines if line.get_marker() == "D" and line.get_ydata()[0] == target]
    mx, my = float(marker.get_xdata()[0]), float(marker.get_ydata()[0])
    on_curve = float(np.interp(np.log(mx), np.log(x), y))
    low, high = ax.get_ylim()
    labels = [t.get_text() for t in _labels(ax) if t.get_text().startswith(f"{target:g} ")]
    return mx, my, on_curve, 0.01 * (high - low), labels


def test_the_forecast_marker_sits_on_its_target_line_and_a_visible_gap_to_the_curve_is_said() -> None:
    analysis = nano()
    result = analysis.targets[2]
    assert result.status == Status.FORECAST_BEYOND_PLAN
    mx, my, on_curve, visible, (label,) = _marker_and_curve(analysis, 3.2)
    assert mx == pytest.approx(result.tokens, rel=1e-9)
    assert my == 3.2  # on the target line, where the label's number says
    if abs(on_curve - 3.2) > visible:  # the median crossing with noise, off the mean curve: said
        assert f"curve at {on_curve:.3f}" in label
    else:
        assert "curve at" not in label


def test_a_finished_run_short_of_a_target_draws_no_forecast_for_it() -> None:
    # The whole nanoGPT log reaches its plan's end (the lr at 0): 3.1 is not reached in this run.
    analysis = tp.analyze(pd.read_csv(NANO), [3.3, 3.1], run="nanogpt")
    assert [t.status for t in analysis.targets] == [Status.REACHED, Status.NOT_REACHED]
    _, ax = _drawn(analysis)
    assert not [line for line in ax.lines if line.get_marker() == "D"]
    (label,) = [t.get_text() for t in _labels(ax) if t.get_text().startswith("3.1 ")]
    # A finished run's chance within its plan is nothing to tell: it ran its plan.
    assert label.startswith(f"3.1 not reached, best {analysis.targets[1].best_loss:.3f}") and "P(" not in label


def test_the_raw_loss_has_a_visible_line_in_the_legend() -> None:
    _, ax = _drawn(nano())
    legend = ax.get_legend()
    lines = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.get_lines())}
    raw = lines["loss (raw)"]
    assert raw.get_linewidth() >= 1.5
    assert raw.get_linestyle() == "-"
    from matplotlib.colors import to_rgb

    assert max(to_rgb(raw.get_color())) < 0.85  # not white on white


def test_tokens_are_said_as_the_tables_say_them() -> None:
    _, ax = _drawn(nano())
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "1B" in ticks and "100M" in ticks
    assert all(re.fullmatch(r"\d+(\.\d+)?[KMBT]?", t) for t in ticks), ticks
    texts = " ".join(t.get_text() for t in _labels(ax))
    assert re.search(r"\d\.\d\dB tokens", texts)
    assert "e+" not in texts
    assert tick_tokens(2.5e9) == "2.5B" and tick_tokens(1e8) == "100M" and tick_tokens(2.98e9) == "2.98B"


def test_an_interval_open_at_the_top_stops_short_of_the_edge_and_says_so() -> None:
    analysis = nano()
    low, high = analysis.targets[2].tokens_interval
    assert not np.isfinite(high)
    _, ax = _drawn(analysis)
    bands = [c for c in ax.collections if _centre(c) == pytest.approx(3.2, abs=1e-9)]
    assert len(bands) == 1
    xs = bands[0].get_paths()[0].vertices[:, 0]
    assert xs.min() == pytest.approx(low, rel=1e-9)
    assert np.isfinite(xs).all() and xs.max() < ax.get_xlim()[1] * 0.9
    assert any(t.get_text() == "no upper bound" for t in ax.texts)
    # The first target was reached (no band): the legend still says what a band is.
    assert analysis.targets[0].tokens_interval is None
    assert "80% interval" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_forecast_past_the_warn_factor_is_flagged_on_the_plot() -> None:
    analysis = dynamic()
    flagged = [r for r in analysis.targets if r.beyond_warn_factor]
    assert flagged
    _, ax = _drawn(analysis)
    for result in flagged:
        (label,) = [t for t in _labels(ax) if t.get_text().startswith(f"{result.target:g} ")]
        assert "WARNING" in label.get_text() and "past the log" in label.get_text()
    for result in analysis.targets:
        (label,) = [t for t in _labels(ax) if t.get_text().startswith(f"{result.target:g} ")]
        assert ("WARNING" in label.get_text()) == result.beyond_warn_factor


def test_labels_clear_the_legend_each_other_and_the_planned_end() -> None:
    fig, ax = _drawn(nano())
    renderer = fig.canvas.get_renderer()
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t, renderer) for t in _labels(ax)]
    assert len(boxes) == 3
    legend = ax.get_legend().get_window_extent(renderer)
    plans = [line for line in ax.lines if line.get_label() == "planned end"]
    plan_px = ax.transData.transform((plans[0].get_xdata()[0], 3.3))[0] if plans else -1.0
    frame = ax.get_window_extent(renderer)
    for k, box in enumerate(boxes):
        assert not box.overlaps(legend)
        assert not box.x0 <= plan_px <= box.x1
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert not any(box.overlaps(other) for other in boxes[k + 1:])


def test_the_time_axis_is_hours_on_the_runs_clock() -> None:
    analysis = clocked()
    history = analysis.history
    _, ax = _drawn(analysis, x="time")
    unit = 60.0 if "(minutes)" in ax.get_xlabel() else 3600.0
    assert ("(hours)" in ax.get_xlabel() or unit == 60.0) and ax.get_xscale() == "linear"
    (raw,) = [line for line in ax.lines if line.get_label() == "loss (raw)"]
    hours = (np.asarray(history.time, float) - history.time_start) / unit
    by_loss = dict(zip(np.asarray(raw.get_ydata(), float), np.asarray(raw.get_xdata(), float)))
    for loss, h in zip(history.loss, hours):
        if loss in by_loss:
            assert by_loss[loss] == pytest.approx(h, abs=1e-9)
    assert len(by_loss) == len(history)  # a short log: every row drawn
    assert analysis.timing is not None
    for timed in analysis.timing.targets:
        seconds = timed.seconds
        assert seconds is not None
        marks = [line for line in ax.lines if line.get_marker() in ("o", "D") and line.get_color() != "0.72"]
        assert any(float(m.get_xdata()[0]) == pytest.approx(seconds / unit, rel=1e-6) for m in marks)


def test_a_time_axis_for_a_run_without_a_clock_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    out = tmp_path / "x.png"
    code = main(["analyze", str(NANO), "--target", "3.3", "--plot", str(out), "--x", "time"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "no clock" in err and str(NANO) in err
    assert not out.exists()


def test_the_title_names_the_run_by_its_name() -> None:
    _, ax = _drawn(nano(), name="llmc-124M")
    assert ax.get_title().splitlines()[0] == "llmc-124M  (nanogpt)"
    _, ax = _drawn(nano())
    assert ax.get_title().splitlines()[0] == "nanogpt"


# --- a run with no tokens: the HF trainer_state.json fixture, read with no flags, is on steps

HF_STATE = ROOT / "tests" / "data" / "frameworks" / "hf" / "trainer_state.json"


@cache
def on_steps(rows: int = 25) -> Analysis:
    """The run's first rows (a run still going: the lower target is forecast)."""
    source = CsvSource(str(HF_STATE), ReadOptions(use_cache=False))
    (run,) = source.runs()
    history = source.read(run)
    assert history.on_steps  # no tokens logged, no accumulation recorded
    config = tp.AnalysisConfig(targets=(3.5, 3.1), ema_steps=20)
    return run_analysis(history.head(rows), config)


def _words(ax) -> str:
    legend = ax.get_legend()
    texts = [ax.get_xlabel(), ax.get_ylabel(), ax.get_title(), *(t.get_text() for t in ax.texts),
             *(t.get_text() for t in ax.get_xticklabels()), *(t.get_text() for t in legend.get_texts())]
    return "\n".join(texts)


@pytest.mark.slow
def test_a_run_on_steps_is_plotted_on_steps_and_nothing_says_tokens() -> None:
    analysis = on_steps()
    _, ax = _drawn(analysis)
    assert ax.get_xlabel() == "steps" and ax.get_xscale() == "log"
    assert "token" not in _words(ax).lower()
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "100" in ticks and all(re.fullmatch(r"[\d,]+", t) for t in ticks), ticks
    # The x of a crossing is its step: the label and the marker say the same number.
    for result in analysis.targets:
        (label,) = [t for t in _labels(ax) if t.get_text().startswith(f"{result.target:g} ")]
        assert label.get_text().splitlines()[1] == f"step {result.step:,.0f}"
    (marker,) = [line for line in ax.lines if line.get_marker() == "D"]
    assert float(marker.get_xdata()[0]) == pytest.approx(analysis.targets[1].step, rel=1e-9)
    assert "loss (step-window EMA)" in [t.get_text() for t in ax.get_legend().get_texts()]


@pytest.mark.slow
def test_the_overlay_of_runs_on_steps_says_steps() -> None:
    fig = comparison_figure([("early", on_steps(20)), ("later", on_steps(25))])
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_xlabel() == "steps" and ax.get_ylabel() == "loss (step-window EMA)"
    assert ax.get_title().splitlines()[-1] == "steps to each target, runs side by side"
    assert "token" not in _words(ax).lower()
    # Beside a run on tokens, the axis says which is which.
    mixed = comparison_figure([("steps", on_steps(25)), ("tokens", nano())])
    assert "steps" in mixed.axes[0].get_xlabel() and "tokens" in mixed.axes[0].get_xlabel()


def test_step_ticks_are_counted_as_the_text_report_counts_steps() -> None:
    assert tick_steps(50) == "50" and tick_steps(5000) == "5,000" and tick_steps(200000) == "200,000"
    assert tick_steps(2e6) == "2M"
