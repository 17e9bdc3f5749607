"""compare: the table per target, its formats, the overlay plot, and spreadsheet safety."""

from __future__ import annotations

import csv
import io
import json
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.text import Text

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.status import Status
from tracker_plugin.report.compare import spreadsheet_safe
from tracker_plugin.report.plot_compare import comparison_figure

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def arms(tmp_path, data_dir):
    """Three runs at different batch sizes: fixed 524k, three stages 262k->1M, and 786k."""
    for name in ("parity_fixed.csv", "parity_dynamic.csv"):
        shutil.copy(data_dir / name, tmp_path / name)
    (tmp_path / "olmo.csv").write_text(
        (data_dir / "olmo-ladder-370M-5xC.csv").read_text().replace("val_loss", "train_loss")
    )
    return tmp_path


def _compare(capsys, *args):
    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_is_sorted_by_tokens_with_the_best_run_first(capsys, arms):
    code, out, _ = _compare(capsys, arms, "-t", "4.2", "3.5")
    assert code == 0
    blocks = out.split("\n\n")
    assert blocks[0].startswith("target 4.2") and blocks[1].startswith("target 3.5")
    lines = blocks[0].splitlines()
    assert lines[1].split()[:4] == ["run", "batch", "status", "tokens"]
    assert lines[2].split()[0] == "olmo" and lines[2].rstrip().endswith("best")
    assert "dynamic 262,144->1,048,576" in blocks[0]


def test_json_rows_carry_numbers_and_ratios(capsys, arms):
    code, out, _ = _compare(capsys, arms, "-t", "4.2", "--json")
    groups = json.loads(out)
    rows = groups[0]["rows"]
    tokens = [r["tokens"] for r in rows if r["tokens"] is not None]
    assert len(tokens) >= 2 and tokens == sorted(tokens)
    assert all(r["tokens"] is None for r in rows[len(tokens):])  # runs without an answer go last
    assert rows[0]["vs_best"] == 1.0
    assert rows[1]["vs_best"] == pytest.approx(tokens[1] / tokens[0])
    dynamic = next(r for r in rows if r["run"] == "parity_dynamic")
    assert dynamic["dynamic"] is True and dynamic["batch_first"] == 262144 and dynamic["batch_last"] == 1048576


def test_markdown_and_csv(capsys, arms):
    _, md, _ = _compare(capsys, arms, "-t", "4.2", "--markdown")
    assert md.startswith("### target 4.2") and "| run | batch | status |" in md
    _, text, _ = _compare(capsys, arms, "-t", "4.2", "--csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["run"] for r in rows} == {"parity_fixed", "parity_dynamic", "olmo"}
    assert float(rows[0]["tokens"]) > 0


def test_overlay_plot(capsys, arms, tmp_path):
    png = tmp_path / "overlay.png"
    code, _, _ = _compare(capsys, arms, "-t", "4.2", "3.5", "--plot", png)
    assert code == 0 and png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 30_000


def test_a_run_that_fails_is_listed_and_sets_exit_code_1(capsys, arms):
    (arms / "broken.csv").write_text("step,train_loss,global_batch\n0,5,8\n1,four,8\n")  # a loss that is no number
    code, out, err = _compare(capsys, arms, "-t", "4.2")
    assert code == 1
    broken = next(line for line in out.splitlines() if line.startswith("broken"))
    assert "failed" in broken
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["=cmd|' /C calc'!A0", "+1+1", "-2", "@SUM(A1)", "\t=1", "safe"])
def test_spreadsheet_formulas_are_neutralised(name):
    cell = spreadsheet_safe(name)
    assert cell == name if name == "safe" else cell == "'" + name


def test_csv_output_escapes_formula_like_run_names(capsys, arms):
    shutil.copy(arms / "parity_fixed.csv", arms / "=HYPERLINK(1).csv")
    _, text, _ = _compare(capsys, arms, "-t", "4.2", "--csv")
    names = [r["run"] for r in csv.DictReader(io.StringIO(text))]
    assert "'=HYPERLINK(1)" in names
    assert not any(n.startswith(("=", "+", "-", "@")) for n in names)


