"""The live forecast as a Hugging Face ``TrainerCallback`` (``Trainer``, and what builds on it).

::

    from tracker_plugin.live import LossEtaCallback

    trainer = Trainer(model, args, train_dataset=data, callbacks=[LossEtaCallback(targets=[3.3], seq_len=1024)])
    trainer.train()

What it reads, at each ``on_log``: the loss the Trainer logs (``loss``; ``eval_loss`` from
``on_evaluate`` with ``loss="eval"``), the optimizer step ``state.global_step``, tokens
from ``state.num_input_tokens_seen`` when the Trainer counts them
(``include_num_input_tokens_seen``), else per-device batch x accumulation x world size x
``seq_len``, and the wall clock. The planned lr is read once from the live scheduler, up
to ``state.max_steps``, without stepping it (:func:`~tracker_plugin.plan.scheduler.plan_from_scheduler`).

What it writes: the tokens per step it composed, as the run's param ``tokens_per_step``
when the Trainer counts none (so the run reads back without flags); each forecast's ``when_<target>_...`` numbers, through the loggers the run
reports to (``wandb.run.log`` with ``train/global_step``, ``mlflow.log_metrics`` at the
step), so the trackers' own charts show each ETA converge; at the end of training, the
annotation ``tracker-plugin annotate`` writes (see :func:`~tracker_plugin.live.sinks.annotate_at_end`).
Rank 0 only. An exception inside the callback is warned about once; training goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import ConfigError, MissingDependency
from tracker_plugin.live.run_params import TOKENS_PARAM, log_hf_params
from tracker_plugin.live.session import LiveSession, SessionView, callback_settings
from tracker_plugin.live.stream import (
    DEFAULT_EVERY_LOGS,
    DEFAULT_EVERY_SECONDS,
    MIN_ROWS,
    LiveForecast,
    LiveResult,
)
from tracker_plugin.plan.schedule import LrSchedule

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependency("transformers", "hf") from exc

__all__ = ["LossEtaCallback"]


class LossEtaCallback(TrainerCallback, SessionView):
    """Forecast when the run reaches each target, while it trains.

    Parameters
    ----------
    targets:
        Target losses.
    seq_len:
        Tokens per sequence, for tokens per step when the Trainer does not count tokens.
        With neither, the forecast is on steps.
    loss:
        ``"train"`` (the logged ``loss``) or ``"eval"`` (``eval_loss`` at each evaluation).
    config:
        Further analysis settings.
    every_logs, every_seconds, min_rows:
        The cadence and the rows needed first (see :class:`~tracker_plugin.live.LiveForecast`).
    stop_when_unreachable:
        Stop training when every target is out of reach within the plan with high
        confidence, once ``min_fraction`` of the planned steps are done. Off by default.
    progress:
        Write each new forecast's short ETA per target above the progress bar. Off by default.
    annotate_at_end:
        Write the full annotation to the run at the end of training.
    background:
        Forecast on a thread of its own (the default); False forecasts inside the
        logging call, for tests and replays.
    siblings:
        The finished runs of the run's configuration (run strings, or their evidence
        already read): before the first step the run says what their law forecasts for its
        plan (each target and the loss at the plan's end), and its forecasts join that law.

    Raises
    ------
    ConfigError
        ``loss`` is neither ``"train"`` nor ``"eval"``.
    """

    def __init__(
        self,
        targets: Sequence[float],
        *,
        seq_len: int | None = None,
        loss: str = "train",
        config: AnalysisConfig | None = None,
        every_logs: int = DEFAULT_EVERY_LOGS,
        every_seconds: float = DEFAULT_EVERY_SECONDS,
        min_rows: int = MIN_ROWS,
        stop_when_unreachable: bool = False,
        min_fraction: float = 0.5,
        progress: bool = False,
        annotate_at_end: bool = True,
        background: bool = True,
        siblings: Any = None,
    ) -> None:
        if loss not in ("train", "eval"):
            raise ConfigError(f"loss is 'train' or 'eval', got {loss!r}")
        self.seq_len, self.loss = seq_len, loss
        self._tokens_param = False  # the run holds its tokens per step as a param (live/run_params.py)
        self.session = LiveSession(callback_settings(
            targets, config=config, every_logs=every_logs, every_seconds=every_seconds, min_rows=min_rows,
            stop_when_unreachable=stop_when_unreachable, min_fraction=min_fraction, progress=progress,
            annotate_at_end=annotate_at_end, background=background, siblings=siblings,
        ))

    # -- the Trainer's events ------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.guarded(self._begin, args, state, kwargs.get("lr_scheduler"))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.loss == "train" and logs and "loss" in logs:
            self.session.guarded(self._row, args, state, logs["loss"], logs.get("learning_rate"))
        if self.session.guarded(self.session.emit, int(state.global_step), state.max_steps, self._logger(args)):
            control.should_training_stop = True

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.loss == "eval" and metrics and "eval_loss" in metrics:
            self.session.guarded(self._row, args, state, metrics["eval_loss"], None)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        sinks = self.session.sinks

        def annotate(config: AnalysisConfig, result: LiveResult | None, batch_size: float | None) -> None:
            # With the param logged, the run reads back its tokens as annotate does, no flag given.
            sinks.annotate(config, args, result=result, batch_size=None if self._tokens_param else batch_size)

        self.session.guarded(self.session.finish, int(state.global_step), self._logger(args), annotate)

    # -- what each does --------------------------------------------------------------------
    def _begin(self, args: Any, state: Any, scheduler: Any) -> None:
        total = int(state.max_steps) if state.max_steps and state.max_steps > 0 else None
        live = self.session.start(
            rank_zero=bool(state.is_world_process_zero), scheduler=scheduler, total_steps=total,
            tokens_per_step=None if _counts_tokens(args) else _tokens_per_step(args, self.seq_len),
            name=str(getattr(args, "run_name", None) or "live"), on_trainer_steps=_on_global_steps,
        )
        if live.enabled:
            self._resume(live, state)
            if live.tokens_per_step is not None:
                self._tokens_param = log_hf_params({TOKENS_PARAM: live.tokens_per_step}, args)

    def _resume(self, live: LiveForecast, state: Any) -> None:
        """A run resumed from a checkpoint picks its logged losses back up from ``log_history``."""
        key = "loss" if self.loss == "train" else "eval_loss"
        for entry in getattr(state, "log_history", None) or []:
            if key in entry and "step" in entry:
                live.update(int(entry["step"]), float(entry[key]), tokens=entry.get("num_input_tokens_seen"),
                            lr=entry.get("learning_rate"), time=math.nan)

    def _row(self, args: Any, state: Any, loss: Any, lr: Any) -> None:
        live = self.session.live
        if live is not None:
            tokens = state.num_input_tokens_seen if _counts_tokens(args) else None
            live.update(int(state.global_step), float(loss), tokens=tokens, lr=lr)

    def _logger(self, args: Any) -> Callable[[dict[str, float], int], None]:
        sinks = self.session.sinks
        return lambda metrics, step: sinks.log(metrics, step, args)


def _on_global_steps(schedule: LrSchedule | None, total: int) -> LrSchedule | None:
    """The plan on the Trainer's ``global_step``: the lr logged at global step G (and used
    for that step's update) is the one the scheduler held after G-1 of its steps."""
    if schedule is None:
        return None
    return replace(schedule, steps=tuple(s + 1 for s in schedule.steps), total_steps=float(total))


def _counts_tokens(args: Any) -> bool:
    counting = getattr(args, "include_num_input_tokens_seen", "no")
    return counting not in (False, None, "no")


def _tokens_per_step(args: Any, seq_len: int | None) -> float | None:
    """Per-device batch x accumulation x world size x sequence length, or None without ``seq_len``."""
    if seq_len is None:
        return None
    world = int(getattr(args, "world_size", 1) or 1)
    return float(args.per_device_train_batch_size * args.gradient_accumulation_steps * world * seq_len)
