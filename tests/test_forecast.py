"""Schedule-aware forecasts on runs with a known answer: the laws, the fit, the interval."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.core import forecast, forecast_draws, law_selection
from tracker_plugin.core.analysis import _crossing, run_analysis
from tracker_plugin.core.clock import Timeline, build_timeline
from tracker_plugin.core.forecast import _inflated, fit_window, plan_inflation
from tracker_plugin.core.forecast_draws import _block_length, _Resampler
from tracker_plugin.core.models import LR_ANNEALING, FitFailure, GainPrior, fit_law, observations
from tracker_plugin.core.models.replicates import refit_many
from tracker_plugin.core.models.schedule_law import smooth_after
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.plan.schedule import LrSchedule, Plan
from tracker_plugin.testing import synthetic_run

COSINE = "cosine:warmup=100,total=3000,final=0.1"
WINDOW = 2.5e7


def _run(spec: str = COSINE, *, steps: int = 3000, noise: float = 0.01, gain: float = 0.15, seed: int = 0, **more):
    frame = synthetic_run(steps, batch=131072.0, l0=2.0, a=3.0, alpha=0.3, noise=noise, lr_schedule=spec,
                          anneal_gain=gain, log_every=5, seed=seed, **more)
    return tp.build_history(frame, run=f"synthetic {spec} seed {seed}")


def _protocol(history, fraction: float, quantile: float, window: float = WINDOW):
    """(cut history, target, true tokens): the backtest protocol on one run."""
    smoothed = token_window_ema(history.loss, history.step, history.batch, window)
    target = float(np.interp(quantile * history.tokens[-1], history.tokens, smoothed))
    truth = _crossing(history, smoothed, target)[1]
    rows = int(np.searchsorted(history.tokens, fraction * history.tokens[-1], side="right"))
    return history.head(rows), target, truth


def test_lr_annealing_law_recovers_a_run_that_follows_it():
    history = _run()
    cut, target, truth = _protocol(history, 0.5, 0.8)
    analysis = tp.analyze(cut, [target], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW)
    result = analysis.targets[0]
    assert result.status == "forecast"
    assert result.tokens == pytest.approx(truth, rel=0.03)
    low, high = result.tokens_interval
    assert low <= truth <= high
    params = analysis.fit.params
    assert params["alpha"] == pytest.approx(0.3, abs=0.03)
    assert params["G"] == pytest.approx(0.15, rel=0.3)


def _multi_power_run(spec: str, steps: int = 4000, seed: int = 1) -> tp.History:
    """A run whose loss follows Luo et al.'s multi-power law, summed step by step."""
    plan = LrSchedule.parse_spec(spec)
    step = np.arange(steps)
    lr = plan.at(step) / plan.peak
    area = np.cumsum(lr)  # S1 + S_W through each step
    l0, a, alpha, b, c, beta, gamma = 2.0, 0.8, 0.45, 0.4, 0.05, 0.6, 0.5
    drop = np.r_[0.0, np.maximum(lr[:-1] - lr[1:], 0.0)]
    ld = np.zeros(steps)
    for k in np.flatnonzero(drop):
        since = area - area[k - 1]  # lr summed from step k on
        ld[k:] += b * drop[k] * (1 - (c * max(lr[k], 1e-9) ** -gamma * since[k:] + 1) ** -beta)
    loss = l0 + a * (np.maximum(area, 1.0) / 1000.0) ** -alpha - ld + np.random.default_rng(seed).normal(0, 0.005, steps)
    frame = pd.DataFrame({"step": step, "lr": lr, "train_loss": loss})[::4]
    return tp.build_history(frame, run="multi-power synthetic", batch_size=131072.0)


def test_multi_power_law_recovers_a_run_that_follows_it():
    spec = "wsd:warmup=100,total=4000,decay=0.4,final=0.05"
    history = _multi_power_run(spec)
    cut, target, truth = _protocol(history, 0.8, 0.95)  # the cut has seen half the decay
    analysis = tp.analyze(cut, [target], model="multi-power", lr_schedule=spec, ema_token_window=WINDOW)
    result = analysis.targets[0]
    assert result.status == "forecast"
    assert result.tokens == pytest.approx(truth, rel=0.03)


