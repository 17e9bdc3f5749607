"""The plain-loop live forecast: rows in as a loop logs them, forecasts off the loop's thread.

A live forecast on the rows so far is the analysis of the same log cut there (the same
numbers); the loop is never blocked (a forecast due while one runs is skipped, never
queued), never raised into, and waits for its rows and the lr warmup.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests import readme_examples
from tracker_plugin import build_history
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.status import Status
from tracker_plugin.errors import ConfigError
from tracker_plugin.keys import SERIES_LOSS, SERIES_TOKENS
from tracker_plugin.live import LiveForecast, stream
from tracker_plugin.plan.schedule import LrSchedule


@pytest.fixture(scope="module")
def nanogpt(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "nanogpt-124M-adamw-llmc.csv")


def feed(live: LiveForecast, frame: pd.DataFrame, until: int, *, tokens: bool = True) -> None:
    for row in frame[frame.step <= until].itertuples():
        live.update(int(row.step), float(row.train_loss), tokens=float(row.tokens) if tokens else None,
                    lr=float(row.lr), time=1.7e9 + 0.3 * row.step)


def test_a_live_forecast_is_the_analysis_of_the_same_rows(nanogpt):
    plan = LrSchedule.from_table(nanogpt.step.tolist(), nanogpt.lr.tolist(), source="scheduler")
    live = LiveForecast([3.3, 3.2], plan=plan, tokens_per_step=524288, background=False, every_logs=10_000,
                        every_seconds=0)
    feed(live, nanogpt, until=4000, tokens=False)
    result = live.forecast()
    assert result is not None and result.step == 4000 and result.rows == 4001
    cut = nanogpt[nanogpt.step <= 4000].assign(time=lambda f: 1.7e9 + 0.3 * f.step)
    batch = run_analysis(build_history(cut[["step", "global_batch", "lr", "train_loss", "time"]], run="x"),
                         AnalysisConfig(targets=(3.3, 3.2), lr_schedule=plan))
    # 3.3 is forecast within the plan; the plan ends (step 9,536) before the law reaches 3.2 (the run ends at 3.30):
    # at step 4,000 of 9,536 that is a chance (unlikely), not an early no
    assert [t.status for t in batch.targets] == [Status.FORECAST, Status.UNLIKELY]
    for mine, theirs in zip(result.analysis.targets, batch.targets, strict=True):
        assert mine.status == theirs.status
        if theirs.tokens is None:  # unlikely: no crossing reported; the law's, kept, is the same
            assert mine.tokens is None and mine.best_loss == theirs.best_loss
            np.testing.assert_allclose(mine.law_tokens, theirs.law_tokens, rtol=1e-9)
            continue
        np.testing.assert_allclose(mine.tokens, theirs.tokens, rtol=1e-9)
    # the keys a tracker logs: every per-target number the annotation writes, finite
    assert result.metrics["when_3p3_Btok"] == pytest.approx(result.analysis.targets[0].tokens / 1e9, rel=1e-3)
    assert result.metrics["when_3p3_step"] == pytest.approx(result.analysis.targets[0].step, abs=0.5)
    assert "when_3p3_hours" in result.metrics
    # and the smoothed loss at the run's last step, with its tokens: the curve the trackers draw
    assert result.metrics[SERIES_LOSS] == pytest.approx(float(batch.smoothed[-1]), rel=1e-5)
    assert result.metrics[SERIES_TOKENS] == round(float(batch.history.tokens[-1]))


_WANDB_LIVE = """
import sys, wandb
from tracker_plugin.live.sinks import TrackerSinks
run = wandb.init(project="live", mode="offline", name="live")
sinks = TrackerSinks()
for step, loss, tokens in ((100, 3.5, 1e8), (200, 3.4, 2e8)):
    sinks.log({"loss_eta_smoothed": loss, "loss_eta_tokens": tokens, "when_3p3_step": 900.0}, step)
