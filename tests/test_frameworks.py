"""Runs written by the real trainers (tests/data/make_framework_runs.py), read with no flags
but the ones the README's table says a trainer needs, checked against answers computed
from the generator's known configuration without the plugin."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.errors import DataError
from tracker_plugin.report.render import to_json, to_text
from tracker_plugin.trackers import ReadOptions
from tracker_plugin.trackers.csvfile import CsvSource
from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

from .framework_runs import FRAMEWORKS, read_fixture, unpacked_store

CONFIG = json.loads((FRAMEWORKS / "CONFIG.json").read_text())
STEPS = CONFIG["steps"]
HF_TOKENS = CONFIG["batch"] * CONFIG["accum"] * CONFIG["seq"]  # 512 tokens per step, world 1
TARGET = 3.5
EMA_STEPS = 20  # the EMA window in steps every check uses (tokens: EMA_STEPS x tokens per step)


def curve(step: np.ndarray) -> np.ndarray:
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def expected_crossing(mean_over: int = 1) -> float:
    """The step where pandas' EMA (span EMA_STEPS) of the true per-step loss reaches TARGET.

    HF logs the mean loss since its last log (``logging_steps`` steps), which the reading
    places at the middle of its interval: its crossing is the per-step loss's
    (``mean_over`` > 1 gives the crossing of the trailing mean instead, read at its end).
    """
    steps = np.arange(1, STEPS + 1, dtype=float)
    loss = pd.Series(curve(steps)).rolling(mean_over, min_periods=1).mean()
    ema = loss.ewm(span=EMA_STEPS, adjust=False).mean().to_numpy()
    i = int(np.flatnonzero(ema <= TARGET)[0])
    return float(np.interp(TARGET, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))


# name -> (source, tokens per step, true last optimizer step, options, framework)
CASES = {
    "hf-wandb": ("wandb-offline:wandb/hf-wandb", HF_TOKENS, STEPS, {}, "Hugging Face Trainer"),
    "hf-mlflow": ("mlflow:hf-mlflow", HF_TOKENS, STEPS, {"seq_len": CONFIG["seq"]}, "Hugging Face Trainer"),
    # trainer_state.json does not record gradient accumulation: tokens per step are given.
    "hf-trainer-state": ("hf/trainer_state.json", HF_TOKENS, STEPS, {"batch_size": HF_TOKENS}, "Hugging Face Trainer"),
    # Lightning numbers its steps from 0: its 400th optimizer step is logged as step 399.
    "lightning-wandb": ("wandb-offline:wandb/lightning-wandb", HF_TOKENS, STEPS - 1, {}, "PyTorch Lightning"),
    "lightning-mlflow": ("mlflow:lightning-mlflow", HF_TOKENS, STEPS - 1, {}, "PyTorch Lightning"),
    "lightning-csv": ("lightning/metrics.csv", HF_TOKENS, STEPS - 1, {}, "PyTorch Lightning"),
    "nanogpt-wandb": ("wandb-offline:wandb/nanogpt-wandb", HF_TOKENS, STEPS, {}, "nanoGPT"),
    "torchtitan-wandb": ("wandb-offline:wandb/torchtitan-wandb", 2 * HF_TOKENS, STEPS, {}, "torchtitan"),
    "litgpt-wandb": ("wandb-offline:wandb/litgpt-wandb", CONFIG["litgpt"]["global"] * CONFIG["seq"], STEPS, {}, "litgpt"),
    "litgpt-mlflow": ("mlflow:litgpt-mlflow", CONFIG["litgpt"]["global"] * CONFIG["seq"], STEPS, {}, "litgpt"),
    # OLMo, Composer and Megatron-LM: two data-parallel ranks, 16 sequences per step.
    "olmo-wandb": ("wandb-offline:wandb/olmo-wandb", 2 * HF_TOKENS, STEPS, {}, "OLMo"),
    # Composer logs each batch at the timestamp before it: its 400th batch is logged at 399.
    "composer-wandb": ("wandb-offline:wandb/composer-wandb", 2 * HF_TOKENS, STEPS - 1, {}, "Composer / llm-foundry"),
    "composer-mlflow": ("mlflow:composer-mlflow", 2 * HF_TOKENS, STEPS - 1, {}, "Composer / llm-foundry"),
    "megatron-wandb": ("wandb-offline:wandb/megatron-wandb", 2 * HF_TOKENS, STEPS, {}, "Megatron-LM"),
}
# Runs whose MLflow store is not the shared mlflow.db: Composer's, gzipped.
STORES = {"composer-mlflow": "composer/mlflow.db.gz"}


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory) -> str:
    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("frameworks")
    shutil.copy(FRAMEWORKS / "mlflow.db", root / "mlflow.db")
    for packed in set(STORES.values()):
        unpacked_store(packed, root)
    return f"sqlite:///{root / 'mlflow.db'}"


def _read(name: str, store: str, **extra):
    spec, _, _, options, _ = CASES[name]
    if name in STORES:
        store = f"sqlite:///{Path(store.removeprefix('sqlite:///')).parent / STORES[name].removesuffix('.gz')}"
    return read_fixture(spec, ReadOptions(use_cache=False, **{**options, **extra}), store)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_trainer_read_right_with_the_documented_flags(name, mlflow_store):
    _, per_step, last_step, _, framework = CASES[name]
    history = _read(name, mlflow_store)
    assert history.last_step == last_step  # the true last optimizer step, not a count of log calls
    assert dict(history.read_as)["framework"] == framework
    assert not history.on_steps
    # Tokens: within 1% of the generator's tokens per step x steps.
    np.testing.assert_allclose(history.batch, per_step, rtol=0.01)
    np.testing.assert_allclose(history.last_tokens, per_step * last_step, rtol=0.01)
    config = AnalysisConfig(targets=(TARGET,), ema_token_window=EMA_STEPS * per_step, model="power-law")
    analysis = run_analysis(history, config)
    (result,) = analysis.targets
    assert result.status.value == "reached"
    np.testing.assert_allclose(result.step, expected_crossing(), rtol=0.01)
    np.testing.assert_allclose(result.tokens, expected_crossing() * per_step, rtol=0.01)
    document = to_json(analysis)
    assert document["read_as"]["framework"] == framework
    assert "read as: " + framework in to_text(analysis)


def test_hf_mlflow_without_seq_len_works_on_steps_and_says_which_flag(mlflow_store):
    """Nothing in HF's MLflow params says the sequence length: steps, not a refusal."""
    spec, *_ = CASES["hf-mlflow"]
    history = _read("hf-mlflow", mlflow_store, seq_len=None)
    assert history.on_steps and history.last_step == STEPS
    assert any("seq_len" in note for note in history.notes)
    analysis = run_analysis(history, AnalysisConfig(targets=(TARGET,), ema_steps=EMA_STEPS, model="power-law"))
    np.testing.assert_allclose(analysis.targets[0].step, expected_crossing(), rtol=0.01)