def test_the_planned_decay_is_what_brings_a_wsd_run_to_its_target():
    """Cut before the decay: without the plan the forecast must assume the lr stays."""
    spec = "wsd:warmup=100,total=3000,decay=0.25,final=0.05"
    history = _run(spec, gain=0.2)
    cut, target, truth = _protocol(history, 0.5, 0.95)
    planned = tp.analyze(cut, [target], lr_schedule=spec, ema_token_window=WINDOW)
    unplanned = tp.analyze(cut, [target], ema_token_window=WINDOW)
    assert planned.targets[0].tokens == pytest.approx(truth, rel=0.1)
    # without the plan the forecast rests on an assumption, and says so
    assert any("nothing says how the run ends" in note for note in unplanned.notes)
    assert unplanned.plan.schedule is None
    assert planned.plan.schedule.source == "spec"


def test_a_forecast_past_a_decay_the_log_has_not_shown_says_it_rests_on_the_gain_prior():
    spec = "wsd:warmup=100,total=3000,decay=0.25,final=0.05"
    cut, target, _ = _protocol(_run(spec, gain=0.2), 0.5, 0.95)
    before = tp.analyze(cut, [target], lr_schedule=spec, ema_token_window=WINDOW, anneal_gain=0.05)
    [note] = [n for n in before.notes if "not in the log yet" in n]
    # the plan sheds 95% of the peak, the log none of it; the loss the decay removes by the
    # plan's end is the prior's 5% of the loss per full decay, so 95% of that here
    assert "the plan 95%" in note and "5% of the loss for a full decay, anneal_gain" in note
    assert f"{before.fit.planned_gain:.4g}" in note
    assert before.fit.planned_gain == pytest.approx(0.05 * 0.95 * before.fit.prior_mean / 0.05, rel=0.5)
    # once the log holds the decay, its gain is measured, not the prior's
    late, target, _ = _protocol(_run(spec, gain=0.2), 0.9, 0.95)
    # the target the run reaches at 95% of its tokens: within the plan, a forecast, which could have said it
    after = tp.analyze(late, [target], lr_schedule=spec, ema_token_window=WINDOW)
    assert after.targets[0].status == tp.Status.FORECAST
    assert not any("not in the log yet" in n for n in after.notes)


def test_the_ema_lag_does_not_bias_the_forecast():
    """A window of 300 steps lags the loss by ~150 steps; fitting the raw loss does not."""
    history = _run(noise=0.002)
    window = 300 * 131072.0
    cut, target, truth = _protocol(history, 0.5, 0.8, window)
    analysis = tp.analyze(cut, [target], model="lr-annealing", lr_schedule=COSINE, ema_token_window=window)
    assert analysis.targets[0].tokens == pytest.approx(truth, rel=0.01)
    # the law was fitted to the raw loss: its residuals there average out
    assert abs(float(np.mean(analysis.fit.residuals))) < 0.002


def test_loss_spikes_do_not_drag_the_fit():
    clean = _run(noise=0.005)
    frame = clean.frame()
    spikes = frame.index[50:350:30]
    frame.loc[spikes, "loss"] += 1.5
    spiky = tp.build_history(frame.rename(columns={"batch": "global_batch", "loss": "train_loss"}), run="spiky")
    cut_clean, target, _ = _protocol(clean, 0.5, 0.8)
    cut_spiky = spiky.head(len(cut_clean))
    one = tp.analyze(cut_clean, [target], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW)
    two = tp.analyze(cut_spiky, [target], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW)
    assert two.fit.params["alpha"] == pytest.approx(one.fit.params["alpha"], rel=0.05)


def test_the_answer_does_not_hang_on_the_starting_guess():
    history = _run()
    timeline = build_timeline(history, LrSchedule.parse_spec(COSINE))
    obs = observations(history.step[20:300], history.loss[20:300], timeline)
    fits = [
        fit_law(LR_ANNEALING, obs, timeline, ema_window=WINDOW, start_step=100.0, start=np.array([guess]))
        for guess in (0.05, 0.3, 2.0)
    ]
    alphas = [f.params["alpha"] for f in fits]
    assert max(alphas) - min(alphas) < 1e-4


@pytest.mark.parametrize(
    ("loss", "lr", "reason"),
    [
        (np.full(40, 3.0), 1.0, "the loss does not change over the fit window"),
        (np.linspace(4, 3, 40), 0.0, "the lr area does not grow"),
    ],
)
def test_degenerate_windows_fail_with_a_reason(loss, lr, reason):
    frame = pd.DataFrame({"step": np.arange(1, 41), "train_loss": loss, "lr": lr})
    history = tp.build_history(frame, run="degenerate", batch_size=1000)
    timeline = build_timeline(history, None)
    failure = fit_law(
        LR_ANNEALING, observations(history.step, history.loss, timeline), timeline, ema_window=1e4, start_step=1.0
    )
    assert isinstance(failure, FitFailure) and reason in failure.reason
    analysis = tp.analyze(frame, [1.0], batch_size=1000, ema_token_window=1e4, fit_start_step=1)
    assert analysis.targets[0].status == "not_enough_data"
    assert reason in analysis.targets[0].note


