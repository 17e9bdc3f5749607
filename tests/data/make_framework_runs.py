"""Write small training runs through the real trainers' own tracker integrations (developer only).

Not run by CI: CI reads the fixtures this writes into ``tests/data/frameworks/``. Each run
trains a one-parameter module whose loss is a known function of the optimizer step
(:func:`curve`), so every crossing has an answer computed without the plugin (see
``tests/test_frameworks.py``). Make the throwaway venv and run it from the worktree::

    python -m venv /tmp/fw-venv && /tmp/fw-venv/bin/pip install torch==2.13.0 transformers \
        lightning mlflow wandb accelerate datasets
    /tmp/fw-venv/bin/python tests/data/make_framework_runs.py tests/data/frameworks
    # or only some runs, every other fixture left as it is:
    /tmp/fw-venv/bin/python tests/data/make_framework_runs.py --only olmo,composer,megatron tests/data/frameworks

What writes what:

- ``hf``: the ``transformers`` ``Trainer`` with ``report_to=["mlflow"]`` and, in a second
  run with ``include_num_input_tokens_seen``, ``report_to=["wandb"]``; each checkpoint's
  ``trainer_state.json`` (the second's, whose entries carry ``train_runtime``, in
  ``hf/tokens-seen/``).
- ``hf-resumed``: the same ``Trainer`` with ``report_to=["wandb"]`` and checkpoints every
  ``RESUME_SAVE`` steps, preempted: the first attempt dies at step ``RESUME_CUT``, a second
  process resumes with ``resume_from_checkpoint`` and the same ``WANDB_RUN_ID`` with
  ``WANDB_RESUME=allow``. W&B writes the attempts into two offline directories of one run
  id, both kept in ``wandb/hf-resumed/``.
- ``lightning``: a ``lightning`` ``Trainer`` with ``MLFlowLogger``, ``WandbLogger`` and
  ``CSVLogger`` at once, and ``LearningRateMonitor``; CSVLogger's ``metrics.csv``.
- ``nanogpt-eval``: nanoGPT's logging again, at an eval cadence (``NANOGPT_EVAL``: every
  250 of 2000 iters), the way its configs log the train loss.
- ``nanogpt``, ``torchtitan``, ``litgpt``: these trainers need GPUs and their own data, so
  their logging code path is copied minimally (the calls and the metric dicts, with the
  source each came from) and driven against the real ``wandb`` and ``mlflow`` clients
  (litgpt logs through Lightning's own ``WandbLogger``/``MLFlowLogger``, as it does).
- ``olmo``, ``composer``, ``megatron``: the same, for OLMo's and Megatron-LM's W&B logging
  and Composer's ``WandBLogger`` and ``MLFlowLogger`` (Composer's MLflow run in its own
  store, ``composer/mlflow.db.gz``, gzipped).

The W&B runs are offline (``WANDB_MODE=offline`` in this script's own environment); only
their ``.wandb`` files are kept. MLflow runs go to one sqlite store, ``mlflow.db``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

# The generator's known configuration; tests/test_frameworks.py repeats these numbers.
STEPS = 400  # optimizer steps of every run
LOG_EVERY = 10  # logging_steps / log_every_n_steps / eval_interval / log_freq
BATCH = 4  # per-device sequences per micro-batch
ACCUM = 2  # gradient accumulation
SEQ = 64  # tokens per sequence
WARMUP = 40
PEAK_LR = 1e-3
# nanogpt-eval: nanoGPT's W&B log at an eval cadence as its configs set it (shakespeare_char:
# eval_interval 250 of max_iters 5000), its train loss logged at evals only.
NANOGPT_EVAL = {"steps": 2000, "eval_interval": 250}
# litgpt: micro_batch_size 2 on 2 devices, global batch 32 -> 8 micro-iterations per step.
LITGPT = {"micro": 2, "devices": 2, "global": 32, "log_interval": 5}


def curve(step: float) -> float:
    """The training loss at optimizer step ``step`` (1-based): a power law to 2.0."""
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def cosine_lr(step: int, total: int = STEPS) -> float:
    """HF's ``cosine`` schedule (get_cosine_schedule_with_warmup) at 0-based ``step``."""
    if step < WARMUP:
        return PEAK_LR * step / WARMUP
    progress = (step - WARMUP) / (total - WARMUP)
    return PEAK_LR * 0.5 * (1.0 + math.cos(math.pi * progress))