def test_old_silent_cases(mlflow_store):
    # HF -> W&B: _step counts log calls (40 of them); the step is train/global_step.
    assert dict(_read("hf-wandb", mlflow_store).read_as)["step"] == "train/global_step"
    # HF -> MLflow: the loss is 'loss' (40 points), never the one-off mean 'train_loss'.
    assert _read("hf-mlflow", mlflow_store).loss_key == "loss"
    # litgpt -> MLflow: the metric step counts micro-iterations (8 per step): 'step' wins.
    assert dict(_read("litgpt-mlflow", mlflow_store).read_as)["step"] == "step"
    # Lightning: LearningRateMonitor's lr-AdamW is the lr.
    history = _read("lightning-mlflow", mlflow_store)
    assert history.lr is not None and dict(history.read_as)["lr"] == "lr-AdamW"
    # torchtitan: its loss and n_tokens_seen.
    assert _read("torchtitan-wandb", mlflow_store).loss_key == "loss_metrics/global_avg_loss"


@pytest.mark.parametrize("name, key", [("olmo-wandb", "optim/learning_rate_group0"),
                                       ("megatron-wandb", "learning-rate")])
def test_the_planned_lr_read_from_the_config_is_the_lr_the_trainer_logged(name, key, mlflow_store):
    """OLMo's and Megatron-LM's schedules, read from the config they log (plan/trainers.py),
    give the lr their own schedulers set at each logged step."""
    history = _read(name, mlflow_store)
    assert dict(history.read_as)["lr"] == key
    plan = history.lr_plan
    assert plan is not None and plan.source == "params" and plan.total_steps == STEPS
    np.testing.assert_allclose(plan.at(history.step), history.lr, rtol=1e-9)