def test_too_few_rows_is_a_failed_fit_not_a_crash():
    history = _run()
    timeline = build_timeline(history, None)
    fit = fit_window("multi-power", history, 10, 14, timeline, WINDOW, None)
    assert isinstance(fit, FitFailure) and "needs at least 5 points in the fit window, has 4" in fit.reason
    frame = pd.DataFrame({"step": range(20), "train_loss": np.linspace(5, 4, 20), "lr": 1.0})
    analysis = tp.analyze(frame, [3.0], batch_size=1000, ema_token_window=2000, fit_start_step=16)
    assert analysis.targets[0].status == "not_enough_data" and "only 4 logged rows" in analysis.targets[0].note


def test_block_length_follows_the_autocorrelation():
    rng = np.random.default_rng(0)
    white = rng.normal(size=2000)
    wandering = np.zeros(2000)
    for i in range(1, 2000):
        wandering[i] = 0.95 * wandering[i - 1] + white[i]
    assert _block_length(white) <= 3
    assert _block_length(wandering) >= 20


@pytest.mark.parametrize("spec, gain", [(COSINE, 0.15), ("constant:warmup=100", 0.0)])
def test_batched_refits_agree_with_one_by_one_refits(spec, gain):
    """The bootstrap's refits are each fit's own refit (one search for every fit), and they differ."""
    history = _run(spec, gain=gain).head(1800)
    timeline = build_timeline(history, LrSchedule.parse_spec(spec))
    fit = fit_window("lr-annealing", history, 20, len(history), timeline, WINDOW, GainPrior())
    assert not isinstance(fit, FitFailure)
    resampler = _Resampler(fit)
    rng = np.random.default_rng(3)
    draws = [resampler.draw(rng) for _ in range(30)]
    batched = refit_many(fit, np.array([loss for loss, _ in draws]), [mean for _, mean in draws])
    alone = [fit.refit(loss, mean) for loss, mean in draws]
    assert np.std([r.theta[0] for r in alone]) > 1e-3 * fit.theta[0]  # the replicates differ
    for many, one in zip(batched, alone):
        np.testing.assert_allclose(many.theta, one.theta, rtol=1e-4)
        np.testing.assert_allclose(many.coef, one.coef, rtol=1e-3, atol=1e-6)
        np.testing.assert_allclose(many.fitted, one.fitted, rtol=1e-5)


def test_an_ema_started_late_agrees_with_the_whole_one_where_it_is_used():
    spec = "cosine:warmup=100,total=12000,final=0.1"
    history = _run(spec, steps=12000).head(1500)  # 7,500 steps logged; the EMA spans 191
    timeline = build_timeline(history, LrSchedule.parse_spec(spec))
    fit = fit_window("lr-annealing", history, 20, len(history), timeline, WINDOW, GainPrior())
    steps, whole = fit.smoothed()
    late_steps, (late,) = smooth_after([fit], timeline.last_step)
    assert steps[0] + 0.6 * (timeline.last_step - steps[0]) < late_steps[0] < timeline.last_step  # skips most of the log
    np.testing.assert_array_equal(late_steps, steps[-len(late_steps):])
    ahead = late_steps > timeline.last_step
    np.testing.assert_allclose(late[ahead], whole[-len(late_steps):][ahead], rtol=1e-12)


def test_intervals_cover_the_truth_about_as_often_as_they_say():
    """Runs whose noise wanders (AR(1)): an 80% interval holds the truth in most of them."""
    covered, widths = [], []
    spec = "cosine:warmup=100,total=2000,final=0.1"
    for seed in range(12):
        history = _run(spec, steps=2000, noise=0.01, seed=seed, noise_correlation=0.9)
        cut, target, truth = _protocol(history, 0.5, 0.8)
        result = tp.analyze(cut, [target], model="lr-annealing", lr_schedule=spec, ema_token_window=WINDOW).targets[0]
        low, high = result.tokens_interval
        covered.append(low <= truth <= high)
        widths.append(high / low)
    assert 0.6 <= np.mean(covered) <= 1.0
    assert 1.0 < np.median(widths) < 2.0