def _env(out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DISABLE_CODE="true",
        WANDB_DIR=str(out / "_wandb"),
        MLFLOW_TRACKING_URI=f"sqlite:///{out / 'mlflow.db'}",
        TOKENIZERS_PARALLELISM="false",
        HF_MLFLOW_LOG_ARTIFACTS="0",
    )
    return env


def _hf(out: Path, tracker: str) -> None:
    import torch
    from torch import nn
    from transformers import Trainer, TrainingArguments

    class Curve(nn.Module):
        """Loss = curve(optimizer step); the forward pass counts micro-batches."""

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))
            self.calls = 0

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
            step = self.calls // ACCUM + 1
            self.calls += 1
            return {"loss": torch.tensor(curve(step)) + 0.0 * self.w.sum() + 0.0 * input_ids.float().mean()}

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return STEPS * BATCH * ACCUM

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.zeros(SEQ, dtype=torch.long)
            return {"input_ids": ids, "labels": ids}

    name = f"hf-{tracker}"
    args = TrainingArguments(
        output_dir=str(out / "_hf" / name),
        run_name=name,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        learning_rate=PEAK_LR,
        lr_scheduler_type="cosine",
        warmup_steps=WARMUP,
        logging_steps=LOG_EVERY,
        save_strategy="steps",
        save_steps=STEPS,
        report_to=[tracker],
        include_num_input_tokens_seen=tracker == "wandb",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    Trainer(model=Curve(), args=args, train_dataset=Data()).train()
    state = out / "_hf" / name / f"checkpoint-{STEPS}" / "trainer_state.json"
    if tracker == "mlflow":
        shutil.copy(state, out / "hf" / "trainer_state.json")
    else:
        (out / "hf" / "tokens-seen").mkdir(parents=True, exist_ok=True)
        shutil.copy(state, out / "hf" / "tokens-seen" / "trainer_state.json")


# hf-resumed: checkpoints every RESUME_SAVE steps, the first attempt is cut off at
# RESUME_CUT (after its log at step 180), and the second resumes from the checkpoint.
RESUME_SAVE = 150
RESUME_CUT = 185
RESUME_ID = "hfresume1"


class Preempted(RuntimeError):
    """The first attempt of hf-resumed ends here, as a preempted job does."""


def _hf_resumed(out: Path) -> None:
    """An HF Trainer run preempted and resumed into one W&B offline run: the first attempt
    in its own process until it dies at RESUME_CUT, the second from the checkpoint at
    RESUME_SAVE with ``resume_from_checkpoint``; both with the same ``WANDB_RUN_ID`` and
    ``WANDB_RESUME=allow``, as a job scheduler's requeue would start them."""
    env = {**os.environ, "WANDB_RUN_ID": RESUME_ID, "WANDB_RESUME": "allow"}
    first = subprocess.run([sys.executable, __file__, "--attempt", "1", str(out)], env=env, check=False)
    if first.returncode == 0:
        raise SystemExit("the first attempt of hf-resumed was not cut off")
    subprocess.run([sys.executable, __file__, "--attempt", "2", str(out)], env=env, check=True)


def _hf_attempt(out: Path, attempt: int) -> None:
    """One attempt of hf-resumed: the Trainer of ``_hf`` whose loss follows the trainer's
    own global step (a resumed model counts its forward calls from 0 again)."""
    import torch
    from torch import nn
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Curve(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))
            self.step = 1

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
            return {"loss": torch.tensor(curve(self.step)) + 0.0 * self.w.sum() + 0.0 * input_ids.float().mean()}

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return STEPS * BATCH * ACCUM

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.zeros(SEQ, dtype=torch.long)
            return {"input_ids": ids, "labels": ids}

    model = Curve()

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: object, state: object, control: object, **kwargs: object) -> None:
            model.step = state.global_step + 1  # type: ignore[attr-defined]

        def on_step_end(self, args: object, state: object, control: object, **kwargs: object) -> None:
            if attempt == 1 and state.global_step == RESUME_CUT:  # type: ignore[attr-defined]
                raise Preempted(f"preempted at step {RESUME_CUT}")

    output = out / "_hf" / "hf-resumed"
    args = TrainingArguments(
        output_dir=str(output),
        run_name="hf-resumed",
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM,
        learning_rate=PEAK_LR,
        lr_scheduler_type="cosine",
        warmup_steps=WARMUP,
        logging_steps=LOG_EVERY,
        save_strategy="steps",
        save_steps=RESUME_SAVE,
        report_to=["wandb"],
        include_num_input_tokens_seen=True,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Clock()])
    checkpoint = str(output / f"checkpoint-{RESUME_SAVE}") if attempt == 2 else None
    trainer.train(resume_from_checkpoint=checkpoint)