def test_composer_reads_its_batch_count_tokens_and_lr_monitor(mlflow_store):
    for name in ("composer-wandb", "composer-mlflow"):
        history = _read(name, mlflow_store)
        read_as = dict(history.read_as)
        assert read_as["step"] == "time/batch" and read_as["lr"] == "lr-DecoupledAdamW/group0"
        assert history.loss_key == "loss/train/total"
        # time/token counts the tokens before each batch: 1024 a batch from 0.
        np.testing.assert_allclose(history.tokens, history.step * 2 * HF_TOKENS, rtol=1e-12)


def test_per_device_tokens_are_scaled_by_a_known_world_size_and_noted_without_one():
    """litgpt's 'tokens' counts one device's tokens: times the world size from the config
    ('devices' x 'num_nodes'), or read as it is with a note naming world_size."""
    from tracker_plugin.frame.conventions import build_read_history, finish_reading, read_as

    steps = np.arange(5, 205, 5)
    frame = pd.DataFrame({"_step": steps * 8 - 1, "iter": steps * 8, "step": steps, "loss": curve(steps),
                          "tokens": steps * 8 * 2 * 64})  # 8 micro-iterations of 2 x 64 tokens per step
    for config, expected, noted in (({"devices": 2, "num_nodes": 2}, 4 * 1024, False), ({}, 1024, True)):
        reading = read_as(set(frame.columns) - {"_step"}, config, native_step="_step")
        history = finish_reading(build_read_history(frame, reading, run="litgpt", logged=frame.columns), reading)
        np.testing.assert_allclose(history.batch, expected, rtol=1e-12)
        assert history.last_step == 200
        assert any("world_size" in note for note in history.notes) == noted


def test_step_override_works_for_mlflow(mlflow_store):
    """--step-col is honoured by MLflow sources: litgpt's 'iter' counts micro-iterations."""
    from tracker_plugin.frame.history import Columns

    history = _read("litgpt-mlflow", mlflow_store, columns=Columns().with_overrides(step="iter"))
    accum = CONFIG["litgpt"]["global"] // (CONFIG["litgpt"]["micro"] * CONFIG["litgpt"]["devices"])
    assert history.last_step == STEPS * accum


def test_a_step_that_counts_log_calls_is_noted(mlflow_store):
    """The old silent case: HF -> W&B read on _step ends at 39 of 400 planned steps."""
    from tracker_plugin.frame.history import Columns

    history = _read("hf-wandb", mlflow_store, columns=Columns().with_overrides(step="_step"))
    assert history.last_step == STEPS // CONFIG["log_every"] - 1
    assert any("far below its planned 400 steps" in note and "columns.step" in note for note in history.notes)


def test_a_loss_key_with_one_value_names_the_others(mlflow_store):
    from tracker_plugin.frame.history import Columns

    with pytest.raises(DataError, match=r"run aggregate.*'loss'"):
        _read("hf-mlflow", mlflow_store, columns=Columns().with_overrides(loss="train_loss"))


@pytest.mark.parametrize("window", [100.0, 1000.0])
def test_sparse_logging_crosses_where_the_dense_log_does(window):
    """Logged every 500 steps or every 10 over the same steps, from step 500: crossings
    within 1% (the curve's bend over one 500-step gap; holding the value over the gap gave
    1.2% and 7.5%). Both logs start at 500: a dense log from step 10 holds 490 steps of
    higher loss the sparse one has no row of, which alone puts its crossing 1.2% later
    with the window of 1000."""
    from tracker_plugin.core.smoothing import token_window_ema

    def crossing(every: int) -> float:
        steps = np.arange(500, 5001, every, dtype=float)
        loss = 2 + 6 * (steps / 200 + 1) ** -0.6
        ema = token_window_ema(loss, steps, np.ones(len(steps)), window)
        i = int(np.flatnonzero(ema <= 3.3)[0])
        return float(np.interp(3.3, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))

    np.testing.assert_allclose(crossing(500), crossing(10), rtol=0.01)