def test_chance_of_reaching_a_target_within_the_plan():
    history = _run()
    cut, target, truth = _protocol(history, 0.5, 0.8)
    smoothed = token_window_ema(history.loss, history.step, history.batch, WINDOW)
    beyond = float(smoothed[-1]) - 0.05  # lower than the full run ever got
    analysis = tp.analyze(cut, [target, beyond], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW)
    within, after = analysis.targets
    assert within.p_reach_within_plan >= 0.9
    assert after.p_reach_within_plan is not None and after.p_reach_within_plan <= 0.2


def test_auto_reports_its_choice_and_the_evidence():
    history = _run(noise=0.005)
    cut, target, _ = _protocol(history, 0.6, 0.8)  # the cosine has shed about half of the lr
    analysis = tp.analyze(cut, [target], lr_schedule=COSINE, ema_token_window=WINDOW)
    selection = analysis.selection
    assert selection.chosen in ("lr-annealing", "multi-power")
    assert {name for name, _ in selection.scores} == {"lr-annealing", "multi-power"}
    assert all(score is not None and score >= 0 for _, score in selection.scores)
    assert analysis.fit.name == selection.chosen
    doc = tp.to_json(analysis)
    assert doc["model_selection"]["chosen"] == selection.chosen
    assert doc["targets"][0]["model"]["name"] == selection.chosen
    early, *_ = _protocol(history, 0.15, 0.3)  # little decay seen yet: the richer law is not fitted
    assert tp.analyze(early, [1.0], lr_schedule=COSINE, ema_token_window=WINDOW).selection.chosen == "lr-annealing"


def test_the_clock_changes_what_a_step_counts():
    frame = synthetic_run(3000, batch=[(0, 65536.0), (1500, 262144.0)], noise=0.005, log_every=5, seed=4)
    history = tp.build_history(frame, run="dynamic")
    cut, target, truth = _protocol(history, 0.4, 0.7)
    by_tokens = tp.analyze(cut, [target], clock="tokens", model="lr-annealing", ema_token_window=WINDOW).targets[0]
    by_steps = tp.analyze(cut, [target], clock="steps", model="lr-annealing", ema_token_window=WINDOW).targets[0]
    # the loss follows tokens: the tokens clock stays right across the batch switch
    assert abs(math.log(by_tokens.tokens / truth)) < abs(math.log(by_steps.tokens / truth))
    assert by_tokens.tokens == pytest.approx(truth, rel=0.05)


def test_a_plan_from_the_runs_params_is_used_unless_one_is_given():
    """Tracker adapters put LrSchedule.from_params(run params) in History.lr_plan."""
    history = _run()
    cut, target, truth = _protocol(history, 0.5, 0.8)
    params = {"lr_scheduler": "cosine", "warmup_steps": "100", "max_steps": "3000", "min_lr_ratio": "0.1"}
    with_params = replace(cut, lr_plan=LrSchedule.from_params(params))
    analysis = tp.analyze(with_params, [target], model="lr-annealing", ema_token_window=WINDOW)
    assert analysis.plan.schedule.source == "params"
    assert "(run params: lr_scheduler=cosine, warmup_steps=100, max_steps=3000, min_lr_ratio=0.1)" in analysis.plan.note
    assert analysis.targets[0].tokens == pytest.approx(truth, rel=0.03)
    given = tp.analyze(with_params, [target], model="lr-annealing", lr_schedule="constant:warmup=100",
                       ema_token_window=WINDOW)
    assert given.plan.schedule.source == "spec"


def test_the_sweep_fits_every_window_on_its_own_rows():
    history = _run()
    cut, target, _ = _protocol(history, 0.6, 0.9)
    analysis = tp.analyze(cut, [target], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW,
                          stability_sweep=True, sweep_step=100, sweep_min_window=200)
    sweep = analysis.targets[0].sweep
    tokens = [row.tokens for row in sweep.rows]
    assert len(tokens) >= 10 and all(t is not None for t in tokens)
    assert len(set(tokens)) == len(tokens)  # no two windows share their data
    assert sweep.rows[-1].max_step == cut.last_step
    # the last window is the whole window: the same law as the forecast's, up to reweighting
    assert sweep.rows[-1].fit.params["alpha"] == pytest.approx(analysis.fit.params["alpha"], rel=0.02)
    assert sweep.verdict in ("converged", "not_converged")


