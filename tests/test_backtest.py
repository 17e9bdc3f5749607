"""The backtest: its protocol, its summary, and the command on real runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tracker_plugin as tp
from tracker_plugin.cli import expand_multi_value, main
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import BacktestCase, backtest_run, logged_plan, summarize
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.core.status import Status
from tracker_plugin.testing import synthetic_run


def _case(error: float | None, interval: tuple[float, float] | None = None, model: str = "auto") -> BacktestCase:
    truth = 1e9
    tokens = None if error is None else truth * math.exp(error)
    status = Status.NOT_ENOUGH_DATA if error is None else Status.FORECAST_BEYOND_PLAN
    return BacktestCase("run", model, 0.5, 0.8, 3.0, truth, status, tokens=tokens, interval=interval)


def test_summary_figures():
    cases = [
        _case(0.1, (0.9e9, 1.2e9)),
        _case(-0.2, (1.0e9, 1.1e9)),  # the truth (1e9) is on the edge: covered
        _case(0.05, (1.2e9, 1.5e9)),  # not covered
        _case(-0.4),
        _case(None),
    ]
    (summary,) = summarize(cases)
    assert summary.cases == 5 and summary.failures == 1
    assert summary.median_abs == pytest.approx(np.median([0.1, 0.2, 0.05, 0.4]))
    assert summary.p90_abs == pytest.approx(np.percentile([0.1, 0.2, 0.05, 0.4], 90))
    assert summary.bias == pytest.approx(np.median([0.1, -0.2, 0.05, -0.4]))
    assert summary.coverage == pytest.approx(2 / 3) and summary.intervals == 3
    assert summary.median_width == pytest.approx(np.median([1.2 / 0.9, 1.1, 1.25]))


def test_protocol_on_a_known_run():
    frame = synthetic_run(3000, batch=131072.0, noise=0.005, log_every=5, seed=2,
                          lr_schedule="cosine:warmup=100,total=3000,final=0.1", anneal_gain=0.15)
    history = tp.build_history(frame, run="known")
    config = AnalysisConfig(targets=(1.0,), ema_token_window=2.5e7)
    cases = backtest_run(history, config, fit_fractions=(0.5,), target_quantiles=(0.6, 0.8), models=("auto", "power-law"))
    assert [(c.model, c.target_quantile) for c in cases] == [
        ("auto", 0.6), ("auto", 0.8), ("power-law", 0.6), ("power-law", 0.8)
    ]
    smoothed = token_window_ema(history.loss, history.step, history.batch, 2.5e7)
    for case in cases:
        # the target is the smoothed loss at q of the final tokens; the smoothed loss falls
        # steadily here, so it first reaches it right there
        assert case.target == pytest.approx(np.interp(case.target_quantile * history.tokens[-1], history.tokens, smoothed))
        assert case.true_tokens == pytest.approx(case.target_quantile * history.tokens[-1], rel=1e-3)
    auto = [c for c in cases if c.model == "auto"]
    assert all(abs(c.error) < 0.05 and c.interval is not None for c in auto)
    assert all(c.chosen in ("lr-annealing", "multi-power") for c in auto)
    assert all(c.interval is None for c in cases if c.model == "power-law")
    # the plan handed to each forecast is the finished run's logged lr
    plan = logged_plan(history)
    assert plan.source == "log" and plan.total_steps == history.last_step


def test_the_backtest_command_on_real_runs(capsys, data_dir):
    files = [data_dir / "olmo-ladder-190M-1xC.csv", data_dir / "nanogpt-bs-constant.csv"]
    code = main(["backtest", *map(str, files), "--loss-col", "val_loss", "--fit-fractions", "0.5", "--target-quantiles", "0.8", "0.95"])
    out = capsys.readouterr().out
    assert code == 0
    assert "backtest of 2 run(s)" in out and "the finished run's logged lr" in out
    # two runs cut once each, both forecast on their logged lr (auto; the power law has no plan)
    assert "the plans the forecasts used (per cut): 2 log" in out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert "median |ln|" in header and "p90 |ln|" in header and "80% coverage" in header
    rows = [line.split() for line in out.splitlines() if line.startswith(("auto ", "power-law "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("auto", "0.5", "0.8"), ("auto", "0.5", "0.95"),
                                                 ("power-law", "0.5", "0.8"), ("power-law", "0.5", "0.95")]
    auto_median = float(rows[0][5])
    power_median = float(rows[2][5])
    assert auto_median < power_median  # the schedule-aware forecast beats the power law here


def test_the_backtest_command_json_and_a_steps_clock_run(capsys, data_dir):
    """mpl runs log no batch: tokens count steps (--batch-size 1), the EMA window is in steps."""
    path = data_dir / "mpl-25M-wsdcon-9.csv"
    code = main(["backtest", str(path), "--batch-size", "1", "--ema-token-window", "200", "--fit-fractions", "0.5",
                 "--target-quantiles", "0.8", "--models", "auto", "lr-annealing", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {s["model"] for s in doc["summaries"]} == {"auto", "lr-annealing"}
    (case, _) = doc["cases"]
    assert set(case) >= {"run", "model", "chosen", "fit_fraction", "target_quantile", "target", "true_tokens", "tokens",
                         "tokens_interval", "log_error", "covered", "status", "plan_source", "p_reach_within_plan"}
    assert case["plan_source"] == "log" and 0 <= case["p_reach_within_plan"] <= 1
    # cut before its lr drop at step 8000, the forecast leans on the planned drop
    assert case["status"] == Status.FORECAST and abs(case["log_error"]) < 0.4  # the plan is the log's: within it


def test_a_run_that_cannot_be_read_is_skipped_with_exit_code_1(capsys, data_dir, tmp_path):
    (tmp_path / "broken.csv").write_text("step,val_loss,global_batch\n0,5,10\n1,oops,10\n")
    (tmp_path / "good.csv").write_bytes((data_dir / "olmo-ladder-190M-1xC.csv").read_bytes())
    code = main(["backtest", str(tmp_path), "--loss-col", "val_loss", "--fit-fractions", "0.5",
                 "--target-quantiles", "0.8", "--models", "power-law"])
    out = capsys.readouterr().out
    assert code == 1
    assert "skipped" in out and "broken.csv" in out and "non-numeric value 'oops'" in out
    assert "power-law  0.5" in out


def test_bad_fractions_are_a_one_line_error(capsys, data_dir):
    code = main(["backtest", str(data_dir / "olmo-ladder-190M-1xC.csv"), "--fit-fractions", "1.5"])
    err = capsys.readouterr().err
    assert code == 2 and "'--fit-fractions': '1.5' is not in the range (0, 1)" in err and len(err.strip().splitlines()) == 1


def test_multi_value_options_stop_at_the_next_flag():
    argv = ["backtest", "runs/", "--fit-fractions", "0.25", "0.5", "--target-quantiles", "0.6", "0.8", "0.95",
            "--models", "auto", "power-law", "more.csv"]
    assert expand_multi_value(argv) == [
        "backtest", "runs/", "--fit-fractions", "0.25", "--fit-fractions", "0.5",
        "--target-quantiles", "0.6", "--target-quantiles", "0.8", "--target-quantiles", "0.95",
        "--models", "auto", "--models", "power-law", "more.csv",
    ]


def test_a_case_reads_every_coverage_level_from_its_draws():
    draws = tuple(np.linspace(0.5e9, 1.5e9, 41))  # order statistics 0..40
    case = BacktestCase("run", "auto", 0.5, 0.8, 3.0, 1.3e9, Status.FORECAST_BEYOND_PLAN, tokens=1e9, interval=(0.6e9, 1.4e9),
                        draws=draws)
    assert case.interval_at(0.5) == (draws[10], draws[30])  # floor(0.25 * 40), ceil(0.75 * 40)
    assert case.interval_at(0.95) == (draws[1], draws[39])  # floor(0.025 * 40) = 1, ceil(0.975 * 40) = 39
    assert case.covered_at(0.5) is False and case.covered_at(0.95) is True
    beyond = BacktestCase("run", "auto", 0.5, 1.0, 2.0, math.inf, Status.FORECAST_BEYOND_PLAN, tokens=1e9, draws=draws)
    assert not beyond.reached_in_run and beyond.error is None and beyond.covered_at(0.8) is None


def test_beyond_targets_score_p_reach_and_cases_say_their_plan():
    frame = synthetic_run(3000, batch=131072.0, noise=0.005, log_every=5, seed=2,
                          lr_schedule="cosine:warmup=100,total=3000,final=0.1", anneal_gain=0.15)
    history = tp.build_history(frame, run="known")
    config = AnalysisConfig(targets=(1.0,), ema_token_window=2.5e7)
    cases = backtest_run(history, config, fit_fractions=(0.5,), target_quantiles=(0.8,), models=("auto",), beyond=True)
    reached, past = cases
    assert reached.reached_in_run and not past.reached_in_run and past.target < reached.target
    # With the logged lr as the plan, a target the run reached is likely within it, one it
    # never reached is not: both are scored by p_reach_within_plan.
    assert reached.plan_source == "log" and reached.p_reach is not None and reached.p_reach > 0.5
    assert past.p_reach is not None and past.p_reach < 0.5
    assert len(reached.draws) > 10 and list(reached.draws) == sorted(reached.draws)
    assert reached.plan_end_tokens == pytest.approx(history.tokens[-1], rel=0.01)


def _clocked_frame():
    """A run that follows its law, on a clock of 0.5 s per step from t = 1000 s."""
    frame = synthetic_run(3000, batch=131072.0, noise=0.005, log_every=5, seed=2,
                          lr_schedule="cosine:warmup=100,total=3000,final=0.1", anneal_gain=0.15)
    frame["time"] = 1000.0 + 0.5 * frame["step"]
    return frame


def test_a_clocked_run_is_scored_in_seconds_beside_tokens():
    frame = _clocked_frame()
    history = tp.build_history(frame, run="clocked")
    config = AnalysisConfig(targets=(1.0,), ema_token_window=2.5e7)
    cases = backtest_run(history, config, fit_fractions=(0.5,), target_quantiles=(0.6, 0.8), models=("auto",))
    first = float(history.step[0])
    for case in cases:
        # The truth on the clock: 0.5 s per step after the first row.
        true_step = np.interp(case.true_tokens, history.tokens, history.step)
        assert case.true_seconds == pytest.approx(0.5 * (true_step - first), rel=1e-6)
        # A steady clock adds nothing to the token error: the forecast's seconds are its
        # tokens on the same clock (up to the first row's offset, a few steps in 1500).
        predicted_step = np.interp(case.tokens, history.tokens, history.step, right=np.nan)
        if np.isnan(predicted_step):
            predicted_step = history.step[-1] + (case.tokens - history.tokens[-1]) / 131072.0
        assert case.seconds == pytest.approx(0.5 * (predicted_step - first), rel=1e-3)
        assert abs(case.seconds_error - case.error) < 0.01
        low, high = case.seconds_interval
        assert case.seconds_covered == (low <= case.true_seconds <= high)
    (summary_06, summary_08) = summarize(cases)
    assert summary_08.median_abs_seconds == pytest.approx(abs(cases[1].seconds_error))
    assert summary_08.seconds_intervals == 1
    # A run without a clock has no time figures.
    unclocked = backtest_run(tp.build_history(frame.drop(columns="time"), run="no clock"), config,
                             fit_fractions=(0.5,), target_quantiles=(0.8,), models=("auto",))
    assert unclocked[0].true_seconds is None and unclocked[0].seconds_error is None
    assert summarize(unclocked)[0].median_abs_seconds is None


def test_the_backtest_command_shows_time_figures_for_a_clocked_run(capsys, tmp_path):
    path = tmp_path / "clocked.csv"
    _clocked_frame().to_csv(path, index=False)
    args = ["backtest", str(path), "--ema-token-window", "2.5e7", "--fit-fractions", "0.5", "--target-quantiles", "0.8",
            "--models", "auto"]
    assert main(args) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert "median |ln| sec" in header and "80% coverage sec" in header
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (summary,) = doc["summaries"]
    (case,) = doc["cases"]
    assert case["log_error_seconds"] == pytest.approx(math.log(case["seconds"] / case["true_seconds"]))
    assert summary["median_abs_log_error_seconds"] == pytest.approx(abs(case["log_error_seconds"]))
    assert summary["seconds_intervals"] == 1 and summary["seconds_interval_coverage"] in (0.0, 1.0)
    assert summary["seconds_interval_coverage"] == float(case["seconds_covered"])
