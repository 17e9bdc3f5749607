"""Wall-clock time: the clock in the frame, throughput that survives real logs, hours to targets.

Each robustness case is a synthetic log with a known answer: a steady step time with an
eval pause every N steps, an 8-hour resume gap, a compile pause at the start, a batch
switch with a new throughput, and clocks in milliseconds.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.core.throughput import Deadline, measure_throughput, time_target
from tracker_plugin.errors import DataError
from tracker_plugin.report.target_text import target_status
from tracker_plugin.report.timing import eta_text

STEP_SECONDS = 0.5
BATCH = 1000.0
N = 3000


def _log(time: np.ndarray, *, batch: np.ndarray | float = BATCH, name: str = "time") -> pd.DataFrame:
    step = np.arange(len(time))
    # A loss still falling at the end (2.48 at the last step): targets below it are forecast.
    loss = 2.0 + 8.0 * (step + 50.0) ** -0.35
    return pd.DataFrame({"step": step, "train_loss": loss, "global_batch": batch, name: time})


def _history(frame: pd.DataFrame, **kw) -> tp.History:
    return tp.build_history(frame, run="synthetic", **kw)


def steady() -> np.ndarray:
    return np.arange(N) * STEP_SECONDS


def test_steady_clock_gives_its_step_time_and_exact_hours_left():
    history = _history(_log(steady()))
    rate = measure_throughput(history)
    assert rate is not None and rate.source == "clock"
    assert rate.seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)
    assert rate.pauses == 0
    analysis = tp.analyze(history, [2.4])
    result, when = analysis.targets[0], analysis.timing.targets[0]
    assert result.status == "forecast_beyond_plan"
    # Known answer: the forecast tokens left at the measured rate.
    expected = (result.tokens - history.last_tokens) * STEP_SECONDS / BATCH
    assert when.seconds_left == pytest.approx(expected, rel=1e-9)
    assert when.seconds == pytest.approx(analysis.timing.observed_seconds + expected, rel=1e-9)
    low, high = when.seconds_left_interval
    assert low < when.seconds_left < high


def test_reached_target_time_is_interpolated():
    history = _history(_log(steady()))
    analysis = tp.analyze(history, [4.0])
    result, when = analysis.targets[0], analysis.timing.targets[0]
    assert result.status == "reached"
    assert when.seconds == pytest.approx(result.step * STEP_SECONDS, rel=1e-9)
    assert when.seconds_left == 0.0


def test_eval_pause_every_n_steps_is_left_out_and_counted():
    every, pause = 200, 30.0
    time = steady() + pause * (np.arange(N) // every)
    rate = measure_throughput(_history(_log(time)))
    assert rate.seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)
    assert rate.pauses == (N - 1) // every
    assert rate.pause_seconds == pytest.approx(rate.pauses * pause, rel=1e-6)
    counted = measure_throughput(_history(_log(time)), count_pauses=True)
    # The pause rate over the log: its 14 pauses of 30 s over its 2,999 steps, on top of 0.5 s a step.
    assert counted.seconds_per_step == pytest.approx(STEP_SECONDS + rate.pauses * pause / (N - 1), rel=1e-6)
    assert counted.pauses_included


def test_eight_hour_resume_gap_is_not_training_time():
    gap = 8 * 3600.0
    time = steady() + np.where(np.arange(N) >= 2500, gap, 0.0)
    history = _history(_log(time))
    rate = measure_throughput(history)
    assert rate.seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)
    assert rate.pauses == 1 and rate.pause_seconds == pytest.approx(gap, rel=1e-6)
    analysis = tp.analyze(history, [2.4])
    result, when = analysis.targets[0], analysis.timing.targets[0]
    assert when.seconds_left == pytest.approx((result.tokens - history.last_tokens) * STEP_SECONDS / BATCH, rel=1e-9)
    # The clock itself still holds the downtime that happened.
    assert analysis.timing.observed_seconds == pytest.approx((N - 1) * STEP_SECONDS + gap, rel=1e-9)


def test_compile_pause_at_start_is_left_out():
    time = steady() + np.where(np.arange(N) >= 1, 90.0, 0.0)
    rate = measure_throughput(_history(_log(time)))
    assert rate.seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)
    # Compilation happens once: even counted pauses add nothing for the future.
    counted = measure_throughput(_history(_log(time)), count_pauses=True)
    assert counted.seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)


def test_batch_switch_uses_the_new_stage_rate():
    switch = 2700  # late: the stretch must start at the switch, not 30% from the end
    step = np.arange(N)
    batch = np.where(step < switch, BATCH, 2 * BATCH)
    # 0.5 s a step at 1000 tokens, then 0.8 s a step at 2000: 2,000 then 2,500 tokens/s.
    time = np.where(step < switch, step * 0.5, switch * 0.5 + (step - switch) * 0.8)
    rate = measure_throughput(_history(_log(time, batch=batch)))
    assert rate.tokens_per_second == pytest.approx(2500.0, rel=1e-9)
    assert rate.seconds_per_step == pytest.approx(0.8, rel=1e-9)
    assert rate.stage_start == switch
    assert rate.pauses == 0


def test_hardware_change_without_batch_change_uses_the_new_rate():
    step = np.arange(N)
    time = np.where(step < 2000, step * 0.5, 1000.0 + (step - 2000) * 0.3)
    rate = measure_throughput(_history(_log(time)))
    assert rate.seconds_per_step == pytest.approx(0.3, rel=1e-9)


def test_unix_milliseconds_are_read_as_seconds_with_a_note():
    start = 1.76e12
    history = _history(_log(start + steady() * 1000.0, name="timestamp"))
    assert history.time_absolute
    assert any("Unix milliseconds" in n for n in history.notes)
    assert measure_throughput(history).seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)
    analysis = tp.analyze(history, [2.4])
    when = analysis.timing.targets[0]
    assert when.eta_unix == pytest.approx(start / 1000.0 + when.seconds, rel=1e-12)


def test_relative_milliseconds_named_ms_are_read_as_seconds():
    history = _history(_log(steady() * 1000.0, name="train_time_ms"), columns=tp.Columns().with_overrides(time="train_time_ms"))
    assert not history.time_absolute
    assert any("milliseconds" in n for n in history.notes)
    assert measure_throughput(history).seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)


def test_logger_restart_is_stitched():
    time = steady()
    time[1500:] -= time[1500] - 0.2  # the logger's clock starts again near 0
    history = _history(_log(time))
    assert np.all(np.diff(history.time) > 0)
    assert any("restarted at step 1,500" in n for n in history.notes)
    assert measure_throughput(history).seconds_per_step == pytest.approx(STEP_SECONDS, rel=1e-9)


def test_a_clock_that_goes_backwards_is_an_error_naming_run_and_column():
    time = 1.7e9 + steady()
    time[1000] -= 100.0
    with pytest.raises(DataError, match="clock goes backwards") as err:
        _history(_log(time))
    assert err.value.run == "synthetic" and err.value.column == "time"


def test_no_clock_says_so_and_step_time_supplies_it():
    frame = _log(steady()).drop(columns="time")
    analysis = tp.analyze(frame, [2.4])
    assert analysis.timing.throughput is None and "no time in the log" in analysis.timing.note
    given = tp.analyze(frame, [2.4], step_time=2.0)
    result, when = given.targets[0], given.timing.targets[0]
    assert when.seconds_left == pytest.approx((result.tokens - result.tokens + (result.step - 2999)) * 2.0, rel=1e-6)
    by_rate = tp.analyze(frame, [2.4], throughput=500.0)
    assert by_rate.timing.targets[0].seconds_left == pytest.approx(when.seconds_left, rel=1e-9)


def test_deadline_probability_is_the_interval_read_as_a_distribution():
    history = _history(_log(1.7e9 + steady()))
    rate = measure_throughput(history)
    point, low, high = (history.last_tokens + k * BATCH for k in (1000, 600, 1800))

    def p_by(seconds_left: float, interval=(low, high)) -> float:
        deadline = Deadline(seconds_left, None, "+x")
        found = time_target(
            history, rate, tokens=point, tokens_interval=interval, reached=False, level=0.8, deadline=deadline
        )
        return found.p_by_deadline

    # Known answers: the 80% interval's ends are the 10% and 90% quantiles, the point the median.
    assert p_by(600 * STEP_SECONDS) == pytest.approx(0.1, abs=1e-9)
    assert p_by(1000 * STEP_SECONDS) == pytest.approx(0.5, abs=1e-9)
    assert p_by(1800 * STEP_SECONDS) == pytest.approx(0.9, abs=1e-9)
    # An interval open at the top says nothing past the point: no better than even.
    assert p_by(10_000 * STEP_SECONDS, (low, math.inf)) == pytest.approx(0.5)


def test_deadline_as_a_date_and_as_hours_agree():
    history = _history(_log(1.7e9 + steady()))
    left = tp.analyze(history, [2.4]).timing.targets[0].seconds_left
    by_hours = tp.analyze(history, [2.4], deadline=f"+{left * 0.9 / 3600}").timing.targets[0].p_by_deadline
    iso = pd.Timestamp(1.7e9 + 2999 * STEP_SECONDS + left * 0.9, unit="s", tz="UTC").isoformat()
    by_date = tp.analyze(history, [2.4], deadline=iso).timing.targets[0].p_by_deadline
    assert by_date == pytest.approx(by_hours, abs=1e-3)
    assert 0.0 < by_hours < 0.5


def _csv(tmp_path, frame: pd.DataFrame) -> str:
    path = tmp_path / "run.csv"
    frame.to_csv(path, index=False)
    return str(path)


def test_cli_json_has_the_time_contract(tmp_path, capsys):
    path = _csv(tmp_path, _log(1.7e9 + steady()))
    assert main(["analyze", path, "-t", "4.0", "2.4", "--json", "--deadline", "+1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["observed"]["seconds"] == pytest.approx((N - 1) * STEP_SECONDS)
    assert doc["throughput"]["source"] == "clock"
    assert doc["throughput"]["tokens_per_second"] == pytest.approx(BATCH / STEP_SECONDS)
    reached, forecast = doc["targets"]
    assert reached["seconds_left"] == 0.0 and reached["p_by_deadline"] == 1.0
    assert forecast["eta"].endswith("Z") and len(forecast["seconds_interval"]) == 2
    assert 0.0 <= forecast["p_by_deadline"] <= 1.0


def test_cli_text_says_the_eta_and_throughput(tmp_path, capsys):
    path = _csv(tmp_path, _log(1.7e9 + steady()))
    assert main(["analyze", path, "-t", "2.4", "--deadline", "+1"]) == 0
    out = capsys.readouterr().out
    assert "throughput: 2.0k tokens/s (0.5 s/step) over the last" in out
    line = next(line for line in out.splitlines() if "time: 2.4 at about" in line)
    assert "UTC, in " in line and "(80%: " in line and "P(by deadline +1)=" in line


@pytest.mark.parametrize(
    ("frame", "args", "message"),
    [
        (_log(1.7e9 + steady()), ["--deadline", "2001-01-01T00:00"], "is in the past"),
        (_log(steady()), ["--deadline", "+0"], "+HOURS must be a number above 0"),
        (_log(steady()), ["--deadline", "2030-01-01"], "no Unix clock"),
    ],
)
def test_bad_time_input_is_one_line_and_exit_2(tmp_path, capsys, frame, args, message):
    path = _csv(tmp_path, frame)
    assert main(["analyze", path, "-t", "2.4", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert math.isfinite(len(err))


def test_a_time_column_of_times_of_day_is_no_clock_and_a_note(tmp_path, capsys):
    """Times of day name no date: no clock, with a note naming the column and the way out
    (issue 33: it no longer stops the analysis)."""
    path = _csv(tmp_path, _log(np.array([f"12:00:0{i % 10}" for i in range(N)], dtype=object)))
    assert main(["analyze", path, "-t", "2.4"]) == 0
    out = capsys.readouterr().out
    assert "time column 'time' holds text that is neither numbers nor ISO 8601 dates ('12:00:00' in row 1)" in out
    assert "--time-col none" in out and "no time in the log" in out


def test_annotation_writes_the_time_keys(tmp_path):
    from tracker_plugin.jobs.annotation import build_annotation, settings_of

    history = _history(_log(1.7e9 + steady()))
    config = tp.AnalysisConfig(targets=(4.0, 2.4), deadline="+1")
    analysis = tp.analyze(history, config.targets, deadline="+1")
    annotation = build_annotation(analysis, settings_of(config, tp.Columns(), None))
    metrics, labels = annotation.metrics, annotation.labels
    when = analysis.timing.targets[1]
    # hours left, to the 3 significant digits a person reads; 0 once reached
    assert metrics["when_2p4_hours"] == pytest.approx(when.seconds_left / 3600, rel=5e-3)
    assert metrics["when_4_hours"] == 0.0
    # the date, the interval and the chance by the deadline are in the text
    text = str(labels["when_2p4"])
    assert str(target_status(text)).startswith("forecast") and eta_text(when.eta_unix) in text and "P(by deadline) " in text
    assert f"{when.p_by_deadline:.2f}" in text


def test_compare_sorts_by_hours(tmp_path, capsys):
    fast, slow = tmp_path / "fast.csv", tmp_path / "slow.csv"
    _log(steady() * 3).to_csv(slow, index=False)  # same tokens, three times the hours
    _log(steady()).to_csv(fast, index=False)
    assert main(["compare", str(slow), str(fast), "-t", "2.4", "--sort", "hours", "--json"]) == 0
    (group,) = json.loads(capsys.readouterr().out)
    runs = [row["run"] for row in group["rows"]]
    assert runs == ["fast", "slow"]
    hours = [row["hours_left"] for row in group["rows"]]
    assert hours[1] == pytest.approx(3 * hours[0], rel=1e-6)


def test_seconds_interval_adds_the_throughput_spread_in_quadrature():
    from statistics import NormalDist

    from tracker_plugin.core.throughput import Throughput

    history = _history(_log(steady()))
    spread, level = 0.1, 0.8
    rate = Throughput("clock", STEP_SECONDS / BATCH, STEP_SECONDS, spread)
    last = history.last_tokens
    tokens, interval = last + 2e6, (last + 1e6, last + 5e6)
    when = time_target(history, rate, tokens=tokens, tokens_interval=interval, reached=False, level=level, deadline=None)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    left = 2e6 * STEP_SECONDS / BATCH
    # Known answer: each end's log distance from the point, with z x spread added in quadrature.
    low, high = when.seconds_left_interval
    assert math.log(left / low) == pytest.approx(math.hypot(math.log(2.0), z * spread), rel=1e-9)
    assert math.log(high / left) == pytest.approx(math.hypot(math.log(2.5), z * spread), rel=1e-9)