def test_a_linear_stretch_logged_sparsely_smooths_exactly_as_logged_densely():
    """Away from step 0 (every gap shorter than the steps before it) a gap is the straight
    line between its rows; the first evals after step 0 take a curve (the next test)."""
    from tracker_plugin.core.smoothing import token_window_ema

    steps = np.arange(100, 1101, dtype=float)
    loss = 5 - 0.002 * steps
    dense = token_window_ema(loss, steps, np.ones(len(steps)), 50.0)
    sparse = token_window_ema(loss[::10], steps[::10], np.ones(101), 50.0)
    np.testing.assert_allclose(sparse, dense[::10], rtol=1e-12)


@pytest.mark.parametrize("target", [2.8, 2.6])
def test_an_eval_cadence_log_crosses_where_the_dense_log_does_past_the_first_gaps(target):
    """Logged every 500 steps, crossing in the narrow gaps after the first (a 300-step
    window): within 1% of the same curve logged every step. The straight line between rows
    sits above a bending curve in every gap, and put both crossings late by about 26 steps
    (+3.4% and +2.4%): the near-constant lateness of a nanoGPT log at its eval cadence."""
    from tracker_plugin.frame.history import build_history

    def crossing(every: int) -> float:
        steps = np.arange(0, 5001, every)
        history = build_history(pd.DataFrame({"step": steps, "train_loss": curve(steps)}), run="x", batch_size=1.0)
        config = AnalysisConfig(targets=(target,), ema_token_window=300.0, model="power-law")
        (result,) = run_analysis(history, config).targets
        assert result.status.value == "reached"
        return float(result.step)

    np.testing.assert_allclose(crossing(500), crossing(1), rtol=0.01)


def test_an_eval_cadence_log_crosses_where_the_same_run_logged_every_10_steps_does():
    """nanoGPT logs its train loss at evals only (tests/data/make_framework_runs.py
    NANOGPT_EVAL: every 250 of 2000 iters): with the default window its crossings are within
    1% of the same run logged every 10 steps. The straight line across the first gap after
    step 0, and the crossing on the chord between rows, put 3.3 at 745 against 686 (+8.7%)."""
    from tracker_plugin.frame.history import build_history

    source = WandbOfflineSource(str(FRAMEWORKS / "wandb" / "nanogpt-eval"), ReadOptions(use_cache=False))
    (run,) = source.runs()
    sparse = source.read(run)
    assert sparse.last_step == 2000 and np.all(np.diff(sparse.step) == 250)
    steps = np.arange(0, 2001, 10)
    every_10 = build_history(pd.DataFrame({"step": steps, "train_loss": curve(steps)}), run="x", batch_size=HF_TOKENS)
    config = AnalysisConfig(targets=(3.3, 3.0), model="power-law")  # the default window, a quarter of the run
    for ours, truth in zip(run_analysis(sparse, config).targets, run_analysis(every_10, config).targets, strict=True):
        assert ours.status.value == truth.status.value == "reached"
        np.testing.assert_allclose(ours.step, truth.step, rtol=0.01)
        np.testing.assert_allclose(ours.tokens, truth.tokens, rtol=0.01)


def test_a_crossing_inside_a_gap_is_where_the_ema_passes_the_target():
    """Logged every 250 steps with a window of 50: the EMA bends between two rows, and the
    crossing is placed on it: within 0.5% of the EMA of the loss at every step (the chord
    between the two rows put it 2.3% late)."""
    from tracker_plugin.core.smoothing import token_window_ema

    steps = np.arange(0, 2001, 250)
    dense = np.arange(0, 2001)
    window = 50 * HF_TOKENS
    truth = token_window_ema(curve(dense), dense, np.full(len(dense), HF_TOKENS), window)
    frame = pd.DataFrame({"step": steps, "train_loss": curve(steps)})
    from tracker_plugin.frame.history import build_history

    history = build_history(frame, run="x", batch_size=HF_TOKENS)
    (result,) = run_analysis(history, AnalysisConfig(targets=(3.3,), ema_token_window=window, model="power-law")).targets
    i = int(np.flatnonzero(truth <= 3.3)[0])
    expected = float(np.interp(3.3, [truth[i], truth[i - 1]], [dense[i], dense[i - 1]]))
    np.testing.assert_allclose(result.step, expected, rtol=0.005)