run.finish()
"""


def test_a_live_w_and_b_run_draws_the_smoothed_loss_against_its_tokens(tmp_path):
    # The real SDK, offline: what the sinks log goes into the run's file as the SDK writes it.
    from tests.doubles.wandb_offline_runs import offline_env
    from tracker_plugin.trackers.wandb_log import read_log
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    subprocess.run([sys.executable, "-c", _WANDB_LIVE], env=offline_env(tmp_path), check=True, timeout=300)
    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    from wandb.proto import wandb_internal_pb2 as pb

    defined = {}
    for entry in read_log(wandb_file.read_bytes()):
        record = pb.Record()
        record.ParseFromString(entry.data)
        if record.WhichOneof("record_type") == "metric":
            defined[record.metric.name] = (record.metric.step_metric, record.metric.options.hidden)
    assert defined[SERIES_LOSS] == (SERIES_TOKENS, False) and defined[SERIES_TOKENS][1] is True
    run = read_offline_run(wandb_file, [SERIES_LOSS, SERIES_TOKENS], ref="live")
    assert run.data[SERIES_LOSS][1] == [3.5, 3.4] and run.data[SERIES_TOKENS][1] == [1e8, 2e8]  # in the same rows


def test_the_loop_is_never_blocked_and_a_due_forecast_is_skipped_not_queued(nanogpt, monkeypatch):
    started, release = threading.Event(), threading.Event()
    calls = []
    real = stream.run_analysis

    def slow(history, config):
        calls.append(len(history))
        started.set()
        release.wait(10)
        return real(history, config)

    monkeypatch.setattr(stream, "run_analysis", slow)
    live = LiveForecast([3.3], every_logs=50, every_seconds=0)
    feed(live, nanogpt, until=60)  # the first forecast starts at 50 rows and hangs
    assert started.wait(10)
    feed(live, nanogpt[nanogpt.step > 60], until=400)  # returns although a forecast is in flight
    assert live.skipped >= 5 and len(calls) == 1
    release.set()
    live.close()
    assert len(calls) == 1 and live.latest is not None and live.latest.rows == calls[0]


def test_it_waits_for_rows_and_the_warmup_and_says_so(nanogpt):
    plan = LrSchedule.from_table(nanogpt.step.tolist(), nanogpt.lr.tolist(), source="scheduler")
    live = LiveForecast([3.3], plan=plan, background=False, every_logs=1, every_seconds=0, min_rows=20)
    feed(live, nanogpt, until=5)
    assert live.status == "waiting: 6 of 20 logged rows" and live.forecast() is None
    warmup_end = float(nanogpt.step[nanogpt.lr >= 0.999 * nanogpt.lr.max()].iloc[0])
    feed(live, nanogpt[nanogpt.step > 5], until=int(warmup_end) - 20)
    assert live.status == f"waiting: the lr warmup, which ends at step {warmup_end:g} (now {warmup_end - 20:g})"
    assert live.latest is None
    feed(live, nanogpt[nanogpt.step > warmup_end - 20], until=int(warmup_end) + 5)  # the first forecast after it
    assert live.latest is not None and live.status.startswith("forecast at step")


def test_an_error_inside_a_forecast_is_warned_once_and_never_raised(nanogpt, monkeypatch):
    def broken(history, config):
        raise ZeroDivisionError("inside a fit")

    monkeypatch.setattr(stream, "run_analysis", broken)
    live = LiveForecast([3.3], background=False, every_logs=20, every_seconds=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        feed(live, nanogpt, until=200)
    assert [str(w.message) for w in caught] == [
        "tracker_plugin live forecast: ZeroDivisionError: inside a fit (training goes on)"
    ]
    assert live.status == "failed: ZeroDivisionError: inside a fit"


@pytest.mark.parametrize(
    ("shape", "expect"),
    [
        ("nan-and-inf", "dropped 2 rows whose loss was NaN or infinite"),
        ("diverging", None),
        ("reached-at-first-log", "reached"),
    ],
)
def test_bad_losses_during_training_give_a_result_or_a_status(shape, expect):
    steps = np.arange(0, 400, 2)
    loss = 6.0 * (1 + steps) ** -0.15
    if shape == "nan-and-inf":
        loss[50], loss[60] = np.nan, np.inf
    if shape == "diverging":
        loss[120:] = loss[119] * np.exp(np.linspace(0, 8, len(steps) - 120))
    target = 10.0 if shape == "reached-at-first-log" else 3.3
    live = LiveForecast([target], tokens_per_step=4096, background=False, every_logs=25, every_seconds=0)
    for s, value in zip(steps, loss):
        live.update(int(s), float(value))  # never raises
    result = live.forecast()
    assert result is not None, live.status
    if expect == "reached":
        assert result.analysis.targets[0].status == "reached"
    elif expect is not None:
        assert any(expect in note for note in result.analysis.notes)


def test_other_ranks_do_nothing_and_plans_are_read_as_given(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    quiet = LiveForecast([3.3], background=False)
    quiet.update(0, 5.0)
    assert quiet.status == "off: not rank 0" and quiet.forecast() is None
    monkeypatch.delenv("RANK")
    as_function = LiveForecast([3.3], plan=lambda s: 1e-3 * min(1.0, s / 10), total_steps=100, background=False)
    assert as_function.config.lr_schedule is not None and as_function.config.lr_schedule.at(50) == pytest.approx(1e-3)
    spec = LiveForecast([3.3], plan="cosine:warmup=10,total=100", background=False)
    assert spec.config.lr_schedule is not None and spec.config.lr_schedule.total_steps == 100
    with pytest.raises(ConfigError, match="needs total_steps"):
        LiveForecast([3.3], plan=lambda s: 1.0)
    ends_only = LiveForecast([3.3], total_steps=500, background=False)
    assert ends_only.config.lr_schedule is not None and ends_only.config.lr_schedule.total_steps == 500


def test_the_readme_shows_what_the_live_loop_example_prints():
    root = Path(__file__).resolve().parents[1]
    block = re.search(r"```text\n\$ python examples/live_loop.py\n(.*?)```", (root / "README.md").read_text(), re.S)
    assert block is not None
    done = subprocess.run([sys.executable, "examples/live_loop.py"], cwd=root, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    why = readme_examples.mismatch(block.group(1), done.stdout)  # words exactly, numbers to a relative 1e-3
    assert why is None, why


def test_stopping_when_every_target_is_out_of_reach_within_the_plan():
    from tracker_plugin.live.sinks import should_stop

    steps = np.arange(0, 600, 2)
    loss = 2.0 + 4.0 * (1 + steps) ** -0.3
    live = LiveForecast([1.0, 5.0], plan="cosine:warmup=10,total=1000,final=0", tokens_per_step=4096,
                        background=False, every_logs=10**6, every_seconds=0)
    for s, value in zip(steps, loss):
        live.update(int(s), float(value))
    result = live.forecast()
    assert result is not None
    assert should_stop(result, 600, 1000, 0.5) is False  # 5.0 was reached: not every target is out of reach
    out_of_reach = LiveForecast([1.0], plan="cosine:warmup=10,total=1000,final=0", tokens_per_step=4096,
                                background=False, every_logs=10**6, every_seconds=0)
    for s, value in zip(steps, loss):
        out_of_reach.update(int(s), float(value))
    unreachable = out_of_reach.forecast()
    assert unreachable is not None and unreachable.analysis.targets[0].p_reach_within_plan < 0.05
    assert should_stop(unreachable, 600, 1000, 0.5) is True
    assert should_stop(unreachable, 400, 1000, 0.5) is False  # before min_fraction of the run: never