def _lightning(out: Path) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
    from torch import nn

    class Module(L.LightningModule):
        def __init__(self, batch_size: int, seq_len: int, accumulate_grad_batches: int, max_steps: int) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.w = nn.Parameter(torch.zeros(1))

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = torch.tensor(curve(self.global_step + 1)) + 0.0 * self.w.sum()
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def configure_optimizers(self) -> dict[str, object]:
            opt = torch.optim.AdamW(self.parameters(), lr=PEAK_LR)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s) / PEAK_LR)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    data = torch.utils.data.DataLoader(torch.zeros(STEPS * ACCUM * BATCH, SEQ, dtype=torch.long), batch_size=BATCH)
    loggers = [
        MLFlowLogger(experiment_name="frameworks", run_name="lightning-mlflow", tracking_uri=_env(out)["MLFLOW_TRACKING_URI"]),
        WandbLogger(project="frameworks", name="lightning-wandb", save_dir=str(out / "_wandb"), offline=True),
        CSVLogger(str(out / "_csv"), name="lightning"),
    ]
    trainer = L.Trainer(
        max_steps=STEPS,
        accumulate_grad_batches=ACCUM,
        log_every_n_steps=LOG_EVERY,
        logger=loggers,
        callbacks=[LearningRateMonitor(logging_interval="step")],
        accelerator="cpu",
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(BATCH, SEQ, ACCUM, STEPS), data)
    (metrics,) = (out / "_csv").rglob("metrics.csv")
    shutil.copy(metrics, out / "lightning" / "metrics.csv")
    shutil.copy(metrics.with_name("hparams.yaml"), out / "lightning" / "hparams.yaml")


def _nanogpt(out: Path, name: str = "nanogpt-wandb", steps: int = STEPS, eval_interval: int = LOG_EVERY) -> None:
    """nanoGPT's train.py logging (https://github.com/karpathy/nanoGPT/blob/e2221318e607eb5ee0669d6b7641af25a2111545/train.py):
    ``config`` holds the script's globals; every ``eval_interval`` iters it logs
    ``iter``, ``train/loss``, ``val/loss``, ``lr`` and ``mfu`` with ``wandb.log``."""
    import wandb

    config = {
        "batch_size": BATCH, "block_size": SEQ, "gradient_accumulation_steps": ACCUM, "max_iters": steps,
        "eval_interval": eval_interval, "learning_rate": PEAK_LR, "decay_lr": True, "warmup_iters": WARMUP,
        "lr_decay_iters": steps, "min_lr": 0.0, "wandb_log": True,
    }
    wandb.init(project="frameworks", name=name, config=config)

    def get_lr(it: int) -> float:  # nanoGPT's get_lr, with its config
        if it < WARMUP:
            return PEAK_LR * (it + 1) / (WARMUP + 1)
        ratio = (it - WARMUP) / (steps - WARMUP)
        return 0.0 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (PEAK_LR - 0.0)

    for iter_num in range(steps + 1):
        if iter_num % eval_interval == 0:
            # estimate_loss() on the model after iter_num optimizer steps
            loss = curve(iter_num) if iter_num else curve(0.0)
            wandb.log({"iter": iter_num, "train/loss": loss, "val/loss": loss + 0.05, "lr": get_lr(iter_num), "mfu": 0.0})
    wandb.finish()