def test_each_plan_source_gets_its_inflation():
    given = Plan(LrSchedule.parse_spec("cosine:warmup=10,total=1000,final=0.1"), "planned")
    assumed = Plan(None, "no lr logged: constant assumed")
    inferred = Plan(replace(given.schedule, source="inferred"), "inferred")
    assert plan_inflation(given) == forecast.INTERVAL_INFLATION
    assert plan_inflation(assumed) == plan_inflation(inferred) == forecast.UNKNOWN_PLAN_INFLATION
    # The spread around the point forecast scales in log tokens; never before the log's end,
    # and a replicate that never reaches the target stays never.
    draws = np.array([50.0, 200.0, 400.0, np.inf])
    moved = _inflated(draws, 200.0, 100.0, 1.5)
    assert moved[1] == pytest.approx(200.0) and moved[2] == pytest.approx(200.0 * 2.0**1.5)
    assert moved[0] == pytest.approx(100.0) and np.isinf(moved[3])


# A constant lr after a 100-step warmup, the loss a power law in the lr-weighted tokens: the
# log starts at step 100, and the lr before a log is taken as a linear warmup from 0.
FIVE_ROW_PLAN = "constant:warmup=100,total=2000"


def _five_row_forecasts(every: int, seed: int) -> tuple[float, tuple[float, float], float]:
    """(tokens, interval, true tokens) from rows at steps 100..500 of a constant-lr power-law run."""
    frame = synthetic_run(600, batch=131072.0, noise=0.01, log_every=every, seed=seed, lr_schedule=FIVE_ROW_PLAN)
    frame = frame[frame.step >= 100]
    # The target: the noiseless loss at step 1000, as the generator computes it.
    clean = synthetic_run(1001, batch=131072.0, noise=0.0, lr_schedule=FIVE_ROW_PLAN)
    truth = float(clean.tokens.iloc[1000])
    target = float(clean.train_loss.iloc[1000])
    result = tp.analyze(frame, [target], batch_size=131072.0, ema_token_window=2 * 131072.0).targets[0]
    assert result.status == "forecast_beyond_plan", result.note
    return result.tokens, result.tokens_interval, truth


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_five_points_without_a_decay_still_forecast_with_a_wider_interval(seed):
    # Five logged rows of a constant lr: the law is L0 + A * S1 ** -alpha there (the gain's
    # column is zero), three parameters, so five points leave two for the noise.
    tokens, (low, high), truth = _five_row_forecasts(100, seed)
    assert low <= truth <= high
    assert abs(math.log(tokens / truth)) < 0.3
    # The same stretch logged every 20 steps (25 rows) gives a narrower interval.
    _, (low25, high25), _ = _five_row_forecasts(20, seed)
    assert math.log(high / low) > math.log(high25 / low25)


def test_five_points_that_show_a_decay_need_one_more():
    history = _run("step:warmup=0,total=80,at=40,factor=0.5", steps=80, noise=0.001, gain=0.1)
    timeline = build_timeline(history, None)
    first = int(np.searchsorted(history.step, 30))
    fit = fit_window("lr-annealing", history, first, first + 5, timeline, 1e6, None)
    assert isinstance(fit, FitFailure)
    assert "needs at least 6 points in the fit window (it shows an lr decay" in fit.reason
    assert not isinstance(fit_window("lr-annealing", history, first, first + 6, timeline, 1e6, None), FitFailure)


def _shifted_run(offset: float, *, steps: int = 20_000, every: int = 100, warmup: int = 200, seed: int = 0) -> tp.History:
    """A constant-lr run (after a linear warmup) whose loss follows the law in the lr area
    ``S`` (in peak-lr steps) from an origin ``offset`` steps' worth of area away from step 0:
    ``2 + 3 * ((S + offset) / 1000) ** -0.3``, evaluated every ``every`` steps from the
    first at which the law is defined."""
    step = np.arange(0, steps, every)
    area = np.where(step < warmup, (step + 1) * (step + 2) / (2 * warmup), warmup / 2 + 0.5 + (step + 1 - warmup))
    keep = area + offset > 0
    step, area = step[keep], area[keep]
    lr = np.minimum(1.0, (step + 1) / warmup)
    loss = 2.0 + 3.0 * ((area + offset) / 1000.0) ** -0.3 + np.random.default_rng(seed).normal(0, 0.002, len(step))
    frame = pd.DataFrame({"step": step, "lr": 3e-4 * lr, "train_loss": loss})
    return tp.build_history(frame, run=f"constant lr, origin offset {offset:g}", batch_size=131072.0)


