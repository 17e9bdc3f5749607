"""Each defect of the original script, fixed and pinned."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
import tracker_plugin.testing
from tracker_plugin.core.analysis import sweep_checkpoints


def test_eval_loss_logged_every_500_steps_is_smoothed_over_tokens_not_rows(data_dir):
    """The original smoothed each eval row as one step: 3.6 at 8e10 and 3.3 at 2.6e11 tokens."""
    history = tp.load_csv(data_dir / "olmo-ladder-370M-5xC.csv", columns=tp.Columns().with_overrides(loss="val_loss"))
    analysis = tp.analyze(history, [3.6, 3.3])
    first, second = analysis.targets
    assert first.status == second.status == "reached"
    assert first.tokens == pytest.approx(3.3e9, rel=0.05)
    assert second.tokens == pytest.approx(1.9e10, rel=0.05)
    # ... which is where the raw eval loss itself crosses
    for result in analysis.targets:
        raw_cross = history.tokens[np.argmax(history.loss <= result.target)]
        assert result.tokens == pytest.approx(raw_cross, rel=0.1)


def test_a_log_without_lr_works(tmp_path):
    frame = tp.testing.synthetic_run(2000, seed=5).drop(columns="lr")
    path = tmp_path / "no_lr.csv"
    frame.to_csv(path, index=False)
    history = tp.load_csv(path)
    assert history.lr is None
    analysis = tp.analyze(history, [5.2, 4.8], ema_token_window=5e7)
    assert [t.status for t in analysis.targets] == ["reached", "forecast_beyond_plan"]
    assert "no lr logged" in analysis.fit_start_reason
    # documented fallback: the first 10% of the logged tokens count as warmup
    assert analysis.fit_start_step == history.step[np.searchsorted(history.tokens, 0.1 * history.last_tokens)]


def test_a_fit_window_starting_at_zero_tokens_works(data_dir):
    history = tp.load_csv(data_dir / "parity_fixed.csv")
    assert history.tokens[0] == 0
    analysis = tp.analyze(history, [4.5], fit_start_step=0, ema_token_window=5e7, stability_sweep=True)
    result = analysis.targets[0]
    assert result.status == "forecast_beyond_plan"
    assert np.isfinite(result.tokens) and result.tokens > history.last_tokens
    assert all(row.fit is not None for row in result.sweep.rows)


@pytest.mark.parametrize(
    ("last_step", "expected_tail"),
    [
        (2999, [2398, 2698, 2999]),  # 2998 would sit one step before the end: replaced
        (3149, [2698, 2998, 3149]),  # 151 steps after the last window: a real new window
        (2850, [2398, 2698, 2850]),  # exactly half a sweep step: kept
    ],
)
def test_the_sweep_final_window_is_never_a_near_duplicate(last_step, expected_tail):
    checkpoints = sweep_checkpoints(fit_start=98, last_step=last_step, every=300, min_window=500)
    assert checkpoints[-3:] == expected_tail
    assert all(b - a >= 150 for a, b in zip(checkpoints, checkpoints[1:]))


def test_fit_window_too_short_is_a_failed_target_not_a_crash():
    frame = pd.DataFrame({"step": range(20), "train_loss": np.linspace(5, 4, 20), "lr": 1.0})
    analysis = tp.analyze(frame, [4.5, 3.0], batch_size=1000, ema_token_window=2000, fit_start_step=16)
    reached, failed = analysis.targets
    assert reached.status == "reached"
    assert failed.status == "not_enough_data" and "only 4 logged rows" in failed.note
