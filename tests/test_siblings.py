"""The calibration from a project's finished runs (tracker_plugin.core.siblings)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracker_plugin.core.siblings import NONE, Calibration, calibrate, sibling_case


def _draws(point: float, spread: float, n: int = 2001) -> np.ndarray:
    """Draws whose ln distance from ``point`` is a standard normal times ``spread``."""
    rng = np.random.default_rng(0)
    return point * np.exp(spread * rng.standard_normal(n))


def _siblings(bias: float, spread: float, truth_spread: float, runs: int = 8, per_run: int = 4) -> list:
    """Cases whose forecasts run ``bias`` late in ln and whose truth lies ``truth_spread``
    (in ln) about the biased point, intervals ``spread`` wide."""
    rng = np.random.default_rng(1)
    cases = []
    for r in range(runs):
        for _ in range(per_run):
            truth = 1e9
            point = truth * math.exp(bias + truth_spread * rng.standard_normal())
            cases.append(sibling_case(f"run{r}", point, truth, _draws(point, spread)))
    return cases


def test_no_siblings_is_no_calibration() -> None:
    cal = calibrate([])
    assert not cal.active and cal.bias == 0.0 and cal.width == 1.0
    assert cal.point(5e9) == 5e9
    draws = np.array([1e9, 2e9, math.inf])
    np.testing.assert_array_equal(cal.draws(draws, 1.5e9), draws)


def test_fewer_runs_than_the_minimum_is_no_calibration() -> None:
    cal = calibrate(_siblings(0.2, 0.1, 0.1, runs=2), min_runs=3)
    assert not cal.active and cal.raw_bias is None


def test_bias_is_the_siblings_mean_error_shrunk_by_their_count() -> None:
    cases = _siblings(0.2, 0.1, 0.02, runs=8)
    raw = float(np.mean([c.error for c in cases]))
    cal = calibrate(cases, bias_weight=2.0, center="mean", spread=None)
    assert cal.raw_bias == pytest.approx(raw, abs=1e-12)
    assert cal.bias == pytest.approx(raw * 8 / 10, abs=1e-12)
    # The corrected point of a forecast 0.2 late lands within the siblings' scatter of the truth.
    assert abs(math.log(cal.point(1e9 * math.exp(0.2)) / 1e9) - 0.2 * 2 / 10) < 0.03
    assert calibrate(cases, bias_weight=math.inf).bias == 0.0


def test_the_median_bias_is_not_moved_by_one_odd_sibling() -> None:
    cases = _siblings(0.1, 0.1, 0.01, runs=5, per_run=1)
    odd = sibling_case("odd", 1e9 * math.exp(-2.0), 1e9, _draws(1e9 * math.exp(-2.0), 0.1))
    assert odd is not None
    median = calibrate([*cases, odd], bias_weight=0.0, center="median", spread=None)
    mean = calibrate([*cases, odd], bias_weight=0.0, center="mean", spread=None)
    assert median.raw_bias is not None and abs(median.raw_bias - 0.1) < 0.03
    assert mean.raw_bias is not None and mean.raw_bias < -0.2
    with pytest.raises(ValueError, match="center"):
        calibrate(cases, center="mode")


def test_siblings_that_disagree_move_the_point_less_than_siblings_that_agree() -> None:
    agree = calibrate(_siblings(0.1, 0.1, 0.01, runs=4, per_run=1), spread=0.1)
    disagree = calibrate(_siblings(0.1, 0.1, 0.3, runs=4, per_run=1), spread=0.1)
    assert agree.spread == disagree.spread == 0.1
    assert agree.bias / agree.raw_bias > 0.9 > 0.5 > disagree.bias / disagree.raw_bias
    # The weight is the runs' scatter (one more run at the spread) over the spread squared.
    errors = sorted({c.run: c.error for c in _siblings(0.1, 0.1, 0.3, runs=4, per_run=1)}.items())
    values = np.array([e for _, e in errors])
    weight = (np.sum((values - values.mean()) ** 2) + 0.01) / 4 / 0.01
    assert disagree.bias_weight == pytest.approx(weight, rel=1e-9)
    assert "the weight their scatter over 0.1 gives" in disagree.describe()


def test_width_stretches_intervals_too_narrow_for_the_truth_and_shrinks_wide_ones() -> None:
    narrow = calibrate(_siblings(0.0, 0.05, 0.15), width_weight=0.0)
    wide = calibrate(_siblings(0.0, 0.4, 0.1), width_weight=0.0)
    # Intervals 0.05 wide for truths scattered 0.15: about three times as wide is needed.
    assert 2.0 < narrow.width < 4.0
    assert 0.15 < wide.width < 0.5
    # Shrunk toward 1 in log space by the count of runs.
    half = calibrate(_siblings(0.0, 0.05, 0.15), width_weight=8.0)
    assert half.width == pytest.approx(math.exp(math.log(narrow.raw_width) / 2), rel=1e-9)


def test_calibrated_draws_cover_the_siblings_truths() -> None:
    cases = _siblings(0.1, 0.05, 0.15, runs=40, per_run=5)
    cal = calibrate(cases, bias_weight=0.0, width_weight=0.0)
    rng = np.random.default_rng(7)
    held = []
    for _ in range(400):
        truth = 1e9
        point = truth * math.exp(0.1 + 0.15 * rng.standard_normal())
        draws = np.sort(cal.draws(_draws(point, 0.05, 401), point))
        held.append(draws[40] <= truth <= draws[360])
    assert 0.72 <= np.mean(held) <= 0.88


def test_open_ended_draws_stay_open() -> None:
    cal = Calibration(bias=0.1, width=2.0, runs=("a",))
    out = cal.draws(np.array([1e9, math.inf]), 1e9)
    assert out[0] == pytest.approx(1e9 * math.exp(-0.1)) and math.isinf(out[1])


def test_a_case_needs_a_finite_point_and_truth() -> None:
    assert sibling_case("a", math.inf, 1e9, np.array([1e9])) is None
    assert sibling_case("a", 1e9, 0.0, np.array([1e9])) is None
    assert sibling_case("a", 1e9, 1e9, np.array([])) is None


def test_bad_weights_and_errors_are_named() -> None:
    with pytest.raises(ValueError, match="weights"):
        calibrate([], bias_weight=-1.0)
    bad = sibling_case("a", 1e9, 1e9, np.array([1e9]))
    assert bad is not None
    with pytest.raises(ValueError, match="finite"):
        calibrate([bad.__class__(bad.run, math.inf, bad.lows, bad.highs)])


def test_none_is_the_default_calibration() -> None:
    assert NONE == Calibration() and not NONE.active


@pytest.mark.slow
def test_an_analysis_calibrated_on_siblings_moves_its_point_and_stretches_its_interval() -> None:
    import tracker_plugin as tp
    from tracker_plugin.testing import synthetic_run

    spec = "cosine:warmup=100,total=3000,final=0.1"
    whole = synthetic_run(3000, batch=131072.0, noise=0.01, lr_schedule=spec, anneal_gain=0.1, log_every=5, seed=3)
    # A target the run reaches at about 80% of its steps, forecast from its first half.
    target = float(whole.train_loss[(whole.step > 2350) & (whole.step < 2450)].mean())
    frame = whole[whole.step < 1500]
    plain = tp.analyze(frame, [target], lr_schedule=spec, ema_token_window=2.5e7)
    cal = Calibration(bias=0.1, width=2.0, runs=("a", "b", "c"), cases=6, raw_bias=0.13, raw_width=2.5)
    calibrated = tp.analyze(frame, [target], lr_schedule=spec, ema_token_window=2.5e7, calibration=cal)
    before, after = plain.targets[0], calibrated.targets[0]
    assert before.status == after.status == "forecast"
    assert after.tokens == pytest.approx(before.tokens * math.exp(-0.1), rel=1e-9)
    (low0, high0), (low1, high1) = before.tokens_interval, after.tokens_interval
    assert math.log(after.tokens / low1) == pytest.approx(2 * math.log(before.tokens / low0), rel=1e-6)
    assert math.log(high1 / after.tokens) == pytest.approx(2 * math.log(high0 / before.tokens), rel=1e-6)
    # The step follows the tokens, and the report says what the siblings set.
    assert after.step < before.step
    assert any("calibrated on 3 finished run(s)" in note for note in calibrated.notes)
    doc = tp.to_json(calibrated)["calibration"]
    assert doc["count"] == 3 and doc["runs"] == ["a", "b", "c"]
    assert doc["bias"] == {"value": 0.1, "siblings": 0.13, "prior": 0.0, "weight": 1.0, "spread": None}
    assert tp.to_json(plain)["calibration"] is None


def test_a_calibration_that_is_not_one_is_named() -> None:
    import tracker_plugin as tp

    with pytest.raises(tp.ConfigError, match="calibration"):
        tp.AnalysisConfig(targets=(3.0,), calibration=0.1)  # type: ignore[arg-type]
