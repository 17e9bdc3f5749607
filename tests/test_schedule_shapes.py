"""The multi-power-law runs of benchmarks/bench_schedule_shapes.py, and forecasts on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import backtest_run
from tracker_plugin.core.status import Status
from tracker_plugin.frame.history import build_history
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run

STEPS = 2000
BATCH = 262_144.0


def test_constant_lr_is_the_power_law() -> None:
    law = MultiPowerLaw()
    plan = LrSchedule.parse_spec(f"constant:warmup=1,total={STEPS}")
    frame = multi_power_run(plan, STEPS, law, noise=0.0, log_every=100).iloc[1:]
    area = frame["step"].to_numpy(float)  # one peak-lr step per step after step 0 (the warmup's lr 0)
    expected = law.l0 + law.a * (area / law.s_ref) ** -law.alpha
    np.testing.assert_allclose(frame["train_loss"], expected, rtol=1e-12)


def test_a_step_drop_follows_the_annealing_term() -> None:
    """A drop from the peak to half at step 1000: the loss after it, term by term."""
    law = MultiPowerLaw()
    plan = LrSchedule.from_table([0, 999, 1000, STEPS], [1.0, 1.0, 0.5, 0.5], source="spec")
    frame = multi_power_run(plan, STEPS, law, noise=0.0, log_every=100)
    for step, loss in zip(frame["step"], frame["train_loss"]):
        area = min(step, 999) + 1 + 0.5 * max(step - 999, 0)
        since = 0.5 * max(step - 999, 0)  # lr summed from the drop's step through this one
        gain = law.b * 0.5 * (1 - (law.c * since * 0.5**-law.gamma + 1) ** -law.beta)
        assert loss == pytest.approx(law.l0 + law.a * (area / law.s_ref) ** -law.alpha - gain, rel=1e-12)
    assert frame["train_loss"].iloc[-1] < frame["train_loss"].iloc[10] - 0.05  # the drop removes loss


def _cut(spec: str, fraction: float) -> list:
    plan = LrSchedule.parse_spec(spec)
    frame = multi_power_run(plan, STEPS, MultiPowerLaw(), batch=BATCH, noise=0.01, seed=0)
    history = build_history(frame, run=spec)
    config = AnalysisConfig(targets=(1.0,), lr_schedule=plan, ema_token_window=0.02 * STEPS * BATCH)
    return backtest_run(history, config, fit_fractions=(fraction,), target_quantiles=(0.6, 0.8, 0.95),
                        models=("auto",), plan="infer")


def test_a_wsd_run_cut_at_half_is_forecast_within_ten_percent() -> None:
    cases = _cut(f"wsd:warmup=40,total={STEPS},decay=0.1", 0.5)
    assert [c.status for c in cases] == [Status.FORECAST] * 3
    for c in cases:
        assert c.error is not None and abs(c.error) < 0.1, (c.target_quantile, c.error)
        assert c.p_reach is not None and c.p_reach > 0.5


@pytest.mark.xfail(strict=True, reason="issue 29: a decay barely begun at the cut is fitted with no gain, so the "
                   "law levels off above targets the run reaches within its plan")
def test_a_cosine_run_cut_at_a_quarter_never_calls_a_reachable_target_unreachable() -> None:
    cases = _cut(f"cosine:warmup=40,total={STEPS}", 0.25)
    for c in cases:
        assert math.isfinite(c.true_tokens)  # the run reaches every target within its plan
        assert c.status not in (Status.UNREACHABLE, Status.NOT_REACHED), (c.target_quantile, c.note)
        assert c.p_reach is not None and c.p_reach > 0.0