# -- the overlay plot, read back from its Figure ---------------------------------------------

OVERLAY_TARGETS = (3.6, 3.4, 3.3)


@cache
def ladder() -> list[tuple[str, Analysis]]:
    """Runs of different lengths: 3.6 reached by two, not reached by the shortest (it finished
    just above it); 3.4 reached by the longest, forecast for a cut one (its lr still held:
    beyond the plan); 3.2 not reached by the finished ones, forecast for the cut one."""
    columns = tp.Columns().with_overrides(loss="val_loss")
    runs = [("short", DATA / "olmo-ladder-190M-1xC.csv"), ("long", DATA / "olmo-ladder-370M-5xC.csv")]
    runs.append(("cut", DATA / "olmo-ladder-370M-5xC.csv"))
    out = []
    for name, path in runs:
        frame = pd.read_csv(path)
        if name == "cut":
            frame = frame.iloc[: len(frame) // 6]
        out.append((name, tp.analyze(frame, [3.6, 3.4, 3.2], run=name, columns=columns)))
    return out


@cache
def speedruns() -> list[tuple[str, Analysis]]:
    columns = tp.Columns().with_overrides(loss="val_loss")
    return [
        (name, tp.analyze(pd.read_csv(DATA / f"modded-short-{name}.csv"), list(OVERLAY_TARGETS), run=name,
                          columns=columns, batch_size=1, ema_token_window=250))
        for name in ("2024-11-24_WindowWarmup", "2024-12-10_MFUTweaks")
    ]


def _overlay(analyses, **kw):
    fig = comparison_figure(analyses, **kw)
    fig.canvas.draw()
    return fig, fig.axes[0]


def _markers(ax) -> list:
    return [line for line in ax.lines if line.get_marker() in ("o", "D")]


def test_the_ladder_has_reached_and_forecast_crossings_of_one_target() -> None:
    statuses = {name: a.targets[1].status for name, a in ladder()}
    assert Status.REACHED in statuses.values() and Status.FORECAST_BEYOND_PLAN in statuses.values(), statuses


@pytest.mark.parametrize("kind", ["tokens", "time"])
def test_each_runs_markers_sit_on_their_target_lines_joined_to_their_own_curve(kind: str) -> None:
    """A marker sits on its target's line at the run's crossing; where the run's curve is
    off the line there (a forecast's median crossing), a dotted tick in its colour joins them."""
    analyses = ladder() if kind == "tokens" else speedruns()
    _, ax = _overlay(analyses, x=kind)
    curves = [line for line in ax.lines if line.get_marker() in ("None", "", None) and line.get_linestyle() in ("-", "--")]
    ticks = [line for line in ax.lines if line.get_linestyle() == ":" and len(line.get_xdata()) == 2]
    target_lines = {float(line.get_ydata()[0]) for line in ax.lines
                    if line.get_linestyle() == ":" and to_rgb(line.get_color()) == to_rgb("0.35")}
    colors = [to_rgb(line.get_color()) for line in ax.get_legend().get_lines()[: len(analyses)]]
    assert len(set(colors)) == len(analyses)  # one colour per run
    low, high = ax.get_ylim()
    located = 0
    for color, (_, analysis) in zip(colors, analyses, strict=True):
        mine = [m for m in _markers(ax) if to_rgb(m.get_color()) == color]
        drawn = [r for r in analysis.targets if r.tokens is not None]
        assert len(mine) == len(drawn)
        located += len(drawn)
        own = [c for c in curves if to_rgb(c.get_color()) == color and len(c.get_xdata()) > 2]
        for marker, result in zip(mine, drawn, strict=True):
            mx, my = float(marker.get_xdata()[0]), float(marker.get_ydata()[0])
            assert my == result.target and my in target_lines  # on its target's line
            assert marker.get_marker() == ("o" if result.status == Status.REACHED else "D")
            at = [float(np.interp(mx, c.get_xdata(), c.get_ydata())) for c in own if c.get_xdata()[0] <= mx <= c.get_xdata()[-1]]
            assert at, (analysis.run, mx)
            gap = min(abs(y - my) for y in at)
            if gap < 0.01 * (high - low):  # on the curve as the eye sees it (1% of the loss frame)
                continue
            # Else a dotted tick of its colour from the line to the curve at the marker's x.
            tick = [t for t in ticks if to_rgb(t.get_color()) == color and float(t.get_xdata()[0]) == mx]
            assert tick, (analysis.run, mx, my, gap)
            assert sorted(tick[0].get_ydata())[0] <= my <= sorted(tick[0].get_ydata())[1]
            assert min(abs(y - float(end)) for y in at for end in tick[0].get_ydata()) < 1e-3 * (high - low)
    assert located >= 4


@pytest.mark.parametrize("kind", ["tokens", "time"])
def test_overlay_texts_do_not_overlap_and_stay_in_the_axes(kind: str) -> None:
    analyses = ladder() if kind == "tokens" else speedruns()
    fig, ax = _overlay(analyses, x=kind)
    renderer = fig.canvas.get_renderer()
    texts = [t for t in ax.texts if t.get_text()]
    boxes = [Text.get_window_extent(t, renderer) for t in texts]
    assert len(texts) >= len(OVERLAY_TARGETS) + 4
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    for k, box in enumerate(boxes):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not box.overlaps(legend)
        clash = [texts[j].get_text() for j, other in enumerate(boxes[k + 1:], k + 1) if box.overlaps(other)]
        assert not clash, (texts[k].get_text(), clash)


def test_the_time_axis_puts_each_run_on_hours_since_its_own_first_row() -> None:
    analyses = speedruns()
    _, ax = _overlay(analyses, x="time")
    assert ax.get_xlabel() == "hours since each run's first logged row" and ax.get_xscale() == "linear"
    runs = ax.get_legend().get_lines()[: len(analyses)]
    solid = {to_rgb(line.get_color()): line for line in ax.lines if line.get_linewidth() == 1.6}
    for legend_line, (_, analysis) in zip(runs, analyses, strict=True):
        history = analysis.history
        hours = (np.asarray(history.time, float) - history.time_start) / 3600.0
        line = solid[to_rgb(legend_line.get_color())]
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        rows = np.flatnonzero(history.step >= analysis.fit_start_step)
        assert len(x) == len(rows)  # a short log: every row from the fit start
        assert x == pytest.approx(hours[rows], abs=1e-9)
        assert y == pytest.approx(analysis.smoothed[rows], abs=1e-12)
    # The table's hours: a forecast sits at the last row's hours plus its hours left.
    for _, analysis in analyses:
        timing = analysis.timing
        assert timing is not None
        last = (float(analysis.history.time[-1]) - analysis.history.time_start) / 3600.0
        for result, timed in zip(analysis.targets, timing.targets, strict=True):
            if not result.status.forecast:
                continue
            at = last + timed.seconds_left / 3600.0
            assert any(float(m.get_xdata()[0]) == pytest.approx(at, rel=1e-6) for m in _markers(ax))


def test_bands_of_runs_at_one_target_are_drawn_apart() -> None:
    """Two runs' filled interval bands at one target: stacked about its line, apart, one row each."""
    fig, ax = _overlay(speedruns())
    renderer = fig.canvas.get_renderer()
    bands = [c for c in ax.collections if len(c.get_paths()) == 1]
    rows: dict[float, list] = {}
    for band in bands:
        box = band.get_window_extent(renderer)
        assert box.width >= 3.0 and box.height >= 3.0  # a filled band, seen
        ys = band.get_paths()[0].vertices[:, 1]
        target = min(OVERLAY_TARGETS, key=lambda t: abs(t - float(ys.min() + ys.max()) / 2))
        rows.setdefault(target, []).append(box)
    shared = {target: boxes for target, boxes in rows.items() if len(boxes) > 1}
    assert shared, rows
    for target, boxes in shared.items():
        boxes.sort(key=lambda b: b.y0)
        for below, above in zip(boxes, boxes[1:]):
            assert above.y0 - below.y1 >= 1.0, (target, below, above)  # pixels: never on one row
        mid = (boxes[0].y0 + boxes[-1].y1) / 2
        assert mid == pytest.approx(float(ax.transData.transform((1.0, target))[1]), abs=1.0)  # about the line


@cache
def open_ended() -> list[tuple[str, Analysis]]:
    """The 370M-5xC log read without its lr (no plan: beyond the plan) to 2.9, which some
    replicates never reach: an interval open at the top; and the cut run of the ladder."""
    frame = pd.read_csv(DATA / "olmo-ladder-370M-5xC.csv").drop(columns="lr")
    columns = tp.Columns().with_overrides(loss="val_loss")
    return [("no lr", tp.analyze(frame, [3.3, 2.9], run="no lr", columns=columns)), ladder()[2]]


def test_an_interval_open_at_the_top_ends_in_an_arrow_inside_the_frame() -> None:
    _, ax = _overlay(open_ended())
    (open_run,) = [a for name, a in open_ended() if name == "no lr"]
    assert open_run.targets[1].status == Status.FORECAST_BEYOND_PLAN
    assert not np.isfinite(open_run.targets[1].tokens_interval[1])
    arrows = [t for t in ax.texts if t.arrow_patch is not None and t.arrowprops.get("arrowstyle") == "-|>"]
    assert arrows
    x1 = ax.get_xlim()[1]
    assert all(float(t.xy[0]) < x1 for t in arrows)


def test_overlay_title_names_the_runs_and_the_axis_says_steps_for_a_batch_of_one() -> None:
    _, ax = _overlay(ladder())
    assert ax.get_title().splitlines()[0] == "short, long, cut"
    assert ax.get_xlabel() == "tokens"
    assert "(batch 524,288)" in ax.get_legend().get_texts()[0].get_text()
    _, ax = _overlay(speedruns())  # --batch-size 1: the tokens are steps
    assert ax.get_xlabel().startswith("steps")
    assert ax.get_legend().get_texts()[0].get_text() == "2024-11-24_WindowWarmup"


def test_a_time_plot_with_a_run_without_a_clock_is_one_line_and_exit_2(capsys, tmp_path) -> None:
    png = tmp_path / "overlay.png"
    clocked = DATA / "modded-short-2024-11-24_WindowWarmup.csv"
    code = main(["compare", str(clocked), str(DATA / "olmo-ladder-190M-1xC.csv"), "--loss-col", "val_loss",
                 "-t", "3.6", "--batch-size", "1", "--plot", str(png), "--x", "time"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no clock" in err
    assert "olmo-ladder-190M-1xC" in err and "WindowWarmup" not in err
    assert not png.exists()


def test_a_time_plot_of_clocked_runs_is_written(capsys, tmp_path) -> None:
    png = tmp_path / "overlay.png"
    runs = [str(DATA / f"modded-short-{name}.csv") for name in ("2024-11-24_WindowWarmup", "2024-12-10_MFUTweaks")]
    code = main(["compare", *runs, "--loss-col", "val_loss", "-t", "3.6", "3.3", "--batch-size", "1",
                 "--plot", str(png), "--x", "time", "--sort", "hours"])
    out, _ = capsys.readouterr()
    assert code == 0 and png.read_bytes().startswith(b"\x89PNG") and "hours left" in out


def test_a_forecast_past_the_warn_factor_is_flagged_on_the_overlay() -> None:
    _, ax = _overlay(ladder())
    flagged = [r for _, a in ladder() for r in a.targets if r.beyond_warn_factor]
    assert flagged and all(r.target == 3.2 for r in flagged)  # the farthest target only
    warned = sorted(t.get_text() for t in ax.texts if "WARNING" in t.get_text())
    factors = [r.extrapolation_factor for r in flagged]
    assert all(f is not None and f > 3 for f in factors)
    assert len(warned) == len(flagged) and all(w.startswith("3.2: ") for w in warned)
    assert all(sum(f"WARNING: {f:.2f}x past the log" in w for w in warned) == 1 for f in factors)
    edged = [m for m in _markers(ax) if m.get_markeredgecolor() == "black"]
    assert sorted(float(m.get_xdata()[0]) for m in edged) == pytest.approx(sorted(r.tokens for r in flagged), rel=1e-9)
    assert any("past the warn factor (3x)" in t.get_text() for t in ax.get_legend().get_texts())
