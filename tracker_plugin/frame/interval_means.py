"""Which logged losses are means over a logging interval, and over how many steps.

A trainer either logs the loss at a step (nanoGPT's ``estimate_loss`` on the model at
``iter``; Lightning's ``on_step`` values; torchtitan's step loss) or the mean of the
training loss over the steps since its last log:

- Hugging Face ``Trainer`` (transformers ``trainer.py``, ``_maybe_log_save_evaluate``):
  ``logs["loss"] = tr_loss_scalar / (self.state.global_step - self._globalstep_last_logged)``,
  the loss summed since the last log over the steps since it; TRL's trainers log through
  it. W&B gets it as ``train/loss``, MLflow and ``trainer_state.json`` as ``loss``.
- Lightning (``self.log(..., on_epoch=True)``): the metric is reduced (a mean by default)
  over the epoch and logged once, at the epoch's last step, under the user's name (with
  ``_epoch`` appended when it is also logged ``on_step``). Every row Lightning logs carries
  ``epoch``, so a loss logged once per epoch is such a mean.

Such a value belongs to the middle of its interval, not its end: the frame records the
steps each value averages (``History.loss_spans``) and the smoothing places it there.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tracker_plugin.frame.history import History

__all__ = ["EPOCH_KEY", "MEAN_WORDS", "epoch_means", "interval_spans", "with_loss_spans"]

# The key every row Lightning logs carries (trainer/connectors/logger_connector).
EPOCH_KEY = "epoch"
MEAN_WORDS = "a mean over each logging interval, placed at its middle"
# Fewer epochs than this, and a loss logged once an epoch says nothing of its kind.
_MIN_EPOCHS = 3


def interval_spans(step: np.ndarray) -> np.ndarray:
    """The steps each row's mean covers: those since the row before. The first row covers
    the steps from the start of the run (a trainer's first log is at its interval: HF's
    at step N after N steps, Lightning's at global_step N - 1 after N), but never more than
    the interval after it (a log that starts late, a resumed attempt)."""
    step = np.asarray(step, float)
    spans = np.ones(len(step))
    if len(step) < 2:
        return spans
    spans[1:] = np.diff(step)
    spans[0] = max(1.0, min(float(step[0]) + 1.0, spans[1]))
    return spans


def epoch_means(frame: pd.DataFrame, loss_key: str, epoch_key: str | None) -> bool:
    """Is ``loss_key`` logged once per epoch (Lightning's ``on_epoch`` mean), by the epoch
    its rows logged? Each of at least three epochs in a row has one loss row, and every
    loss row has its epoch (a loss logged ``on_step`` has several rows an epoch)."""
    if epoch_key is None or epoch_key not in frame or loss_key not in frame:
        return False
    loss = pd.to_numeric(frame[loss_key], errors="coerce").notna().to_numpy(bool)
    epoch = pd.to_numeric(frame[epoch_key], errors="coerce").to_numpy(float)[loss]
    if len(epoch) < _MIN_EPOCHS or np.isnan(epoch).any():
        return False
    return bool(np.all(np.diff(epoch) == 1))


def with_loss_spans(history: History, means: bool) -> History:
    """``history`` with the steps each logged loss averages, when ``means``."""
    if not means or len(history) < 2:
        return history
    return replace(history, loss_spans=interval_spans(history.step))
