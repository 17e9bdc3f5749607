"""OLMo, Composer / llm-foundry, Megatron-LM and NeMo runs, shaped as each trainer's own
source logs them (the keys, which step the tracker row carries, which counts are
cumulative; see the comments in tracker_plugin/frame/conventions.py for the files), read
with no flags: detected as that trainer, and read with its optimizer step, training loss,
lr and tokens per step, checked against the numbers the frame was built from.

These frames are built here, not written by the trainers (none of them runs on CPU in
CI): they pin the keys as read from the trainers' source, not the trainers' behaviour."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracker_plugin.frame.conventions import build_read_history, detect, finish_reading, read_as
from tracker_plugin.frame.history import History

STEPS = 400
EVERY = 10  # the trainer's log interval, in optimizer steps


def curve(step: np.ndarray) -> np.ndarray:
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def lr(step: np.ndarray) -> np.ndarray:
    return 3e-4 * np.minimum(1.0, step / 50.0) * (0.1 + 0.9 * np.cos(np.pi * step / (2 * STEPS)))


def _read(frame: pd.DataFrame, config: dict, **given) -> History:
    """Read ``frame`` (W&B rows: ``_step`` is the row step) as the plugin's sources do."""
    reading = read_as(set(frame.columns) - {"_step"}, config, native_step="_step", **given)
    history = build_read_history(frame, reading, run="run", logged=frame.columns)
    return finish_reading(history, reading, finished=True)


def _eval_column(steps: np.ndarray, every: int) -> np.ndarray:
    return np.where(steps % every == 0, curve(steps) + 0.1, np.nan)


def olmo_frame(steps: np.ndarray, batch: int, seq: int) -> pd.DataFrame:
    # olmo/train.py: wandb.log(metrics, step=self.global_step), global_step 1-based.
    return pd.DataFrame({
        "_step": steps,
        "train/CrossEntropyLoss": curve(steps),
        "train/Perplexity": np.exp(curve(steps)),
        "throughput/total_tokens": steps * batch * seq,
        "throughput/device/tokens_per_second": 1e4,
        "optim/learning_rate_group0": lr(steps),
        "optim/learning_rate_group1": lr(steps),
        "eval/c4-validation/CrossEntropyLoss": _eval_column(steps, 100),
    })


def composer_frame(steps: np.ndarray, batch: int, seq: int, *, tokens: bool) -> pd.DataFrame:
    # composer: wandb.log(data, step=int(state.timestamp.batch)); time/* are counts before
    # the batch (0-based), time/token only when the data spec counts tokens.
    frame = pd.DataFrame({
        "_step": steps,
        "time/batch": steps,
        "time/sample": steps * batch,
        "time/batch_in_epoch": steps,
        "loss/train/total": curve(steps + 1),
        "lr-DecoupledAdamW/group0": lr(steps),
        "throughput/samples_per_sec": 50.0,
        "trainer/device_train_microbatch_size": 4,
        "metrics/eval/LanguageCrossEntropy": _eval_column(steps + 1, 100),
    })
    if tokens:
        frame["time/token"] = steps * batch * seq
    return frame


def megatron_frame(steps: np.ndarray, batch: int) -> pd.DataFrame:
    # training_log: wandb_writer.log({...}, iteration), iteration 1-based, after the step.
    return pd.DataFrame({
        "_step": steps,
        "samples vs steps": steps * batch,
        "learning-rate": lr(steps),
        "batch-size": batch,
        "lm loss": curve(steps),
        "grad-norm": 1.0,
        "lm loss validation": _eval_column(steps, 100),
    })


def nemo_frame(steps: np.ndarray, batch: int) -> pd.DataFrame:
    # megatron_gpt_model.training_step: self.log(...) of trainer.global_step (0-based, before
    # the step) and compute_consumed_samples(global_step); WandbLogger adds
    # trainer/global_step and numbers its rows by log call.
    g = steps - 1
    return pd.DataFrame({
        "_step": np.arange(len(steps)),
        "trainer/global_step": g,
        "global_step": g.astype(float),
        "consumed_samples": (g * batch).astype(float),
        "reduced_train_loss": curve(steps),
        "train_loss": curve(steps) + 0.01,  # the per-rank loss some NeMo models log beside it
        "lr": lr(steps),
        "val_loss": _eval_column(steps, 100),
    })


LOGGED = np.arange(EVERY, STEPS + 1, EVERY)


