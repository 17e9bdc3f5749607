"""The live forecast as a Lightning ``Callback``.

::

    from tracker_plugin.live import LossEtaLightningCallback

    trainer = L.Trainer(max_steps=10_000, logger=MLFlowLogger(), callbacks=[LossEtaLightningCallback([3.3], seq_len=1024)])
    trainer.fit(model, data)

What it reads: the loss the module logs (``self.log("train_loss", ...)``; ``monitor`` names
another key) at each optimizer step that the trainer logs (``log_every_n_steps``, counted
in optimizer steps, so ``accumulate_grad_batches`` is minded), ``trainer.global_step``,
the lr of the first optimizer's first group, tokens per step as the per-device batch
(the train dataloader's) x ``accumulate_grad_batches`` x world size x ``seq_len``, and
the wall clock. The plan is read from the first step-interval scheduler in
``trainer.lr_scheduler_configs`` up to ``max_steps`` (else ``estimated_stepping_batches``).

What it writes: the tokens per step, as the run's param ``tokens_per_step`` (Lightning
counts no tokens; so the run reads back without flags); each forecast's ``when_<target>_...`` numbers through ``trainer.loggers`` at the
trainer's step, at the start of the next batch (after Lightning has logged the step's own
row, so the tracker's rows stay in order), and at the end of training the annotation
(MLflow's run by id, W&B's open run; see :mod:`tracker_plugin.live.sinks`). Global rank 0 only; an exception inside the
callback is warned about once, and training goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import MissingDependency
from tracker_plugin.live.run_params import TOKENS_PARAM, log_lightning_params
from tracker_plugin.live.session import LiveSession, SessionView, callback_settings
from tracker_plugin.live.stream import (
    DEFAULT_EVERY_LOGS,
    DEFAULT_EVERY_SECONDS,
    MIN_ROWS,
    LiveResult,
)

try:
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependency("lightning", "lightning") from exc

__all__ = ["LossEtaLightningCallback"]


class LossEtaLightningCallback(Callback, SessionView):
    """Forecast when the run reaches each target, while it trains (see the module docstring).

    Parameters are those of :class:`~tracker_plugin.live.hf.LossEtaCallback`, with
    ``monitor`` (the logged loss key) in place of ``loss``, and ``tokens_per_step`` to give
    the batch in tokens outright.
    """

    def __init__(
        self,
        targets: Sequence[float],
        *,
        seq_len: int | None = None,
        tokens_per_step: float | None = None,
        monitor: str = "train_loss",
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
        self.seq_len, self.tokens_per_step, self.monitor = seq_len, tokens_per_step, monitor
        self.session = LiveSession(callback_settings(
            targets, config=config, every_logs=every_logs, every_seconds=every_seconds, min_rows=min_rows,
            stop_when_unreachable=stop_when_unreachable, min_fraction=min_fraction, progress=progress,
            annotate_at_end=annotate_at_end, background=background, siblings=siblings,
        ))
        self._last_step = -1
        self._tokens_param = False  # the run holds its tokens per step as a param (live/run_params.py)
        self._restored: dict[str, list[float]] | None = None  # rows from a checkpoint

    # -- Lightning's hooks ---------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.session.guarded(self._begin, trainer)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        # Logged here, after Lightning has logged the last step's own row: a row of ours ahead
        # of it, at a later step, would put the run's clock out of order in the tracker.
        if self.session.guarded(self.session.emit, int(trainer.global_step), _total_steps(trainer), _logger(trainer)):
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.session.guarded(self._row, trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        sinks = self.session.sinks

        def annotate(config: AnalysisConfig, result: LiveResult | None, batch_size: float | None) -> None:
            for logger in trainer.loggers:
                logger.finalize("success")  # our annotation must come after the run's last write
            batch = None if self._tokens_param else batch_size  # read back from the param, as annotate does
            sinks.annotate_runs(config, _mlflow_runs(trainer), _wandb_runs(trainer), result, batch)

        self.session.guarded(self.session.finish, int(trainer.global_step), _logger(trainer), annotate)

    def state_dict(self) -> dict[str, Any]:
        """The rows so far, kept in Lightning's checkpoints so a resumed run picks them up."""
        live = self.session.live
        return {"rows": live.snapshot()} if live is not None and live.enabled else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = state_dict.get("rows")

    # -- what each does --------------------------------------------------------------------
    def _begin(self, trainer: Any) -> None:
        live = self.session.start(
            rank_zero=bool(trainer.is_global_zero), scheduler=_step_scheduler(trainer), total_steps=_total_steps(trainer),
            tokens_per_step=self.tokens_per_step or _tokens_per_step(trainer, self.seq_len), name=_run_name(trainer),
        )
        if live.enabled and self._restored:
            live.restore(self._restored)
        if live.enabled and live.tokens_per_step is not None:
            self._tokens_param = log_lightning_params({TOKENS_PARAM: live.tokens_per_step}, trainer.loggers)

    def _row(self, trainer: Any) -> None:
        """Take the row of an optimizer step the loggers log."""
        step, live = int(trainer.global_step), self.session.live
        if live is None or step == self._last_step or step % max(1, int(trainer.log_every_n_steps)):
            return  # a micro-batch inside an accumulation, or a step the loggers skip
        loss = trainer.callback_metrics.get(self.monitor)
        if loss is None:
            return
        self._last_step = step
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        live.update(step, float(loss), lr=None if lr is None else float(lr))


def _logger(trainer: Any) -> Callable[[dict[str, float], int], None]:
    """Log to every logger of the trainer at ``step``."""
    def log(metrics: dict[str, float], step: int) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    return log


def _total_steps(trainer: Any) -> int | None:
    if trainer.max_steps and trainer.max_steps > 0:
        return int(trainer.max_steps)
    estimated = trainer.estimated_stepping_batches
    return int(estimated) if estimated and estimated != float("inf") else None


def _step_scheduler(trainer: Any) -> Any:
    """The first scheduler stepped every optimizer step (an epoch-interval one counts epochs)."""
    for config in trainer.lr_scheduler_configs:
        if config.interval == "step" and config.frequency == 1:
            return config.scheduler
    return None


def _tokens_per_step(trainer: Any, seq_len: int | None) -> float | None:
    loader = trainer.train_dataloader
    batch = getattr(loader, "batch_size", None)
    if seq_len is None or not batch:
        return None
    return float(batch * int(trainer.accumulate_grad_batches) * int(trainer.world_size) * seq_len)


def _run_name(trainer: Any) -> str:
    for logger in trainer.loggers:
        name = getattr(logger, "name", None)
        if isinstance(name, str) and name:
            return name
    return "live"


def _mlflow_runs(trainer: Any) -> list[tuple[str, str]]:
    runs = []
    for logger in trainer.loggers:
        if type(logger).__name__ == "MLFlowLogger" and logger.run_id:
            runs.append((str(logger.run_id), str(logger.experiment.tracking_uri)))
    return runs


def _wandb_runs(trainer: Any) -> list[Any]:
    return [logger.experiment for logger in trainer.loggers if type(logger).__name__ == "WandbLogger"]
