"""Runs with no tokens to be had: the analysis works on steps, and nothing it writes says
steps are tokens (the JSON's token fields are null, the text prints steps only, the token
keys written back are cleared); and configs that give a batch in sequences but not the
gradient accumulation are read on steps, not on a guessed token count."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.status import Status
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.conventions import build_read_history, finish_reading, read_as
from tracker_plugin.frame.history import Columns
from tracker_plugin.jobs.annotation import build_annotation, settings_of
from tracker_plugin.keys import PROVENANCE, target_key
from tracker_plugin.report.render import to_json, to_text
from tracker_plugin.trackers import ReadOptions
from tracker_plugin.trackers.csvfile import CsvSource

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"
CONFIG = json.loads((FRAMEWORKS / "CONFIG.json").read_text())
STEPS = CONFIG["steps"]
EMA_STEPS = 20


def curve(step: np.ndarray) -> np.ndarray:
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def expected_crossing(target: float, mean_over: int) -> float:
    """Where pandas' EMA (span EMA_STEPS) of the curve's trailing mean over ``mean_over``
    steps reaches ``target``, computed without the plugin (1: the per-step curve, which HF's
    mean since the last log, read at the middle of its interval, gives)."""
    steps = np.arange(1, STEPS + 1, dtype=float)
    loss = pd.Series(curve(steps)).rolling(mean_over, min_periods=1).mean()
    ema = loss.ewm(span=EMA_STEPS, adjust=False).mean().to_numpy()
    i = int(np.flatnonzero(ema <= target)[0])
    return float(np.interp(target, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))


def _trainer_state(**options):
    source = CsvSource(str(FRAMEWORKS / "hf" / "trainer_state.json"), ReadOptions(use_cache=False, **options))
    (run,) = source.runs()
    return source.read(run)


def _analysis(targets=(3.5,), rows=None, **options):
    """The fixture analysed on steps; ``rows``: its first rows only (a run still going, so
    a lower target is forecast rather than cut off by the decayed lr)."""
    history = _trainer_state()
    config = AnalysisConfig(targets=targets, ema_steps=EMA_STEPS, **options)
    return run_analysis(history if rows is None else history.head(rows), config)


def test_trainer_state_without_flags_is_read_on_steps_with_one_note_naming_batch_size():
    """trainer_state.json records 'train_batch_size' (per device x GPUs of one process, in
    transformers 5.24 TrainingArguments.train_batch_size) but not the accumulation."""
    history = _trainer_state()
    assert history.on_steps and history.last_step == STEPS
    (note,) = [n for n in history.notes if "working on steps" in n]
    assert "no gradient accumulation" in note and "batch_size" in note


@pytest.mark.slow
def test_the_json_on_steps_holds_no_steps_in_its_token_fields():
    analysis = _analysis(targets=(3.5, 3.1), rows=25, stability_sweep=True, sweep_min_window=100, sweep_step=50)
    doc = to_json(analysis)
    assert doc["axis"] == "steps" and doc["ema_token_window"] is None and doc["ema_steps"] == EMA_STEPS
    assert doc["clock"] == "steps"  # the token clock, on a run whose tokens are its steps
    assert doc["observed"] == {"step": 250.0, "tokens": None, "seconds": None}
    (stage,) = doc["batch"]["stages"]
    assert stage["first_tokens"] is None and stage["last_tokens"] is None and stage["batch"] is None
    reached, open_target = doc["targets"]
    assert reached["status"] == "reached" and reached["tokens"] is None
    np.testing.assert_allclose(reached["step"], expected_crossing(3.5, 1), rtol=0.01)
    # max_steps=400 is the planned end, which the law reaches before: a forecast within the plan
    assert open_target["status"] == Status.FORECAST and 250 < open_target["step"] <= STEPS
    assert open_target["tokens"] is None and open_target["tokens_interval"] is None
    assert open_target["step_interval"] is not None  # the steps keep their numbers
    rows = open_target["sweep"]["rows"]
    assert rows and all(row["tokens"] is None and row["max_tokens"] is None for row in rows)
    assert any(row["step"] is not None for row in rows)


def test_the_json_on_tokens_still_holds_tokens():
    history = _trainer_state(batch_size=512.0)
    doc = to_json(run_analysis(history, AnalysisConfig(targets=(3.5,), ema_token_window=EMA_STEPS * 512.0)))
    assert doc["axis"] == "tokens" and doc["ema_steps"] is None
    np.testing.assert_allclose(doc["targets"][0]["tokens"], doc["targets"][0]["step"] * 512.0, rtol=0.01)
    assert doc["observed"]["tokens"] == pytest.approx((STEPS - 1) * 512.0 + 10 * 512.0, rel=0.05)


def test_the_text_on_steps_prints_no_tokens():
    text = to_text(_analysis(targets=(3.5, 3.1), rows=25, model="power-law"))
    assert "tokens=" not in text and "tokens/step" not in text and "T=" not in text
    assert "ema window: 20 steps" in text and "on steps" in text
    assert "T in 1e+09 steps" in text  # the power law's axis is the step here


@pytest.mark.slow
def test_the_keys_on_steps_clear_every_token_key_and_keep_the_steps():
    analysis = _analysis(targets=(3.5, 3.1), rows=25)
    annotation = build_annotation(analysis, settings_of(analysis.config, Columns(), None))
    metrics = annotation.metrics
    provenance = json.loads(str(annotation.labels[PROVENANCE]))
    assert provenance["last_tokens"] is None and provenance["last_step"] == 250
    assert analysis.targets[1].tokens_interval is not None  # the analysis has them, on its step axis
    for target in (3.5, 3.1):
        assert target_key(target, "Btok") in metrics and metrics[target_key(target, "Btok")] is None
        assert metrics[target_key(target, "step")] is not None
        assert " tok" not in str(annotation.labels[target_key(target)])  # the text says steps only


def test_a_rate_in_tokens_per_second_is_refused_on_steps_and_step_time_is_not():
    with pytest.raises(ConfigError, match="no tokens.*step_time"):
        _analysis(throughput=1e6)
    analysis = _analysis(step_time=0.5)
    doc = to_json(analysis)
    assert doc["throughput"]["tokens_per_second"] is None and doc["throughput"]["seconds_per_step"] == 0.5
    assert doc["targets"][0]["seconds"] == pytest.approx(0.5 * (doc["targets"][0]["step"] - 10), rel=1e-6)
    assert "tokens/s" not in to_text(analysis)


def test_trainer_state_with_seq_len_says_it_assumes_no_accumulation():
    history = _trainer_state(seq_len=64.0)
    assert not history.on_steps
    np.testing.assert_allclose(history.batch, 4 * 64)  # train_batch_size x seq: what the file records
    assert any("assume no gradient accumulation" in n and "batch_size" in n for n in history.notes)


def test_lightning_hparams_without_the_accumulation_are_read_on_steps():
    """Lightning's accumulate_grad_batches is a Trainer argument, never in the hparams its
    loggers write: batch_size x block_size would be short by the accumulation, silently."""
    steps = np.arange(2, 150, 3)
    frame = pd.DataFrame({"trainer/global_step": steps, "train_loss_step": curve(steps + 1.0), "epoch": 0,
                          "lr-AdamW/pg1": 1e-3, "lr-AdamW/pg2": 3e-3})
    for config, on_steps in (({"batch_size": 8, "block_size": 32}, True),
                             ({"batch_size": 8, "block_size": 32, "accumulate_grad_batches": 2}, False)):
        reading = read_as(set(frame.columns), config, native_step="_step")
        history = finish_reading(build_read_history(frame, reading, run="lightning", logged=frame.columns), reading)
        assert history.on_steps == on_steps and history.last_step == 149
        assert dict(history.read_as)["lr"] == "lr-AdamW/pg1"
        if on_steps:
            assert any("no gradient accumulation in the config" in n for n in history.notes)
        else:
            np.testing.assert_allclose(history.batch, 8 * 2 * 32)


def test_an_hf_run_planned_in_epochs_has_no_planned_step_count():
    """HF logs max_steps -1 when num_train_epochs plans the run: no note about a last step
    "past the planned -1 steps"."""
    steps = np.arange(7, 120, 7)
    frame = pd.DataFrame({"loss": curve(steps), "learning_rate": 1e-3, "epoch": steps / 40, "grad_norm": 1.0,
                          "_mlflow_step": steps})
    config = {"max_steps": -1, "num_train_epochs": 3, "per_device_train_batch_size": 4,
              "gradient_accumulation_steps": 4}
    reading = read_as(set(frame.columns) - {"_mlflow_step"}, config, native_step="_mlflow_step")
    history = finish_reading(build_read_history(frame, reading, run="hf", logged=frame.columns), reading, finished=True)
    assert dict(history.read_as)["framework"] == "Hugging Face Trainer" and history.last_step == 119
    assert reading.planned_steps is None
    assert not any("planned" in note for note in history.notes)


def test_a_short_step_at_each_epoch_end_is_no_batch_stage():
    """HF with a partial last accumulation each epoch (25 steps an epoch, the 25th of 2
    micro-batches instead of 3), logging tokens every 5 steps: one batch of 384 tokens,
    not a dynamic batch of 5 stages; the tokens are the logged ones, exactly."""
    steps = np.arange(5, 101, 5)
    per_step = np.where(np.arange(1, 101) % 25 == 0, 256, 384)
    seen = np.cumsum(per_step)[steps - 1]
    train = pd.DataFrame({"loss": curve(steps), "learning_rate": 1e-3, "epoch": steps / 25, "grad_norm": 1.0,
                          "num_input_tokens_seen": seen, "step": steps})
    # trainer_state.json's log_history: eval rows carry the count again at their step.
    evals = pd.DataFrame({"eval_loss": curve(steps[3::4]) + 0.1, "num_input_tokens_seen": seen[3::4],
                          "step": steps[3::4]})
    frame = pd.concat([train, evals]).sort_values("step", kind="stable").reset_index(drop=True)
    reading = read_as(set(frame.columns), {}, native_step="step")
    history = finish_reading(build_read_history(frame, reading, run="hf", logged=frame.columns), reading)
    np.testing.assert_array_equal(history.tokens, seen)
    np.testing.assert_allclose(history.batch, 384)
    analysis = run_analysis(history, AnalysisConfig(targets=(3.5,), ema_token_window=20 * 384.0))
    assert not analysis.dynamic_batch and analysis.targets[0].note is None


# What the text says "no tokens" with: the header and the read-as line's tokens column.
_NO_TOKENS = re.compile(r"no tokens: the analysis is on steps|tokens: none \(on steps\)")


@pytest.mark.slow
@pytest.mark.parametrize("rows", [None, 25])
def test_the_text_on_steps_says_tokens_only_in_the_note_naming_the_settings_that_give_them(rows):
    """Every message on a run on steps counts steps: the model selection's cuts, the targets'
    notes, the sweep. Only the one note that says how to get tokens names them."""
    analysis = _analysis(targets=(3.5, 3.1, 2.6, 1.0), rows=rows, stability_sweep=True, sweep_min_window=60,
                         sweep_step=30)
    assert analysis.selection is not None and len(analysis.selection.scores) > 1  # the cuts are said
    text = to_text(analysis)
    assert "fitted to the first 60%, 70%, 80% of the logged steps" in text
    saying = [line for line in text.splitlines() if "token" in _NO_TOKENS.sub("", line).lower()]
    (note,) = saying
    assert note.startswith("note: no tokens logged") and "batch_size" in note and "columns.tokens" in note


def _lightning_history(config, **given):
    steps = np.arange(2, 150, 3)
    frame = pd.DataFrame({"trainer/global_step": steps, "train_loss_step": curve(steps + 1.0), "epoch": 0,
                          "lr-AdamW/pg1": 1e-3})
    reading = read_as(set(frame.columns), config, native_step="_step", **given)
    return finish_reading(build_read_history(frame, reading, run="lightning", logged=frame.columns), reading)


@pytest.mark.parametrize(
    ("extra", "given", "devices"),
    [({}, {}, None), ({"devices": 4}, {}, 4), ({"devices": 2, "num_nodes": 2}, {}, 4), ({}, {"world_size": 4}, 4)],
)
def test_tokens_from_a_per_device_batch_with_no_world_size_say_they_assume_one_device(extra, given, devices):
    """Lightning's hparams name the batch, accumulation and sequence length of one device:
    a multi-GPU run's tokens would be short by its device count. With no world size
    recorded or given, a note says one device is assumed; with one, the tokens count it."""
    history = _lightning_history({"batch_size": 8, "block_size": 32, "accumulate_grad_batches": 2, **extra}, **given)
    assert not history.on_steps
    np.testing.assert_allclose(history.batch, 8 * 2 * 32 * (devices or 1))
    assumed = [n for n in history.notes if "assume one device" in n]
    if devices is None:
        (note,) = assumed
        assert "no world size" in note and "world_size" in note and "512" in note
    else:
        assert not assumed


def test_the_one_device_note_names_the_flag_on_the_command_line(capsys):
    from tracker_plugin.cli import main

    metrics = FRAMEWORKS / "lightning" / "metrics.csv"  # hparams.yaml beside it: no devices
    assert main(["analyze", str(metrics), "--target", "3.5"]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if "assume one device" in line]
    assert note.startswith("note: ") and "--world-size" in note
    assert main(["analyze", str(metrics), "--target", "3.5", "--world-size", "2"]) == 0
    assert "assume one device" not in capsys.readouterr().out


def test_a_token_window_given_to_a_run_on_steps_is_named_as_not_used():
    """The EMA window on steps is ema_steps; a token window set by hand is not silently dropped."""
    default = _analysis()
    assert not [n for n in default.notes if "ema_token_window" in n]
    given = _analysis(ema_token_window=5e7)
    (note,) = [n for n in given.notes if "ema_token_window" in n]
    assert f"ema_steps, {EMA_STEPS} steps" in note
    assert given.targets[0].step == pytest.approx(default.targets[0].step, rel=1e-12)