def _trainer_file(relative: str, **options):
    source = CsvSource(str(FRAMEWORKS / relative), ReadOptions(use_cache=False, **options))
    (run,) = source.runs()
    return source.read(run)


def test_hf_train_runtime_is_the_clock_of_a_trainer_state_that_logs_it():
    # Written by the real Trainer with include_num_input_tokens_seen: every log entry carries
    # train_runtime, seconds since train() began.
    path = FRAMEWORKS / "hf" / "tokens-seen" / "trainer_state.json"
    entries = [e for e in json.loads(path.read_text())["log_history"] if "loss" in e]
    history = _trainer_file("hf/tokens-seen/trainer_state.json")
    assert history.time_source == "column 'train_runtime' (seconds since the run's start)"
    assert not history.time_absolute
    np.testing.assert_allclose(history.time, [e["train_runtime"] for e in entries], rtol=1e-9)
    analysis = run_analysis(history, AnalysisConfig(targets=(TARGET,), ema_token_window=EMA_STEPS * HF_TOKENS))
    assert analysis.timing.throughput is not None and analysis.timing.throughput.source == "clock"
    assert analysis.timing.note is None
    # The target is reached in the log: its seconds are the clock at the crossing, from the first entry.
    (result,) = analysis.targets
    (when,) = analysis.timing.targets
    expected = np.interp(result.step, history.step, history.time) - history.time[0]
    assert when.seconds == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(result.step, expected_crossing(), rtol=0.01)


@pytest.mark.parametrize("relative, options", [
    ("hf/trainer_state.json", {"batch_size": HF_TOKENS}),  # include_num_input_tokens_seen off
    ("lightning/metrics.csv", {}),  # CSVLogger writes the metrics and the step, no time
])
def test_trainer_files_without_a_clock_say_so(relative, options):
    history = _trainer_file(relative, **options)
    assert history.time is None
    analysis = run_analysis(history, AnalysisConfig(targets=(TARGET,), ema_token_window=EMA_STEPS * HF_TOKENS))
    assert analysis.targets[0].status.value == "reached" and analysis.timing.targets[0].seconds is None
    assert analysis.timing.note.startswith("no time in the log")


def test_a_time_the_user_logged_into_metrics_csv_is_the_clock(tmp_path):
    frame = pd.read_csv(FRAMEWORKS / "lightning" / "metrics.csv")
    frame["time"] = 100.0 + 0.25 * frame["step"]  # a self.log("time", ...) of the user's
    for name in ("metrics.csv", "hparams.yaml"):
        shutil.copy(FRAMEWORKS / "lightning" / name, tmp_path / name)
    frame.to_csv(tmp_path / "metrics.csv", index=False)
    source = CsvSource(str(tmp_path / "metrics.csv"), ReadOptions(use_cache=False))
    (run,) = source.runs()
    history = source.read(run)
    assert dict(history.read_as)["framework"] == "PyTorch Lightning"
    assert history.time_source == "column 'time' (seconds since the run's start)"
    np.testing.assert_allclose(np.diff(history.time) / np.diff(history.step), 0.25, rtol=1e-9)


def test_a_clock_on_one_row_only_is_no_clock(tmp_path):
    # HF's end-of-run entry is the only one with train_runtime without
    # include_num_input_tokens_seen: one time is no rate, and the read says so.
    state = json.loads((FRAMEWORKS / "hf" / "trainer_state.json").read_text())
    last = state["log_history"][-1]["step"]
    state["log_history"].append({"train_runtime": 12.5, "train_loss": 3.8, "epoch": 1.0, "step": last})
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    source = CsvSource(str(tmp_path / "trainer_state.json"), ReadOptions(use_cache=False, batch_size=HF_TOKENS))
    (run,) = source.runs()
    history = source.read(run)
    assert history.time is None
    assert "'train_runtime' is logged on one row only: no clock read from it" in history.notes