def _long_forecast_errors(history: tp.History) -> list[float]:
    """ln(predicted / true tokens) from a quarter of the run to the smoothed loss at 0.8 and
    0.95 of its tokens (3.2x and 3.8x beyond the log), the lr plan given, fitted from step
    1000 (the law's window then starts at a fifth of its lr area)."""
    window = 20 * 131072.0
    cuts = [_protocol(history, 0.25, quantile, window=window) for quantile in (0.8, 0.95)]
    analysis = tp.analyze(cuts[0][0], [target for _, target, _ in cuts], model="lr-annealing",
                          lr_schedule="constant:warmup=200", ema_token_window=window, fit_start_step=1000)
    assert all(t.status == "forecast_beyond_plan" for t in analysis.targets)
    return [math.log(t.tokens / truth) for t, (_, _, truth) in zip(analysis.targets, cuts)]


@pytest.mark.parametrize("offset", [800.0, -500.0])
def test_a_long_constant_lr_forecast_from_sparse_evals_is_unbiased(offset, monkeypatch):
    """200 evals over the run, cut at a quarter (40 of them fitted): the law's origin is not
    the run's, and the fitted shift finds it. Over eight seeds the mean signed error is
    within 0.03 and each seed's within 0.15 (the shift, the exponent and the asymptote trade
    against each other on 40 noisy points). Held at 0, the exponent bends to meet step 0
    and the mean is off by more than 0.05 (by +0.08 and +0.66 at these offsets)."""
    from tracker_plugin.core.models import schedule_law

    runs = [_shifted_run(offset, seed=seed) for seed in range(8)]
    free = np.array([_long_forecast_errors(run) for run in runs])
    assert abs(free.mean()) < 0.03 and np.abs(free).max() < 0.15, free
    monkeypatch.setattr(schedule_law, "SHIFT_MIN_POINTS", 10**9)
    fixed = np.array([_long_forecast_errors(run) for run in runs])
    assert abs(fixed.mean()) > 0.05, fixed


def test_the_shift_stops_at_its_bound_where_the_law_would_start_inside_the_window():
    """A law whose origin lies just inside the fit window (its power would be infinite
    there): the fitted shift stops at its lower bound, just above minus the window's first
    relative area, and the fit and its forecast stay finite."""
    from tracker_plugin.core.models import schedule_law

    history = _shifted_run(-0.9995 * (200 / 2 + 0.5 + 801.0), seed=1)  # the area at step 1000, the fit start
    timeline = build_timeline(history, LrSchedule.parse_spec("constant:warmup=200"))
    first = int(np.searchsorted(history.step, 1000))
    obs = observations(history.step[first:], history.loss[first:], timeline)
    fit = fit_law(LR_ANNEALING, obs, timeline, ema_window=20 * 131072.0, start_step=1000.0)
    assert not isinstance(fit, FitFailure)
    bound = -(1 - schedule_law._SHIFT_FLOOR) * float(timeline.area_at(np.array([1000.0]))[0]) / fit.area_ref
    assert fit.shift == pytest.approx(bound, rel=1e-6)
    assert fit.status.evaluations > 0 and "least_squares" in fit.status.reason
    steps, curve = fit.smoothed()
    assert np.isfinite(curve).all() and np.isfinite(fit.predict_steps(np.array([1000.0, 1e6]))).all()


def test_a_positive_shift_is_held_where_the_law_would_start_below_the_log(monkeypatch):
    """A positive shift says the run had trained before step 0, so the law puts a finite loss
    at the log's first row. The run of a law with an origin 400 steps back keeps its shift
    (the law meets its first row); the same run logging 10.0 at step 0 (an init loss the
    early steps shed faster than the law allows) holds it at 0, and with the check off the
    fit would take a positive shift there."""
    from tracker_plugin.core.models import schedule_law

    def fitted_shift(first_loss: float | None) -> float:
        history = _shifted_run(400.0, steps=6000)
        if first_loss is not None:
            loss = history.loss.copy()
            loss[0] = first_loss
            frame = pd.DataFrame({"step": history.step, "lr": history.lr, "train_loss": loss})
            history = tp.build_history(frame, run="a high first loss", batch_size=131072.0)
        timeline = build_timeline(history, LrSchedule.parse_spec("constant:warmup=200"))
        first = int(np.searchsorted(history.step, 1000))
        obs = observations(history.step[first:], history.loss[first:], timeline)
        fit = fit_law(LR_ANNEALING, obs, timeline, ema_window=20 * 131072.0, start_step=1000.0)
        assert not isinstance(fit, FitFailure)
        return fit.shift

    assert fitted_shift(None) > 0.0
    assert fitted_shift(10.0) == 0.0
    monkeypatch.setattr(schedule_law, "_SHIFT_START_TOLERANCE", 1.0)  # never short
    assert fitted_shift(10.0) > 0.0