@pytest.mark.parametrize(
    ("name", "frame", "config", "given", "framework", "step", "loss", "lr_key", "tokens_per_step", "last"),
    [
        ("olmo", olmo_frame(LOGGED, 16, 64),
         {"global_train_batch_size": 16, "device_train_batch_size": 4, "model.max_sequence_length": 64,
          "max_duration": STEPS},
         {}, "OLMo", "_step (W&B's row step)", "train/CrossEntropyLoss", "optim/learning_rate_group0", 16 * 64, STEPS),
        ("composer", composer_frame(np.arange(STEPS), 8, 128, tokens=True),
         {"global_train_batch_size": 8, "max_seq_len": 128, "max_duration": f"{STEPS}ba",
          "device_train_microbatch_size": 4},
         {}, "Composer / llm-foundry", "time/batch", "loss/train/total", "lr-DecoupledAdamW/group0", 8 * 128, STEPS - 1),
        ("composer-samples", composer_frame(np.arange(STEPS), 8, 128, tokens=False),
         {"global_train_batch_size": 8, "max_seq_len": 128, "max_duration": f"{STEPS}ba"},
         {}, "Composer / llm-foundry", "time/batch", "loss/train/total", "lr-DecoupledAdamW/group0", 8 * 128, STEPS - 1),
        ("megatron", megatron_frame(LOGGED, 32),
         {"global_batch_size": 32, "micro_batch_size": 4, "seq_length": 256, "train_iters": STEPS},
         {}, "Megatron-LM", "_step (W&B's row step)", "lm loss", "learning-rate", 32 * 256, STEPS),
        ("megatron-seq-flag", megatron_frame(LOGGED, 32), {"train_iters": STEPS},
         {"seq_len": 256}, "Megatron-LM", "_step (W&B's row step)", "lm loss", "learning-rate", 32 * 256, STEPS),
        ("nemo", nemo_frame(LOGGED, 16),
         {"model.global_batch_size": 16, "model.micro_batch_size": 2, "model.encoder_seq_length": 512,
          "trainer.max_steps": STEPS},
         {}, "NeMo", "global_step", "reduced_train_loss", "lr", 16 * 512, STEPS - 1),
    ],
)
def test_each_trainer_is_read_with_its_own_keys(name, frame, config, given, framework, step, loss, lr_key,
                                                tokens_per_step, last):
    history = _read(frame, config, **given)
    described = dict(history.read_as)
    assert described["framework"] == framework
    assert described["step"] == step
    assert history.loss_key == loss
    assert described["lr"] == lr_key
    assert history.lr is not None
    assert not history.on_steps
    np.testing.assert_allclose(history.batch, tokens_per_step, rtol=1e-12)
    assert history.last_step == last
    # The planned steps were read (no note that the step axis disagrees with them).
    assert not any("planned" in note for note in history.notes), history.notes
    # The training loss was chosen, with the eval loss named beside it.
    assert "eval" in described["loss"] and "training" in described["loss"]


def test_detection_from_the_keys_alone():
    keys = {
        "OLMo": olmo_frame(LOGGED, 1, 1),
        "Composer / llm-foundry": composer_frame(np.arange(5), 1, 1, tokens=False),
        "Megatron-LM": megatron_frame(LOGGED, 1),
        "NeMo": nemo_frame(LOGGED, 1),
    }
    for framework, frame in keys.items():
        found = detect(set(frame.columns) - {"_step"})
        assert found is not None and found.name == framework
    # Megatron without a loss key of the GPT recipe ('lm loss') is still Megatron by its own keys.
    assert getattr(detect({"learning-rate", "samples vs steps", "loss"}), "name", None) == "Megatron-LM"


def test_samples_without_a_sequence_length_work_on_steps_and_say_which_setting():
    """Megatron's 'samples vs steps' counts sequences: with no seq_length in the config and no
    seq_len given, the run is read on steps, with a note naming seq_len."""
    history = _read(megatron_frame(LOGGED, 32), {"train_iters": STEPS})
    assert history.on_steps
    assert any("'samples vs steps' counts sequences" in note and "seq_len" in note for note in history.notes)


def test_a_planned_length_past_the_last_step_is_noted_for_composer_batches():
    """max_duration in Composer's batches ("ba") is the planned step count, so a step axis far
    past it is noted (here the rows are numbered 10x too fast)."""
    frame = composer_frame(np.arange(STEPS), 8, 128, tokens=True)
    history = _read(frame, {"global_train_batch_size": 8, "max_seq_len": 128, "max_duration": "40ba"})
    assert any("past the planned 40 steps" in note for note in history.notes)
    # A duration in tokens or epochs is not a step count: no note.
    for duration in ("2e12T", "1ep"):
        history = _read(frame, {"global_train_batch_size": 8, "max_seq_len": 128, "max_duration": duration})
        assert not any("planned" in note for note in history.notes)


def test_tokens_from_samples_say_where_they_came_from():
    """The report names the logged sample count and the sequence length it was scaled by."""
    history = _read(nemo_frame(LOGGED, 16), {"model.encoder_seq_length": 512})
    assert dict(history.read_as)["tokens"] == "consumed_samples (samples) x seq 512 (from config 'model.encoder_seq_length')"
    assert history.batch_source == "the logged count 'consumed_samples' x 512"
    history = _read(olmo_frame(LOGGED, 16, 64), {})
    assert history.batch_source == "the logged tokens 'throughput/total_tokens'"