def _torchtitan(out: Path) -> None:
    """torchtitan's WandBLogger and MetricsProcessor.log (v0.2.2,
    https://github.com/pytorch/torchtitan/blob/00fbaafa6ea1b54dd1a9b451a648f196781e8b26/torchtitan/components/metrics.py):
    ``wandb.init(config=job_config.to_dict())``; at step 1 and every ``metrics.log_freq``
    steps ``wandb.log(metrics, step=step)`` with ``loss_metrics/*`` and the trainer's
    ``extra_metrics`` (``n_tokens_seen``, ``lr``)."""
    import wandb

    dp = 2
    job_config = {
        "training": {"local_batch_size": BATCH, "seq_len": SEQ, "steps": STEPS, "global_batch_size": BATCH * ACCUM * dp},
        "parallelism": {"data_parallel_shard_degree": dp},
        "lr_scheduler": {"warmup_steps": WARMUP, "decay_ratio": None, "decay_type": "cosine", "min_lr_factor": 0.0},
        "optimizer": {"name": "AdamW", "lr": PEAK_LR},
        "metrics": {"log_freq": LOG_EVERY, "enable_wandb": True},
    }
    wandb.init(project="frameworks", name="torchtitan-wandb", config=job_config)
    per_step = BATCH * ACCUM * dp * SEQ
    for step in range(1, STEPS + 1):
        if step == 1 or step % LOG_EVERY == 0:
            metrics = {
                "loss_metrics/global_avg_loss": curve(step),
                "loss_metrics/global_max_loss": curve(step) + 0.1,
                "grad_norm": 1.0,
                "throughput(tps)": 1000.0,
                "n_tokens_seen": step * per_step,
                "lr": cosine_lr(step - 1),
            }
            wandb.log(metrics, step=step)
    wandb.finish()


def _litgpt(out: Path) -> None:
    """litgpt's pretrain.py fit loop logging (https://github.com/Lightning-AI/litgpt/blob/0363060b9b9952baada5e5e91c5f2ca1030acd35/litgpt/pretrain.py):
    every ``log_interval`` optimizer steps ``fabric.log_dict(metrics, step=iter_num - 1)``
    with ``iter`` (micro-iterations), ``step`` (optimizer steps), per-device ``tokens``,
    ``total_tokens`` and ``learning_rate``; hyperparameters through ``log_hyperparams``.
    The loggers are Lightning's, as litgpt's ``choose_logger`` makes them."""
    from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

    micro, devices, global_batch = LITGPT["micro"], LITGPT["devices"], LITGPT["global"]
    accum = global_batch // (micro * devices)
    max_iters = STEPS * accum
    hparams = {
        "model_name": "pythia-14m", "devices": devices, "num_nodes": 1,
        "train": {
            "global_batch_size": global_batch, "micro_batch_size": micro, "max_tokens": max_iters * micro * devices * SEQ,
            "max_seq_length": SEQ, "lr_warmup_steps": WARMUP, "log_interval": LITGPT["log_interval"], "min_lr": 0.0,
        },
        "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": PEAK_LR}},
    }
    loggers = [
        WandbLogger(project="frameworks", name="litgpt-wandb", save_dir=str(out / "_wandb"), offline=True),
        MLFlowLogger(experiment_name="frameworks", run_name="litgpt-mlflow", tracking_uri=_env(out)["MLFLOW_TRACKING_URI"]),
    ]
    for logger in loggers:
        logger.log_hyperparams(hparams)
    log_iter_interval = LITGPT["log_interval"] * accum
    state = {"iter_num": 0, "step_count": 0}
    for _ in range(max_iters):
        state["iter_num"] += 1
        is_accumulating = state["iter_num"] % accum != 0
        if not is_accumulating:
            state["step_count"] += 1
        if state["iter_num"] % log_iter_interval == 0:
            metrics = {
                "loss": curve(state["step_count"]),
                "iter": state["iter_num"],
                "step": state["step_count"],
                "epoch": 0,
                "iter_time": 0.01,
                "remaining_time": 1.0,
                "tokens": state["iter_num"] * micro * SEQ,
                "total_tokens": state["iter_num"] * micro * SEQ * devices,
                "learning_rate": cosine_lr(state["step_count"]),
            }
            for logger in loggers:
                logger.log_metrics(metrics, step=state["iter_num"] - 1)
    for logger in loggers:
        logger.finalize("success")