def test_a_window_of_few_points_holds_the_shift_at_0():
    """Below SHIFT_MIN_POINTS binned points the shift is not identified: it stays 0."""
    from tracker_plugin.core.models import schedule_law

    history = _shifted_run(1000.0, every=1000)
    timeline = build_timeline(history, LrSchedule.parse_spec("constant:warmup=200"))
    for rows, free in ((schedule_law.SHIFT_MIN_POINTS - 1, False), (schedule_law.SHIFT_MIN_POINTS, True)):
        obs = observations(history.step[1:rows + 1], history.loss[1:rows + 1], timeline)
        fit = fit_law(LR_ANNEALING, obs, timeline, ema_window=20 * 131072.0, start_step=float(history.step[1]))
        assert (fit.shift != 0.0) == free, (rows, fit.shift)


def test_the_shift_is_held_where_the_lr_is_assumed():
    """With no lr logged and no plan the lr area is a guess (a constant lr from step 0): the
    shift would take up the unknown schedule, so it stays 0; the same run with its lr
    logged fits it."""
    history = _shifted_run(500.0)
    frame = pd.DataFrame({"step": history.step, "train_loss": history.loss})
    unknown = tp.build_history(frame, run="no lr", batch_size=131072.0)
    for run, free in ((history, True), (unknown, False)):
        analysis = tp.analyze(run.head(50), [2.5], model="lr-annealing", ema_token_window=20 * 131072.0,
                              fit_start_step=1000)
        assert (analysis.fit.shift != 0.0) == free, (run.run, analysis.fit.params)


def test_the_shift_is_held_once_the_window_has_seen_a_decay():
    """Past a quarter of the peak lr shed the decay's response bends the curve and the
    shift would trade against it: held. Early in the same run (little shed yet) it is fitted."""
    history = _run(noise=0.002)
    early, late = history.head(200), history.head(500)  # steps to 1000 and 2500 of a 3000-step cosine
    for cut, free in ((early, True), (late, False)):
        analysis = tp.analyze(cut, [2.0], model="lr-annealing", lr_schedule=COSINE, ema_token_window=WINDOW,
                              fit_start_step=300)
        assert (analysis.fit.shift != 0.0) == free, (cut.step[-1], analysis.fit.params)


def _flat_timeline(tokens: np.ndarray) -> Timeline:
    """A timeline whose steps are its tokens (all the loss horizons read)."""
    ones = np.ones_like(tokens)
    return Timeline(step=tokens, lr=ones, batch=ones, tokens=tokens, area=tokens, clock_steps=tokens, clock="tokens",
                    reference_batch=1.0, last_step=float(tokens[0]), plan_end=None)


def test_the_loss_horizon_is_the_horizon_on_a_curve_straight_in_ln_tokens_and_longer_where_it_flattens():
    tokens = np.geomspace(1e6, 1e9, 4000)
    timeline = _flat_timeline(tokens)
    straight = 3.0 - 0.1 * np.log(tokens / 1e6)
    flattening = 3.0 - 0.2 * (1 - (tokens / 1e6) ** -0.5)
    drawn = forecast_draws._Drawn(tokens, [], [], [straight, flattening])
    target = 2.85
    crossings = [1e6 * math.exp(1.5), 1e6 * (1 - 0.15 / 0.2) ** -2.0]
    straight_h, flat_h = drawn.loss_horizons(timeline, target, crossings)
    assert straight_h == pytest.approx(1.5, rel=1e-3)  # the fall 0.15 over a slope of 0.1 per e-fold
    # At 16x the slope is 0.1 * 16 ** -0.5 = 0.025 per e-fold: 6.0, against a horizon of ln 16 = 2.77.
    assert flat_h == pytest.approx(6.0, rel=1e-2) and flat_h > math.log(16)
    assert drawn.loss_horizons(timeline, target, [math.inf, math.inf]) == (0.0, 0.0)  # no crossing
    assert drawn.loss_horizons(timeline, 3.5, crossings) == (0.0, 0.0)  # no fall to come


