"""Planned lr schedules: specs, tables, run params, inference from the log; the clock."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.core.clock import TimelineBuilder, build_timeline
from tracker_plugin.errors import ConfigError
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule, infer_lr_schedule
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers.csvfile import read_lr_schedule


@pytest.mark.parametrize(
    ("spec", "steps", "expected"),
    [
        ("cosine:warmup=2000,total=50000,final=0.1", [0, 1000, 2000, 26000, 50000, 60000], [0, 0.5, 1, 0.55, 0.1, 0.1]),
        ("linear:warmup=100,total=1100,final=0", [50, 100, 600, 1100], [0.5, 1, 0.5, 0]),
        ("wsd:warmup=100,total=1000,decay=0.2,final=0", [500, 800, 900, 1000], [1, 1, 0.5, 0]),
        ("wsd:total=1000,decay=300,decay_shape=cosine,final=0.2", [700, 850, 1000], [1, 0.6, 0.2]),
        ("step:at=8000/12000,factor=0.3,total=16000", [7999, 8001, 11000, 12001, 16000], [1, 0.3, 0.3, 0.09, 0.09]),
        ("constant:warmup=10", [0, 5, 10, 1e6], [0, 0.5, 1, 1]),
    ],
)
def test_spec_shapes(spec, steps, expected):
    schedule = LrSchedule.parse_spec(spec)
    np.testing.assert_allclose(schedule.at(steps) / schedule.peak, expected, atol=2e-3)
    assert schedule.source == "spec" and spec in schedule.description


def test_spec_peak_scales_and_total_is_the_plan_end():
    schedule = LrSchedule.parse_spec("cosine:warmup=10,total=100,final=0.1,peak=3e-4")
    assert schedule.peak == pytest.approx(3e-4)
    assert schedule.total_steps == 100
    assert LrSchedule.parse_spec("constant:warmup=10").total_steps is None


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("exponential:total=10", "unknown shape 'exponential'"),
        ("cosine:warmup=10", "cosine needs total=STEPS"),
        ("cosine:total=100,final=2", "final is the end lr as a fraction of the peak"),
        ("cosine:total=100,speed=3", "is not KEY=VALUE with KEY one of"),
        ("linear:total=abc", "total='abc' is not a number"),
        ("cosine:warmup=200,total=100", "must come after the warmup"),
        ("wsd:total=100,decay=500", "decay must be a fraction"),
        ("step:total=100,at=x", "at takes step numbers"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, problem):
    with pytest.raises(ConfigError, match="lr_spec") as error:
        LrSchedule.parse_spec(spec)
    assert problem in str(error.value)


@pytest.mark.parametrize(
    "params",
    [
        # MLflow stores params as strings
        {"lr_scheduler": "cosine", "warmup_steps": "2000", "max_steps": "50000", "min_lr": "6e-5", "learning_rate": "6e-4"},
        # a nested W&B config, OLMo's names
        {"optimizer": {"learning_rate": 6e-4}, "scheduler": {"name": "CosWithWarmup", "t_warmup": 2000, "alpha_f": 0.1},
         "max_duration": "1ep", "max_steps": 50000},
        # W&B's {"value": ...} wrapping and a spec string
        {"lr_schedule": {"value": "cosine:warmup=2000,total=50000,final=0.1"}},
        {"lr_scheduler_type": "cosine", "warmup_ratio": 0.04, "max_steps": 50000, "min_lr_ratio": 0.1},
    ],
)
def test_from_params_reads_common_config_spellings(params):
    schedule = LrSchedule.from_params(params)
    assert schedule is not None and schedule.source == "params"
    assert schedule.total_steps == 50000
    np.testing.assert_allclose(schedule.at([2000, 50000]) / schedule.peak, [1.0, 0.1], atol=1e-6)


def test_from_params_returns_none_without_a_schedule():
    assert LrSchedule.from_params({"learning_rate": 3e-4, "batch_size": 512}) is None
    assert LrSchedule.from_params({"lr_scheduler": "cosine"}) is None  # no total: not enough to plan with

def test_from_params_with_a_total_and_no_known_shape_is_steps_only():
    plan = LrSchedule.from_params({"lr_scheduler": "cosine_warm_restarts_v9", "max_steps": 10})
    assert plan is not None and plan.source == "steps-only" and plan.total_steps == 10
    assert plan.params == (("max_steps", "10"),) and "cosine_warm_restarts_v9" in plan.notes[0]
    # HF's max_steps=-1 (train by epochs) is no total
    assert LrSchedule.from_params({"max_steps": -1, "learning_rate": 1e-3}) is None


def test_lr_schedule_file(tmp_path):
    path = tmp_path / "plan.csv"
    pd.DataFrame({"step": [0, 100, 1000], "lr": [0.0, 1e-3, 1e-4]}).to_csv(path, index=False)
    schedule = read_lr_schedule(path)
    assert schedule.source == "file" and schedule.total_steps == 1000
    assert schedule.at(550) == pytest.approx(5.5e-4)
    assert str(path) in schedule.description


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("step,learning\n0,1\n1,2\n", "needs columns step and lr"),
        ("step,lr\n0,1\n1,high\n", "non-numeric value 'high' in row 2"),
        ("step,lr\n0,1\n", "at least two step,lr rows"),
        ("step,lr\n5,1\n3,1\n", "must increase"),
    ],
)
def test_bad_lr_schedule_files(tmp_path, text, problem):
    path = tmp_path / "plan.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match="--lr-schedule") as error:
        read_lr_schedule(path)
    assert problem in str(error.value)


def test_infer_a_cosine_from_half_of_it():
    plan = LrSchedule.parse_spec("cosine:warmup=2000,total=50000,final=0.1")
    steps = np.arange(0, 26000, 500.0)
    inferred = infer_lr_schedule(steps, plan.at(steps))
    assert inferred.schedule is not None and inferred.schedule.source == "inferred"
    assert inferred.schedule.total_steps == pytest.approx(50000, rel=0.02)
    assert "cosine decay" in inferred.note and "inferred from the logged lr" in inferred.note
    future = np.array([30000.0, 40000.0, 50000.0])
    np.testing.assert_allclose(inferred.schedule.at(future), plan.at(future), atol=0.01)


def test_infer_a_wsd_decay_once_it_has_started():
    plan = LrSchedule.parse_spec("wsd:warmup=200,total=24000,decay=4000,final=0.1")
    steps = np.arange(0, 23000, 128.0)
    inferred = infer_lr_schedule(steps, plan.at(steps))
    assert inferred.schedule is not None and "linear decay from step 19,968" in inferred.note


def test_without_a_decay_the_assumption_is_said():
    steps = np.arange(0, 5000, 100.0)
    held = infer_lr_schedule(steps, np.minimum(1.0, steps / 1000))
    assert held.schedule is None
    assert "stayed at its peak (1)" in held.note and "nothing says how the run ends" in held.note
    assert "cooldowns it might end in" in held.note and "lr_schedule" in held.note
    unlogged = infer_lr_schedule(steps, None).note
    assert unlogged.startswith("no lr logged") and "cooldowns it might end in" in unlogged


def test_tokens_clock_counts_a_doubled_batch_twice_and_steps_clock_does_not():
    frame = pd.DataFrame({"step": np.arange(0, 200), "train_loss": np.linspace(5, 4, 200), "lr": 1.0})
    frame["global_batch"] = np.where(frame.step < 100, 1000.0, 2000.0)
    history = tp.build_history(frame, run="batch switch")
    tokens = build_timeline(history, None, clock="tokens")
    steps = build_timeline(history, None, clock="steps")
    # ten steps before the switch and ten after
    assert tokens.area_at(60) - tokens.area_at(50) == pytest.approx(10, rel=1e-6)
    assert tokens.area_at(160) - tokens.area_at(150) == pytest.approx(20, rel=1e-6)
    assert steps.area_at(160) - steps.area_at(150) == pytest.approx(10, rel=1e-6)
    # past the log the batch schedule decides how tokens accrue
    planned = build_timeline(history, None, batch_schedule=BatchSchedule.parse("0:1000 3e5:4000"))
    assert planned.tokens_at(400) - planned.tokens_at(300) == pytest.approx(400_000, rel=0.02)


def test_timeline_joins_the_logged_lr_and_the_plan():
    frame = pd.DataFrame({"step": np.arange(100, 1000, 100), "train_loss": np.linspace(5, 4, 9), "lr": 2e-3})
    history = tp.build_history(frame, run="joined", batch_size=1000)
    timeline = build_timeline(history, LrSchedule.parse_spec("linear:total=2000,final=0"))
    assert timeline.lr_at(50) == pytest.approx(0.5)  # a warmup from 0 before the first logged step
    assert timeline.lr_at(500) == pytest.approx(1.0)  # the log, normalised to its peak
    assert timeline.lr_at(1500) == pytest.approx(0.25)  # the plan's multiplier
    assert timeline.plan_end == 2000
    assert len(timeline.drops()) > 0


def test_one_flattener_serves_configs_and_params():
    from tracker_plugin.plan.params import batch_from_config, flat_params

    config = {
        "trainer": {"global_batch_size": {"value": 1024, "desc": None}, "opt/lr": 3e-4},
        "_wandb": {"value": {"t": 1}},
        "scheduler": {"name": "cosine", "max_steps": 5000, "warmup_steps": 100},
    }
    assert flat_params(config) == {
        "trainer.global_batch_size": 1024,
        "trainer.opt/lr": 3e-4,
        "scheduler.name": "cosine",
        "scheduler.max_steps": 5000,
        "scheduler.warmup_steps": 100,
    }
    # MLflow params are text: numbers are read as numbers only when asked
    params = {"global_batch_size": "4194304", "lr": "3e-4", "name": "run-1", "bad": "1e"}
    assert flat_params(params, text_numbers=True) == {
        "global_batch_size": 4194304, "lr": 3e-4, "name": "run-1", "bad": "1e",
    }  # fmt: skip
    assert flat_params(params)["global_batch_size"] == "4194304"
    assert batch_from_config(flat_params(config), ("trainer.global_batch_size",)) == (1024.0, "trainer.global_batch_size")
    # the schedule reader takes the same flattening, whatever the nesting
    plan = LrSchedule.from_params(config)
    assert plan is not None and plan.total_steps == 5000
    assert LrSchedule.from_params(flat_params(config)) == plan


def test_a_logged_lr_joined_to_a_plan_is_one_piecewise_linear_lr():
    plan = LrSchedule.parse_spec("cosine:warmup=100,total=6000,final=0.1")
    # more logged knots than the grid holds: the joined list of knots is thinned
    frame = synthetic_run(4000, batch=65536.0, lr_schedule="cosine:warmup=100,total=4000,final=0.1")
    history = tp.build_history(frame, run="joined")
    builder = TimelineBuilder(history)
    for total in (5000, 40_000):
        later = LrSchedule.parse_spec(f"linear:total={total},final=0")
        timeline = builder(later)
        # the knots joined as one list: the logged lr (from 0), then the plan one step after it
        assert history.lr is not None
        logged = history.lr / float(np.max(history.lr))
        join = float(history.step[-1]) + 1.0
        future = np.asarray(later.steps) > join
        knots_s = np.r_[0.0, history.step, join, np.asarray(later.steps)[future]]
        knots_v = np.r_[0.0, logged, later.at(join) / later.peak, np.asarray(later.lr)[future] / later.peak]
        assert np.array_equal(timeline.lr, np.interp(timeline.step, knots_s, knots_v))
        # a builder's timeline is build_timeline's, for each plan it is given
        again = build_timeline(history, later)
        assert np.array_equal(timeline.step, again.step) and np.array_equal(timeline.area, again.area)
    assert np.array_equal(builder(plan).lr, build_timeline(history, plan).lr)