def olmo_lr(step: int) -> float:
    """OLMo's CosineWithWarmup.get_lr(PEAK_LR, step, STEPS) (allenai/OLMo olmo/optim.py, the
    defaults alpha_f 0.1, warmup_min_lr None: warmup from 0.1 lr)."""
    if step < WARMUP:
        return 0.1 * PEAK_LR + (PEAK_LR - 0.1 * PEAK_LR) * step / WARMUP
    eta = 0.1 * PEAK_LR
    return eta + (PEAK_LR - eta) * (1 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP))) / 2


def megatron_lr(iteration: int) -> float:
    """Megatron-LM's OptimizerParamScheduler.get_lr for lr_decay_style cosine
    (megatron/core/optimizer_param_scheduler.py), lr_warmup_init 0, min_lr 0."""
    if iteration <= WARMUP:
        return PEAK_LR * iteration / WARMUP
    ratio = (iteration - WARMUP) / (STEPS - WARMUP)
    return 0.0 + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (PEAK_LR - 0.0)


def _olmo(out: Path) -> None:
    """OLMo's Trainer.fit logging (https://github.com/allenai/OLMo/blob/00305eb080aeef71cabf2c7e098b92474fbcaa75/olmo/train.py):
    ``global_step`` counts from 1; every ``wandb.log_interval`` steps ``wandb.log(metrics,
    step=self.global_step)`` with train_step's ``train/CrossEntropyLoss``, SpeedMonitor.check's
    ``throughput/total_tokens`` (global_train_tokens_seen, every device) and LRMonitor.check's
    ``optim/learning_rate_group{idx}``. scripts/train.py passes ``cfg.asdict(exclude=["wandb"])``
    as the W&B config. OLMo logs to W&B only (no MLflow logger)."""
    import wandb

    dp = 2
    cfg = {
        "run_name": "olmo-wandb", "global_train_batch_size": BATCH * ACCUM * dp,
        "device_train_batch_size": BATCH * ACCUM, "device_train_microbatch_size": BATCH,
        "max_duration": STEPS, "console_log_interval": LOG_EVERY,
        "model": {"d_model": 64, "n_layers": 2, "max_sequence_length": SEQ},
        "optimizer": {"name": "adamw", "learning_rate": PEAK_LR, "weight_decay": 0.1},
        "scheduler": {"name": "cosine_with_warmup", "units": "steps", "t_warmup": WARMUP, "t_max": None,
                      "alpha_f": 0.1, "warmup_min_lr": None},
    }
    wandb.init(project="frameworks", name="olmo-wandb", config=cfg)
    global_step, tokens_seen = 0, 0
    for _ in range(STEPS):
        global_step += 1
        tokens_seen += cfg["global_train_batch_size"] * SEQ
        if global_step % LOG_EVERY == 0:
            # train_step sets the lr from the scheduler at global_step before the step
            metrics = {"train/CrossEntropyLoss": curve(global_step), "train/Perplexity": math.exp(curve(global_step)),
                       "throughput/total_tokens": tokens_seen, "throughput/device/tokens_per_second": 1000.0,
                       "optim/learning_rate_group0": olmo_lr(global_step)}
            wandb.log(metrics, step=global_step)
    wandb.finish()


