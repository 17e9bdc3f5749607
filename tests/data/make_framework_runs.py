"""Write small training runs through the real trainers' own tracker integrations (developer only).

Not run by CI: CI reads the fixtures this writes into ``tests/data/frameworks/``. Each run
trains a one-parameter module whose loss is a known function of the optimizer step
(:func:`curve`), so every crossing has an answer computed without the plugin (see
``tests/test_frameworks.py``). Make the throwaway venv and run it from the worktree::

    python -m venv /tmp/fw-venv && /tmp/fw-venv/bin/pip install torch==2.13.0 transformers \
        lightning mlflow wandb accelerate datasets trl 'jsonargparse[signatures]' omegaconf
    /tmp/fw-venv/bin/pip install --no-deps ai2-olmo-core torchtune==0.6.1 dataclass-extensions
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

- ``megatron-tb``: Megatron-LM's TensorBoard scalars (each key at the iteration and its
  ``... vs samples`` twin at the sample count) through torch's ``SummaryWriter`` into a W&B
  offline run with ``sync_tensorboard=True`` (``pip install tensorboard`` in the venv).

- ``trl``: TRL's ``SFTTrainer`` (real, on CPU: a tiny GPT-2 from a config, 19-token samples,
  ``max_length`` 64) with ``report_to=["wandb", "mlflow"]``.
- ``accelerate``: a loop on Accelerate's tracking API (``log_with=["wandb", "mlflow"]``,
  ``init_trackers``, ``accelerator.log``), run_clm_no_trainer.py's style, ``tokens_seen`` logged.
- ``torchtune``: torchtune's own ``WandBLogger`` and ``MLFlowLogger`` driven with the dicts
  recipes/full_finetune_distributed.py logs, for 2 ranks (its recipes need GPUs and weights).
- ``olmo-core``: OLMo-core's own ``WandBCallback`` driven with the metrics its trainer
  collects (its trainer needs GPUs).
- ``lightning-cli``: ``LightningCLI`` with ``--trainer.accumulate_grad_batches 4`` and
  CSVLogger, WandbLogger, MLFlowLogger; ``metrics.csv``, ``hparams.yaml`` and the CLI's
  ``config.yaml`` in ``lightning-cli/``.

Composer and each of the new setups with an MLflow logger write their MLflow run into a
store of their own, ``<setup>/mlflow.db.gz``, gzipped. The W&B runs are offline
(``WANDB_MODE=offline`` in this script's own environment); only their ``.wandb`` files are
kept. MLflow runs go to one sqlite store, ``mlflow.db``.
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



def _megatron_tb(out: Path) -> None:
    """Megatron-LM's TensorBoard scalars synced into W&B. training_log
    (https://github.com/NVIDIA/Megatron-LM/blob/86df799dc4c78e4bd7fbae972b3ee743e8b14f02/megatron/training/training.py)
    writes, every ``tensorboard_log_interval`` iterations, with ``writer.add_scalar``:
    ``samples vs steps`` (consumed_train_samples) at ``iteration``; ``learning-rate`` and
    ``batch-size`` at ``iteration`` and again as ``learning-rate vs samples`` and
    ``batch-size vs samples`` at ``args.consumed_train_samples``; each loss_dict key
    (``lm loss``) at ``iteration`` and ``lm loss vs samples`` at the sample count. The
    writer is torch's ``SummaryWriter`` (megatron/training/global_vars.py
    ``_set_tensorboard_writer``); the W&B run is the user's own ``wandb.init(
    sync_tensorboard=True)`` with no config (Megatron's args reach W&B only through its own
    wandb writer, not used here), so the sequence length is in no run."""
    import wandb
    from torch.utils.tensorboard import SummaryWriter

    dp = 2
    wandb.init(project="frameworks", name="megatron-tb", sync_tensorboard=True)
    writer = SummaryWriter(log_dir=str(out / "_tb" / "megatron-tb"), max_queue=1000)
    iteration, consumed_train_samples = 0, 0
    batch_size = dp * BATCH * ACCUM
    while iteration < STEPS:
        iteration += 1
        consumed_train_samples += batch_size
        if iteration % LOG_EVERY == 0:
            learning_rate, loss = megatron_lr(iteration), curve(iteration)
            writer.add_scalar("samples vs steps", consumed_train_samples, iteration)
            writer.add_scalar("learning-rate", learning_rate, iteration)
            writer.add_scalar("learning-rate vs samples", learning_rate, consumed_train_samples)
            writer.add_scalar("batch-size", batch_size, iteration)
            writer.add_scalar("batch-size vs samples", batch_size, consumed_train_samples)
            writer.add_scalar("lm loss", loss, iteration)
            writer.add_scalar("lm loss vs samples", loss, consumed_train_samples)
    writer.close()
    wandb.finish()

# --- trainers beyond the first eight (issue 30) ------------------------------------------------
# Each of these writes its MLflow run (where the trainer has an MLflow logger) into its own
# store, ``<name>/mlflow.db.gz``, as Composer's, so the shared mlflow.db stays as it is.
TRL_LEN = 19  # tokens in every TRL sample: 3.4x fewer than its max_length cap of 64
TORCHTUNE_DP = 2  # torchtune's data-parallel ranks: torchrun's, recorded in no config


def _own_store(out: Path, name: str) -> str:
    (out / name).mkdir(exist_ok=True)
    return f"sqlite:///{out / name / 'mlflow.db'}"


def _trl(out: Path) -> None:
    """TRL's ``SFTTrainer`` (trl/trainer/sft_trainer.py): its ``compute_loss`` adds the
    attention mask's sum, gathered over processes, to ``_total_train_tokens`` and logs it as
    ``num_tokens`` (W&B ``train/num_tokens``); ``SFTConfig.max_length`` (64) only truncates.
    A tiny GPT-2 built from a config, a word-level tokenizer made here, a pre-tokenized
    dataset of 19-token samples; the loss is ``curve(step)`` through the Trainer's
    ``compute_loss_func`` hook."""
    import datasets
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    os.environ["MLFLOW_TRACKING_URI"] = _own_store(out, "trl")
    vocab = {"[PAD]": 0, "[EOS]": 1, **{f"w{i}": i + 2 for i in range(30)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[PAD]")),
                                        pad_token="[PAD]", eos_token="[EOS]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=SEQ, n_embd=8, n_layer=1, n_head=1))
    state = {"step": 1}

    def curve_loss(outputs, labels, num_items_in_batch=None):  # type: ignore[no-untyped-def]
        # Trainer's compute_loss_func hook, which SFTTrainer calls in place of its own loss; with
        # it the Trainer sums the micro-batches' losses (the hook is to normalise), so each is
        # curve / ACCUM and the logged loss is curve(step).
        return torch.tensor(curve(state["step"]) / ACCUM) + 0.0 * outputs.logits.sum()

    class StepOf(TrainerCallback):
        def on_step_begin(self, args, trainer_state, control, **kwargs):  # type: ignore[no-untyped-def]
            state["step"] = trainer_state.global_step + 1

    ids = [[2 + (i + j) % 30 for j in range(TRL_LEN)] for i in range(STEPS * BATCH * ACCUM)]
    data = datasets.Dataset.from_dict({"input_ids": ids})
    args = SFTConfig(
        output_dir=str(out / "_trl"), run_name="trl-sft", max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUM, learning_rate=PEAK_LR, lr_scheduler_type="cosine", warmup_steps=WARMUP,
        logging_steps=LOG_EVERY, save_strategy="no", report_to=["wandb", "mlflow"], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, max_length=SEQ, packing=False,
    )
    SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer, callbacks=[StepOf()],
               compute_loss_func=curve_loss).train()


def _accelerate(out: Path) -> None:
    """Accelerate's tracking API as transformers' examples/pytorch/language-modeling/
    run_clm_no_trainer.py uses it: ``Accelerator(log_with=...)``, ``init_trackers(name,
    experiment_config)`` with the script's args (per_device_train_batch_size,
    gradient_accumulation_steps, block_size, ...), ``accelerator.accumulate`` and
    ``accelerator.log(values, step=completed_steps)``; the loop counts ``tokens_seen``
    (every process's tokens, gathered), as the issue's run does."""
    import torch
    from accelerate import Accelerator

    os.environ["MLFLOW_TRACKING_URI"] = _own_store(out, "accelerate")
    accelerator = Accelerator(gradient_accumulation_steps=ACCUM, log_with=["wandb", "mlflow"], cpu=True)
    config = {
        "per_device_train_batch_size": BATCH, "gradient_accumulation_steps": ACCUM, "block_size": SEQ,
        "learning_rate": PEAK_LR, "lr_scheduler_type": "cosine", "num_warmup_steps": WARMUP, "max_train_steps": STEPS,
        "with_tracking": True, "report_to": "all",
    }
    accelerator.init_trackers("frameworks", config, init_kwargs={"wandb": {"name": "accelerate-wandb"},
                                                                 "mlflow": {"run_name": "accelerate-mlflow"}})
    w = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([w], lr=PEAK_LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_lr(s) / PEAK_LR)
    data = torch.utils.data.DataLoader(torch.zeros(STEPS * ACCUM * BATCH, SEQ, dtype=torch.long), batch_size=BATCH)
    optimizer, data, scheduler = accelerator.prepare(optimizer, data, scheduler)
    completed_steps, tokens_seen = 0, 0
    for batch in data:
        with accelerator.accumulate(w):
            loss = torch.tensor(curve(completed_steps + 1)) + 0.0 * w.sum()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            tokens_seen += int(accelerator.gather(torch.tensor(batch.numel())).sum())
        if accelerator.sync_gradients:
            completed_steps += 1
            if completed_steps % LOG_EVERY == 0:
                accelerator.log({"train_loss": loss.item(), "tokens_seen": tokens_seen,
                                 "lr": scheduler.get_last_lr()[0], "step": completed_steps}, step=completed_steps)
    accelerator.end_training()


def _torchtune_loggers() -> tuple[type, type]:
    """torchtune's own WandBLogger and MLFlowLogger (torchtune/training/metric_logging.py,
    torchtune 0.6.1). torchtune's package __init__ refuses to import without a torchao that
    runs on this torch, so the module is loaded on its own; it needs torchtune.utils only."""
    import importlib.util
    import types

    import torch

    root = Path(torch.__file__).parents[1] / "torchtune"
    package = types.ModuleType("torchtune")
    package.__path__ = [str(root)]
    sys.modules.setdefault("torchtune", package)
    spec = importlib.util.spec_from_file_location("torchtune.training.metric_logging", root / "training" / "metric_logging.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WandBLogger, module.MLFlowLogger


def _torchtune(out: Path) -> None:
    """torchtune's recipes/full_finetune_distributed.py train() on 2 ranks: every
    ``log_every_n_steps`` optimizer steps ``self._metric_logger.log_dict({"loss", "lr",
    "tokens_per_second_per_gpu"}, step=self.global_step)``; ``log_config(cfg)`` at setup.
    WandBLogger logs ``{**payload, "global_step": step}`` (no W&B step: ``_step`` counts log
    calls); MLFlowLogger ``mlflow.log_metrics(payload, step=step)`` and the config flattened
    with dots. ``dataset.packed``: PackedDataset pads every pack to tokenizer.max_seq_len."""
    from omegaconf import OmegaConf

    wandb_logger, mlflow_logger = _torchtune_loggers()
    cfg = OmegaConf.create({
        "output_dir": str(out / "_torchtune"), "batch_size": BATCH, "gradient_accumulation_steps": ACCUM,
        "epochs": 1, "max_steps_per_epoch": STEPS, "log_every_n_steps": LOG_EVERY, "seed": 17,
        "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": SEQ},
        "dataset": {"_component_": "torchtune.datasets.alpaca_dataset", "packed": True},
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": PEAK_LR},
        "lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                         "num_warmup_steps": WARMUP},
    })
    (out / "_torchtune").mkdir(exist_ok=True)
    # MLFlowLogger takes tracking_uri only when MLFLOW_TRACKING_URI is unset: the store is set there.
    os.environ["MLFLOW_TRACKING_URI"] = _own_store(out, "torchtune")
    loggers = [wandb_logger(project="frameworks", name="torchtune-wandb", dir=str(out / "_wandb")),
               mlflow_logger(experiment_name="frameworks", run_name="torchtune-mlflow")]
    for logger in loggers:
        logger.log_config(cfg)
    num_tokens = BATCH * ACCUM * TORCHTUNE_DP * SEQ  # all_reduced over ranks; packs are full
    for global_step in range(1, STEPS + 1):
        if global_step % LOG_EVERY == 0:
            log_dict = {"loss": curve(global_step), "lr": cosine_lr(global_step),
                        "tokens_per_second_per_gpu": num_tokens / (0.5 * TORCHTUNE_DP), "grad_norm": 1.0}
            for logger in loggers:
                logger.log_dict(log_dict, step=global_step)
    for logger in loggers:
        logger.close()


def _olmo_core(out: Path) -> None:
    """OLMo-core's WandBCallback (olmo_core/train/callbacks/wandb.py, ai2-olmo-core 3.0.0):
    ``pre_train`` calls ``wandb.init(config=self.config)`` (the experiment's config dict), and
    the trainer hands each collected step's metrics to ``log_metrics(step, metrics)``, which
    calls ``wandb.log(metrics, step=step)`` at ``trainer.global_step`` (from 1). The names are
    olmo_core/train/common.py's TRAIN_CE_LOSS_METRIC ``train/CE loss``, SpeedMonitor's
    ``throughput/total tokens`` (global_train_tokens_seen, every rank) and the train module's
    ``optim/LR (group 0)``. OLMo-core logs to W&B and Comet only (no MLflow). The trainer
    itself needs a model and data on GPUs: the callback is driven with a stand-in trainer
    holding only its work_dir."""
    import importlib
    import types

    import olmo_core

    # olmo_core.train's package __init__ imports the trainer, which needs transformer-engine
    # (CUDA): the callback's own module is imported beneath stand-in packages.
    root = Path(olmo_core.__file__).parent
    for name, path in (("olmo_core.train", root / "train"), ("olmo_core.train.callbacks", root / "train" / "callbacks")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    WandBCallback = importlib.import_module("olmo_core.train.callbacks.wandb").WandBCallback

    dp = 2
    tokens_per_step = BATCH * ACCUM * dp * SEQ
    config = {
        "run_name": "olmo-core-wandb",
        "dataset": {"sequence_length": SEQ, "tokenizer": {"vocab_size": 100278}},
        "data_loader": {"global_batch_size": tokens_per_step, "seed": 34521},  # tokens (NumpyDataLoaderConfig)
        "train_module": {"rank_microbatch_size": BATCH * SEQ, "optim": {"lr": PEAK_LR, "weight_decay": 0.1},
                         "scheduler": {"warmup_steps": WARMUP}},
        "trainer": {"max_duration": {"value": STEPS, "unit": "steps"}, "metrics_collect_interval": LOG_EVERY},
    }
    callback = WandBCallback(name="olmo-core-wandb", project="frameworks", config=config)
    callback._trainer = types.SimpleNamespace(work_dir=out / "_wandb")  # W&B writes into work_dir/wandb
    callback.pre_train()
    for step in range(1, STEPS + 1):
        if step % LOG_EVERY == 0:
            callback.log_metrics(step, {"train/CE loss": curve(step), "train/PPL": math.exp(curve(step)),
                                        "throughput/total tokens": step * tokens_per_step,
                                        "throughput/device/TPS": 1000.0, "optim/LR (group 0)": cosine_lr(step)})
    callback.wandb.finish()  # finalize() passes quiet=, which wandb 0.31's finish() no longer takes


def _lightning_cli(out: Path) -> None:
    """LightningCLI with ``--trainer.accumulate_grad_batches 4`` (a Trainer argument: not in the
    module's hparams) and CSVLogger, WandbLogger and MLFlowLogger; SaveConfigCallback writes
    the whole parsed config to ``config.yaml`` in the first logger's log_dir, beside
    CSVLogger's ``metrics.csv`` and ``hparams.yaml`` (kept in ``lightning-cli/``). The W&B
    and MLflow runs hold the hparams only."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
    from torch import nn

    accum = 4

    class Module(L.LightningModule):
        def __init__(self, batch_size: int = BATCH, block_size: int = SEQ) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.w = nn.Parameter(torch.zeros(1))

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = torch.tensor(curve(self.global_step + 1)) + 0.0 * self.w.sum()
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def train_dataloader(self) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
            data = torch.zeros(STEPS * accum * BATCH, SEQ, dtype=torch.long)
            return torch.utils.data.DataLoader(data, batch_size=self.hparams["batch_size"])

        def configure_optimizers(self) -> dict[str, object]:
            opt = torch.optim.AdamW(self.parameters(), lr=PEAK_LR)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s) / PEAK_LR)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    loggers = [
        CSVLogger(str(out / "_csv"), name="lightning-cli"),
        WandbLogger(project="frameworks", name="lightning-cli-wandb", save_dir=str(out / "_wandb"), offline=True),
        MLFlowLogger(experiment_name="frameworks", run_name="lightning-cli-mlflow",
                     tracking_uri=_own_store(out, "lightning-cli")),
    ]
    LightningCLI(
        Module, trainer_defaults={"logger": loggers, "callbacks": [LearningRateMonitor(logging_interval="step")],
                                  "accelerator": "cpu", "enable_checkpointing": False, "enable_progress_bar": False,
                                  "enable_model_summary": False},
        args=["fit", "--trainer.max_steps", str(STEPS), "--trainer.accumulate_grad_batches", str(accum),
              "--trainer.log_every_n_steps", str(LOG_EVERY)],
        save_config_kwargs={"overwrite": True},
    )
    (metrics,) = (out / "_csv").rglob("metrics.csv")
    (out / "lightning-cli").mkdir(exist_ok=True)
    for name in ("metrics.csv", "hparams.yaml", "config.yaml"):
        shutil.copy(metrics.with_name(name), out / "lightning-cli" / name)


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
    "megatron-tb": _megatron_tb,
    "trl": _trl,
    "accelerate": _accelerate,
    "torchtune": _torchtune,
    "olmo-core": _olmo_core,
    "lightning-cli": _lightning_cli,
}
# Setups whose MLflow run (or trainer files) go to a folder of their own, kept as it is
# written (its mlflow.db gzipped).
_OWN_FOLDERS = {"composer": "composer", "trl": "trl", "accelerate": "accelerate", "torchtune": "torchtune",
                "lightning-cli": "lightning-cli"}


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
    """An MLflow store of its own, kept gzipped (Composer logs every batch: 1.6 MB as sqlite,
    0.1 MB so)."""
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
        for folder in set(_OWN_FOLDERS.values()):
            if (work / folder / "mlflow.db").exists():
                _gzip(work / folder / "mlflow.db")
        out.mkdir(parents=True, exist_ok=True)
        if only:
            items = [f"wandb/{path.name}" for path in (work / "wandb").iterdir()]
            items += sorted({_OWN_FOLDERS[name] for name in only if name in _OWN_FOLDERS})
        else:
            items = ["hf", "lightning", "wandb", "mlflow.db", *sorted(set(_OWN_FOLDERS.values()))]
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