def test_the_interval_widens_by_its_share_of_a_longer_loss_horizon_only():
    observed, raw = 1e8, np.array([1e8 * math.e, 1e8 * math.e])
    shifts = np.array([1.0, -1.0])
    alone = forecast.stretched(raw, shifts, 0.2, observed, math.inf)
    np.testing.assert_allclose(np.log(alone / observed), np.exp([0.2, -0.2]), rtol=1e-12)  # h * exp(scale * t)
    longer = np.array([3.0, 3.0])
    np.testing.assert_array_equal(forecast.stretched(raw, shifts, 0.2, observed, math.inf, longer, 0.0), alone)
    widened = forecast.stretched(raw, shifts, 0.2, observed, math.inf, longer, 1.0)
    np.testing.assert_allclose(np.log(widened / raw), 3.0 * (np.exp([0.2, -0.2]) - 1), rtol=1e-12)
    half = forecast.stretched(raw, shifts, 0.2, observed, math.inf, longer, 0.5)
    np.testing.assert_allclose(np.log(half / raw), 2.0 * (np.exp([0.2, -0.2]) - 1), rtol=1e-12)
    shorter = np.array([0.5, 0.5])  # a steep curve keeps the horizon's spread
    np.testing.assert_allclose(forecast.stretched(raw, shifts, 0.2, observed, math.inf, shorter, 1.0), alone, rtol=1e-12)


def test_auto_compares_the_laws_only_where_the_log_had_begun_its_decay():
    """Inner cuts before the decay score the multi-power law's response on its prior alone;
    ``auto`` (and its replay under any rule) compares the laws on the cuts that had shed a
    share of what the log has shed, the multi-power law forecasting where none had."""
    from tracker_plugin.core.backtest import BacktestCase
    from tracker_plugin.core.cross_family_cases import Cut, Rule, _auto
    from tracker_plugin.core.status import Status

    inner_la, inner_mp = ((0.01, 0.0), (0.01, 0.05), (0.2, 0.3)), ((0.3, 0.0), (0.3, 0.05), (0.1, 0.3))
    assert forecast.selection_score(inner_la, 0.1) == pytest.approx(0.2)
    assert forecast.selection_score(inner_la, 0.0) == pytest.approx(0.22 / 3)
    assert forecast.selection_score(inner_la, 0.5) is None
    la = BacktestCase("r", "lr-annealing", 0.5, 0.8, 3.0, 1e9, Status.FORECAST, inner=inner_la)
    mp = replace(la, model="multi-power", inner=inner_mp)
    cut = Cut("r", "fam", 0.5, 0.6, 1e8, "log")
    assert _auto(la, mp, cut, Rule(0.1, 0.0, 0.1, compared=0.25)) is mp  # the last cut alone: 0.1 against 0.2
    assert _auto(la, mp, cut, Rule(0.1, 0.0, 0.1, compared=0.0)) is la  # every cut: 0.07 against 0.23
    assert _auto(la, mp, cut, Rule(0.1, 0.0, 0.1, compared=0.75)) is mp  # no cut sheds 0.45: the richer law
    assert _auto(la, mp, replace(cut, seen_decay=0.05), Rule(0.1, 0.0, 0.1)) is la  # the log itself is before the gate


def test_an_inner_fit_that_did_not_converge_is_said(monkeypatch):
    """An inner cut whose solver spent its evaluation budget is scored as fitted, and the
    analysis says so in a note (it was used without a word)."""
    from tracker_plugin.core.models.base import FitStatus

    real = law_selection.fit_window
    spent = FitStatus(False, "the maximum number of function evaluations is exceeded", 3000)

    def budget_spent_at_70(name, history, first, end, *args, **kwargs):
        fit = real(name, history, first, end, *args, **kwargs)
        cut = history.tokens[end - 1] / history.tokens[-1]
        if not isinstance(fit, FitFailure) and 0.65 < cut <= 0.75:
            return replace(fit, status=spent)
        return fit

    run = synthetic_run(600, lr_schedule="cosine:warmup=50,total=1200,final=0.1", seed=3)
    history = tp.build_history(run, run="r")
    config = tp.AnalysisConfig(targets=(float(run["train_loss"].iloc[-50:].mean()) - 0.2,), model="lr-annealing")
    before = run_analysis(history, config)
    assert not any("stopped without converging" in note for note in before.notes)
    monkeypatch.setattr(law_selection, "fit_window", budget_spent_at_70)
    after = run_analysis(history, config)
    assert after.selection is not None and after.selection.unconverged == (("lr-annealing", 0.7),)
    assert any("inner fit of the law choice (lr-annealing at 70% of the logged run) stopped without converging"
               in note for note in after.notes)