def _composer(out: Path) -> None:
    """Composer's trainer loop and loggers, as llm-foundry drives them. composer/trainer/trainer.py
    ``_train_loop`` (current releases): at each batch start ``time/batch``, ``time/sample``
    (and ``time/token`` when the data spec counts tokens) for the timestamp before the batch,
    then ``loss/train/total``; the timestamp moves on (``to_next_batch``) and BATCH_END runs
    callbacks/lr_monitor.py's ``lr-{Optimizer}/group{idx}``; after the loop the final time
    values. The older release at
    https://github.com/mosaicml/composer/blob/ef6e69187cd0ec6245e8dc6fc70ff49105c6d45b/composer/trainer/trainer.py
    logs ``trainer/global_step`` and ``trainer/batch_idx`` in the same place, with the same
    order of loss, ``to_next_batch`` and BATCH_END (the frame reads either). Logger.log_metrics
    (loggers/logger.py) steps at ``state.timestamp.batch.value``; WandBLogger.log_metrics
    (https://github.com/mosaicml/composer/blob/a9893f4fae2de223baafaabae11a57ed6505f7a8/composer/loggers/wandb_logger.py)
    calls ``wandb.log(metrics, step)``; MLFlowLogger
    (https://github.com/mosaicml/composer/blob/000b1d24d579ce3838bae2ed53dc01f9447d1bc7/composer/loggers/mlflow_logger.py)
    ``mlflow.log_metrics(metrics=..., step=step)`` and ``log_params`` for the hyperparameters.
    The config is llm-foundry's train.py yaml (scripts/train/yamls/pretrain/mpt-125m.yaml)."""
    import mlflow
    import wandb

    dp = 2
    hparams = {
        "max_seq_len": SEQ, "global_train_batch_size": BATCH * ACCUM * dp, "device_train_microbatch_size": BATCH,
        "max_duration": f"{STEPS}ba", "eval_interval": "100ba", "seed": 17,
        "optimizer": {"name": "decoupled_adamw", "lr": PEAK_LR}, "scheduler": {"name": "cosine_with_warmup",
                                                                            "t_warmup": f"{WARMUP}ba", "alpha_f": 0.0},
    }
    # llm-foundry's train.py: logger.log_hyperparameters(logged_cfg), the yaml as it is.
    wandb.init(project="frameworks", name="composer-wandb")
    wandb.config.update(hparams)
    # Its own store, so the shared mlflow.db stays as the other trainers wrote it.
    (out / "composer").mkdir(exist_ok=True)
    mlflow.set_tracking_uri(f"sqlite:///{out / 'composer' / 'mlflow.db'}")
    mlflow.set_experiment("frameworks")
    mlflow.start_run(run_name="composer-mlflow", tags={"composer_run_name": "composer-mlflow"}, log_system_metrics=False)
    mlflow.log_params(hparams)

    def log_metrics(metrics: dict[str, float], step: int) -> None:
        wandb.log(dict(metrics), step)
        mlflow.log_metrics(metrics={k: float(v) for k, v in metrics.items()}, step=step, synchronous=True)

    samples_per_batch = hparams["global_train_batch_size"]
    batch = 0
    for _ in range(STEPS):
        log_metrics({"time/batch": batch, "time/sample": batch * samples_per_batch, "time/batch_in_epoch": batch,
                     "time/sample_in_epoch": batch * samples_per_batch}, batch)
        log_metrics({"time/token": batch * samples_per_batch * SEQ}, batch)
        log_metrics({"loss/train/total": curve(batch + 1)}, batch)
        batch += 1  # timestamp.to_next_batch; the scheduler has stepped
        log_metrics({"lr-DecoupledAdamW/group0": cosine_lr(batch)}, batch)
    log_metrics({"time/epoch": 1, "time/batch": batch, "time/sample": batch * samples_per_batch}, batch)
    log_metrics({"time/token": batch * samples_per_batch * SEQ}, batch)
    mlflow.end_run()
    wandb.finish()


def _megatron(out: Path) -> None:
    """Megatron-LM's training_log (https://github.com/NVIDIA/Megatron-LM/blob/86df799dc4c78e4bd7fbae972b3ee743e8b14f02/megatron/training/training.py):
    the W&B writer is the ``wandb`` module, initialised with ``config=vars(args)``; every
    ``tensorboard_log_interval`` iterations (and only with a TensorBoard writer) one
    ``wandb_writer.log({key: value}, iteration)`` per key: ``samples vs steps``
    (consumed_train_samples), ``learning-rate``, ``batch-size`` and each loss_dict key
    (``lm loss``). ``iteration`` is incremented before training_log: the optimizer steps
    done. Megatron-LM logs to W&B and TensorBoard only (no MLflow)."""
    import wandb

    dp = 2
    args = {
        "train_iters": STEPS, "global_batch_size": BATCH * ACCUM * dp, "micro_batch_size": BATCH,
        "data_parallel_size": dp, "seq_length": SEQ, "lr": PEAK_LR, "min_lr": 0.0, "lr_decay_style": "cosine",
        "lr_warmup_iters": WARMUP, "lr_decay_iters": None, "lr_warmup_fraction": None, "lr_warmup_init": 0.0,
        "log_interval": LOG_EVERY, "tensorboard_log_interval": LOG_EVERY, "wandb_project": "frameworks",
        "wandb_exp_name": "megatron-wandb",
    }
    wandb.init(project="frameworks", name="megatron-wandb", config=args)
    wandb_writer = wandb
    iteration, consumed_train_samples = 0, 0
    while iteration < args["train_iters"]:
        iteration += 1
        batch_size = dp * BATCH * ACCUM
        consumed_train_samples += batch_size
        if iteration % args["tensorboard_log_interval"] == 0:
            wandb_writer.log({"samples vs steps": consumed_train_samples}, iteration)
            wandb_writer.log({"learning-rate": megatron_lr(iteration)}, iteration)
            wandb_writer.log({"batch-size": batch_size}, iteration)
            wandb_writer.log({"lm loss": curve(iteration)}, iteration)
    wandb.finish()


