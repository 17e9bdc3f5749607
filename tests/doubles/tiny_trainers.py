"""Tiny language models trained for real by Hugging Face's ``Trainer`` and Lightning's ``Trainer``.

For tests and benchmarks of the live forecast: a one-layer GPT-2 of a few thousand
parameters learns a repeating token pattern on the CPU in seconds, through each trainer's
own loop, scheduler and logging integrations (MLflow, W&B offline). Run as a script, one
training per process, so that each gets the trackers' process-wide state to itself (from
the checkout's root)::

    python -m tests.doubles.tiny_trainers hf --schedule cosine --steps 200 --out DIR \\
        --report-to mlflow wandb --targets 3.0 2.0

The trackers are found as each trainer finds them: ``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_NAME``, ``WANDB_MODE``, ``WANDB_DIR`` in the environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["SEQ_LEN", "main", "train_hf", "train_lightning"]

SEQ_LEN = 16
VOCAB = 32
BATCH = 8


def _model(size: int = 1) -> Any:
    """A GPT-2 of ``size`` layers of width 16 x ``size`` (size 1: about 10k parameters)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=16 * size, n_layer=size, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


def _data(rows: int) -> Any:
    """Sequences of a noisy repeating pattern: learnable, so the loss falls like a real run's."""
    import torch

    generator = torch.Generator().manual_seed(1)
    base = torch.arange(SEQ_LEN) % 7
    noise = torch.randint(0, VOCAB, (rows, SEQ_LEN), generator=generator)
    keep = torch.rand(rows, SEQ_LEN, generator=generator) < 0.7
    return torch.where(keep, base.expand(rows, SEQ_LEN) + 7 * (torch.arange(rows)[:, None] % 3), noise)