RESUMED = FRAMEWORKS / "wandb" / "hf-resumed"


def _crossing_of_the_true_curve(target: float, mean_over: int = 1) -> float:
    """Where pandas' EMA (span EMA_STEPS) of the true per-step loss reaches ``target`` (HF's
    logged means are read at the middles of their intervals)."""
    steps = np.arange(1, STEPS + 1, dtype=float)
    loss = pd.Series(curve(steps)).rolling(mean_over, min_periods=1).mean()
    ema = loss.ewm(span=EMA_STEPS, adjust=False).mean().to_numpy()
    i = int(np.flatnonzero(ema <= target)[0])
    return float(np.interp(target, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))


def _analysed(folder: Path, *targets: float):
    source = WandbOfflineSource(str(folder), ReadOptions(use_cache=False))
    runs = source.runs()
    assert len(runs) == 1, runs
    history = source.read(runs[0])
    config = AnalysisConfig(targets=targets, ema_token_window=EMA_STEPS * HF_TOKENS, model="power-law")
    return runs[0], history, run_analysis(history, config)


def test_a_run_resumed_into_two_offline_directories_reads_as_one_run(tmp_path):
    """HF Trainer preempted at step 185 and resumed from its checkpoint at 150 with the same
    WANDB_RUN_ID (make_framework_runs.py hf-resumed): the job's wandb/ folder, or the folder
    above it, is one run whose resumed rows replace the steps it did again."""
    job = tmp_path / "job"
    shutil.copytree(RESUMED, job / "wandb")
    attempts = sorted(p.name for p in RESUMED.iterdir())
    for folder in (RESUMED, job):
        run, history, analysis = _analysed(folder, 4.5, 3.7, 3.5)
        assert run.ref == f"wandb-offline:{folder if folder == RESUMED else job / 'wandb'}/{attempts[-1]}"
        np.testing.assert_array_equal(history.step, np.arange(10, STEPS + 1, 10))  # each step once
        assert any(
            note.startswith(f"joined 2 attempts of W&B run hfresume1, resumed offline ({', '.join(attempts)})")
            and "resumed at train/global_step 160: its rows replaced those of steps 160-180 (3 rows)" in note
            for note in history.notes
        ), history.notes
        for result in analysis.targets:
            assert result.status.value == "reached"
            np.testing.assert_allclose(result.step, _crossing_of_the_true_curve(result.target), rtol=0.01)


def test_the_resumed_attempt_alone_says_so_and_reaches_nothing_at_its_first_row():
    """The last offline directory alone starts at step 160: it says it resumes an earlier
    attempt, and 4.5, above its first smoothed loss, is not "reached at step 160" (the run
    reached it at step 81, in the first attempt) but not known from this log."""
    last = sorted(RESUMED.iterdir())[-1]
    _, history, analysis = _analysed(last, 4.5)
    assert history.step[0] == 160
    assert any(
        note.startswith("the history starts at step 160, 16 logging intervals after step 0 (its run record is marked "
                        "resume") and "offline-run-*-hfresume1" in note
        for note in history.notes
    ), history.notes
    (result,) = analysis.targets
    assert result.status.value in ("not_enough_data", "failed") and result.step is None and result.tokens is None
    assert "the crossing lies at or before that row" in result.note
    assert _crossing_of_the_true_curve(4.5) < 160 / 1.9  # the truth, in the first attempt


def test_a_log_from_near_step_0_below_the_target_is_still_reached_at_its_first_row():
    from tracker_plugin.frame.history import build_history

    steps = np.arange(10, 410, 10)
    history = build_history(pd.DataFrame({"step": steps, "train_loss": curve(steps)}), run="x", batch_size=HF_TOKENS)
    config = AnalysisConfig(targets=(7.0,), ema_token_window=EMA_STEPS * HF_TOKENS, model="power-law")
    (result,) = run_analysis(history, config).targets
    assert result.status.value == "reached" and result.step == 10