_SETUPS = {
    "hf-mlflow": lambda out: _hf(out, "mlflow"),
    "hf-wandb": lambda out: _hf(out, "wandb"),
    "hf-resumed": _hf_resumed,
    "lightning": _lightning,
    "nanogpt": _nanogpt,
    "nanogpt-eval": lambda out: _nanogpt(out, "nanogpt-eval", **NANOGPT_EVAL),
    "torchtitan": _torchtitan,
    "litgpt": _litgpt,
    "olmo": _olmo,
    "composer": _composer,
    "megatron": _megatron,
}


def _keep_wandb(out: Path) -> None:
    """Each offline run's ``.wandb`` file, in ``wandb/<run name>/offline-run-*/``."""
    for wandb_file in sorted((out / "_wandb").rglob("run-*.wandb")):
        run_dir = wandb_file.parent
        name = _run_name(wandb_file)
        target = out / "wandb" / name / run_dir.name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(wandb_file, target / wandb_file.name)


def _run_name(wandb_file: Path) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    return read_offline_run(wandb_file, (), ref=str(wandb_file)).name


def _gzip(db: Path) -> None:
    """Composer logs every batch: its store is kept gzipped (1.6 MB as sqlite, 0.1 MB so)."""
    with db.open("rb") as raw, gzip.GzipFile(db.with_suffix(".db.gz"), "wb", compresslevel=9, mtime=0) as packed:
        shutil.copyfileobj(raw, packed)
    db.unlink()


def main(out: Path, only: list[str] | None = None) -> None:
    """Write every run into ``out``, or with ``only`` just those runs' W&B files (and
    Composer's own MLflow store), leaving every other fixture as it is."""
    names = only or list(_SETUPS)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for folder in ("hf", "lightning"):
            (work / folder).mkdir()
        for name in names:
            print(f"writing {name}", flush=True)
            subprocess.run([sys.executable, __file__, "--one", name, str(work)], env=_env(work), check=True)
        _keep_wandb(work)
        for db in work.rglob("mlflow.db"):
            with sqlite3.connect(db) as connection:
                connection.execute("VACUUM")
        if (work / "composer" / "mlflow.db").exists():
            _gzip(work / "composer" / "mlflow.db")
        out.mkdir(parents=True, exist_ok=True)
        if only:
            items = [f"wandb/{path.name}" for path in (work / "wandb").iterdir()]
            items += ["composer"] if "composer" in only else []
        else:
            items = ["hf", "lightning", "wandb", "mlflow.db", "composer"]
        for item in items:
            target = out / item
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            src = work / item
            (shutil.copytree if src.is_dir() else shutil.copy)(src, target)
    if only:
        return
    (out / "CONFIG.json").write_text(json.dumps({
        "steps": STEPS, "log_every": LOG_EVERY, "batch": BATCH, "accum": ACCUM, "seq": SEQ, "warmup": WARMUP,
        "peak_lr": PEAK_LR, "litgpt": LITGPT, "curve": "2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6",
    }, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        _SETUPS[sys.argv[2]](Path(sys.argv[3]))
    elif sys.argv[1] == "--attempt":
        _hf_attempt(Path(sys.argv[3]), int(sys.argv[2]))
    elif sys.argv[1] == "--only":
        main(Path(sys.argv[3]), sys.argv[2].split(","))
    else:
        main(Path(sys.argv[1]))
