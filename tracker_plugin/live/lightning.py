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

What it writes: each forecast's ``loss_eta/...`` numbers through ``trainer.loggers`` at the
trainer's step, and at the end of training the annotation (MLflow's run by id, W&B's open
run; see :mod:`tracker_plugin.live.sinks`). Global rank 0 only; an exception inside the
callback is warned about once, and training goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import MissingDependency
from tracker_plugin.live.sinks import TrackerSinks, say_progress, should_stop
from tracker_plugin.live.stream import (
    DEFAULT_EVERY_LOGS,
    DEFAULT_EVERY_SECONDS,
    MIN_ROWS,
    LiveForecast,
    LiveResult,
)

try:
    from lightning.pytorch.callbacks import Callback
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise MissingDependency("lightning", "lightning") from exc

__all__ = ["LossEtaLightningCallback"]


class LossEtaLightningCallback(Callback):
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
    ) -> None:
        self.targets = tuple(targets)
        self.seq_len, self.tokens_per_step, self.monitor, self.config = seq_len, tokens_per_step, monitor, config
        self.cadence = {"every_logs": every_logs, "every_seconds": every_seconds, "min_rows": min_rows}
        self.stop_when_unreachable, self.min_fraction = stop_when_unreachable, min_fraction
        self.annotate_at_end = annotate_at_end
        self.progress = progress
        self.live: LiveForecast | None = None
        self.plan_note = "no plan read yet"
        self.sinks = TrackerSinks()
        self._last_step = -1
        self._restored: dict[str, list[float]] | None = None  # rows from a checkpoint
        self._logged: LiveResult | None = None
        self._warned: set[str] = set()

    # -- Lightning's hooks ---------------------------------------------------------------
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._guarded(self._begin, trainer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._guarded(self._row, trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._guarded(self._end, trainer)

    def state_dict(self) -> dict[str, Any]:
        """The rows so far, kept in Lightning's checkpoints so a resumed run picks them up."""
        return {"rows": self.live.snapshot()} if self.live is not None and self.live.enabled else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = state_dict.get("rows")

    # -- what each does --------------------------------------------------------------------
    def _begin(self, trainer: Any) -> None:
        from tracker_plugin.plan.scheduler import plan_from_scheduler

        if not trainer.is_global_zero:
            self.live = LiveForecast(self.targets, rank=1, background=False)  # rank 0 forecasts for all
            return
        total = _total_steps(trainer)
        scheduler = _step_scheduler(trainer)
        schedule = None
        if scheduler is not None and total is not None:
            read = plan_from_scheduler(scheduler, total)
            schedule, self.plan_note = read.schedule, read.how
        else:
            self.plan_note = "no step-interval scheduler and planned steps: the plan is inferred from the log"
        self.live = LiveForecast(
            self.targets,
            plan=schedule,
            total_steps=total if schedule is None else None,
            tokens_per_step=self.tokens_per_step or _tokens_per_step(trainer, self.seq_len),
            config=self.config,
            rank=0,
            name=_run_name(trainer),
            **self.cadence,  # type: ignore[arg-type]
        )
        self.live.plan_note = self.plan_note
        if self._restored:
            self.live.restore(self._restored)

    def _row(self, trainer: Any) -> None:
        step = int(trainer.global_step)
        if self.live is None or step == self._last_step or step % max(1, int(trainer.log_every_n_steps)):
            return  # a micro-batch inside an accumulation, or a step the loggers skip
        loss = trainer.callback_metrics.get(self.monitor)
        if loss is None:
            return
        self._last_step = step
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        self.live.update(step, float(loss), lr=None if lr is None else float(lr))
        self._emit(trainer)

    def _emit(self, trainer: Any) -> None:
        latest = None if self.live is None else self.live.latest
        if latest is None or latest is self._logged or not trainer.is_global_zero:
            return
        self._logged = latest
        for logger in trainer.loggers:
            logger.log_metrics(dict(latest.metrics), step=int(trainer.global_step))
        if self.progress:
            say_progress(latest)
        if self.stop_when_unreachable and should_stop(latest, trainer.global_step, _total_steps(trainer), self.min_fraction):
            trainer.should_stop = True

    def _end(self, trainer: Any) -> None:
        if self.live is None or not trainer.is_global_zero:
            return
        result = self.live.forecast()
        self.live.close()
        if result is not None and result is not self._logged:
            self._logged = result
            for logger in trainer.loggers:
                logger.log_metrics(dict(result.metrics), step=int(trainer.global_step))
        if self.annotate_at_end:
            for logger in trainer.loggers:
                logger.finalize("success")  # our annotation must come after the run's last write
            self.sinks.annotate_runs(
                self.live.config, _mlflow_runs(trainer), _wandb_runs(trainer), result, self.live.tokens_per_step
            )

    def _guarded(self, call: Any, *args: Any) -> None:
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - the trainer comes first
            kind = type(exc).__name__
            if kind not in self._warned:
                self._warned.add(kind)
                warnings.warn(f"tracker_plugin live forecast: {kind}: {exc} (training goes on)", RuntimeWarning, stacklevel=2)


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