class _Dataset:
    def __init__(self, ids: Any) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train_hf(out: Path, *, schedule: str, steps: int, report_to: Sequence[str], targets: Sequence[float],
             every_logs: int = 5, every_seconds: float = 0.0, callback: bool = True,
             logging_steps: int = 2, background: bool = True, size: int = 1,
             count_tokens: bool = True) -> dict[str, Any]:
    """Train with ``transformers.Trainer``; return what the callback saw. Without
    ``count_tokens`` the Trainer counts no tokens and the callback composes them from
    ``seq_len``."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from tracker_plugin.live import LossEtaCallback

    kinds = {"cosine": ("cosine", {}), "wsd": ("warmup_stable_decay", {"num_decay_steps": steps // 5})}
    kind, extra = kinds[schedule]
    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=3e-3,
        lr_scheduler_type=kind, lr_scheduler_kwargs=extra, warmup_steps=steps // 10, logging_steps=logging_steps,
        report_to=list(report_to), save_strategy="no", use_cpu=True, run_name=f"hf-{schedule}",
        disable_tqdm=True, seed=0, include_num_input_tokens_seen="all" if count_tokens else "no",
    )
    live = LossEtaCallback(targets, every_logs=every_logs, every_seconds=every_seconds, min_rows=10,
                           background=background, seq_len=None if count_tokens else SEQ_LEN)
    timer = _step_timer()
    callbacks = [timer, live] if callback else [timer]
    trainer = Trainer(_model(size), args, train_dataset=_Dataset(_data(steps * BATCH)), callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)  # the logs go to the trackers, not to stdout
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    logged = [(e["step"], e["learning_rate"]) for e in trainer.state.log_history if "learning_rate" in e]
    return {**_seen(live if callback else None, logged), "train_seconds": seconds, "step_seconds": timer.mean()}


def _step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """The wall time between consecutive optimizer steps' ends, the first 10 left out (warm-up)."""

        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.ends.append(time.perf_counter())

        def mean(self) -> float:
            ends = self.ends[10:]
            return (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")

    return StepTimer()


def _seen(live: Any, logged: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """What the callback saw, and how far its plan is from the lr the trainer logged at each step."""
    if live is None:
        return {}
    plan = None if live.live is None else live.live.config.lr_schedule
    error = None
    if plan is not None and logged:
        error = max(abs(float(plan.at(step)) - lr) / max(abs(lr), 1e-30) for step, lr in logged if lr > 0)
    latest = live.live.latest if live.live is not None else None
    import os

    return {"rank": int(os.environ.get("RANK", "0")), "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "plan": live.plan_note, "status": None if live.live is None else live.live.status,
            "final_step": None if latest is None else latest.step, "outcomes": live.sinks.outcomes,
            "plan_error": error, "forecasts": 0 if live.live is None else live.live.forecasts,
            "forecast_seconds": 0.0 if live.live is None else live.live.forecast_seconds}


def train_lightning(out: Path, *, schedule: str, steps: int, report_to: Sequence[str],
                    targets: Sequence[float], every_logs: int = 5, every_seconds: float = 0.0,
                    callback: bool = True, background: bool = True) -> dict[str, Any]:
    """Train with Lightning's ``Trainer`` (accumulating two micro-batches per step, a cosine
    or a WSD ``LambdaLR`` stepped every step); return what the callback saw."""
    import os

    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from tracker_plugin.live import LossEtaLightningCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _model()
            self.lrs: list[tuple[int, float]] = []  # (global step, the lr that step's update uses)

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            self.log("train_loss", loss)
            self.lrs.append((self.trainer.global_step, self.trainer.optimizers[0].param_groups[0]["lr"]))
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_shape(schedule, steps))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    loggers: list[Any] = []
    if "mlflow" in report_to:
        loggers.append(L.pytorch.loggers.MLFlowLogger(
            experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME", "tiny"),
            tracking_uri=os.environ["MLFLOW_TRACKING_URI"], run_name=f"lightning-{schedule}"))
    if "wandb" in report_to:
        loggers.append(L.pytorch.loggers.WandbLogger(name=f"lightning-{schedule}", offline=True,
                                                    save_dir=os.environ.get("WANDB_DIR", str(out))))
    live = LossEtaLightningCallback(targets, seq_len=SEQ_LEN, every_logs=every_logs, every_seconds=every_seconds,
                                    min_rows=10, background=background)
    trainer = L.Trainer(
        max_steps=steps, accumulate_grad_batches=2, log_every_n_steps=2, logger=loggers or False,
        callbacks=[live] if callback else [], enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", devices=1, default_root_dir=str(out),
    )
    loader: Any = DataLoader(_Dataset(_data(steps * 2 * BATCH)), batch_size=BATCH)  # type: ignore[arg-type]
    module = Tiny()
    started = time.perf_counter()
    trainer.fit(module, loader)
    seconds = time.perf_counter() - started
    return {**_seen(live if callback else None, module.lrs), "train_seconds": seconds}


def _lr_shape(schedule: str, steps: int) -> Any:
    """A cosine to 0, or warmup-stable-decay with a 20% linear cooldown, as a function of the step."""
    import math

    warmup = max(1, steps // 10)

    def cosine(step: int) -> float:
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / (steps - warmup))))

    def wsd(step: int) -> float:
        decay = steps // 5
        if step < warmup:
            return step / warmup
        return 1.0 if step < steps - decay else max(0.0, (steps - step) / decay)

    return cosine if schedule == "cosine" else wsd


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trainer", choices=("hf", "lightning"))
    parser.add_argument("--schedule", choices=("cosine", "wsd"), default="cosine")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report-to", nargs="*", default=[])
    parser.add_argument("--targets", nargs="+", type=float, default=[3.0])
    parser.add_argument("--every-logs", type=int, default=5)
    parser.add_argument("--no-callback", action="store_true")
    parser.add_argument("--inline", action="store_true", help="forecast inside the logging call (a fixed series)")
    parser.add_argument("--no-token-count", action="store_true", help="hf: the Trainer counts no tokens")
    parsed = parser.parse_args(argv)
    extra = {"count_tokens": not parsed.no_token_count} if parsed.trainer == "hf" else {}
    train = train_hf if parsed.trainer == "hf" else train_lightning
    seen = train(parsed.out, schedule=parsed.schedule, steps=parsed.steps, report_to=parsed.report_to,
                 targets=parsed.targets, every_logs=parsed.every_logs, callback=not parsed.no_callback,
                 background=not parsed.inline, **extra)
    print(json.dumps(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
