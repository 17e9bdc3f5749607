"""Read runs the real trainers write in configurations unlike the fixtures, with no flags (developer only).

Not run by CI, and nothing it writes is kept: the runs go to a temporary directory. Each
run trains a module whose training loss is a known function of the optimizer step
(:func:`curve`), so the step axis, the tokens and the crossing all have answers computed
here without the plugin. Then ``tracker-plugin analyze SOURCE --target X --json`` reads
each run with no reading flags (only where the run is: ``--tracking-uri``), and a table
says, per trainer x tracker x config, whether the step, tokens, loss and lr keys and the
batch (one stage) are right, how far the crossing is from the independent one, and where
the lr plan the forecast used came from (``lr_plan.source``: ``params``, ``steps-only``,
``inferred``) beside the one each run's config honestly gives (:func:`_plan_source`).

Make the throwaway venv (or reuse one) and run it from the worktree::

    python -m venv /tmp/fw-venv && /tmp/fw-venv/bin/pip install torch==2.13.0 transformers \
        lightning mlflow wandb accelerate datasets
    /tmp/fw-venv/bin/python tests/data/measure_outside_runs.py [--plugin-python PATH]

``--plugin-python`` is the interpreter with the plugin's dependencies (default
``/work/main/.venv/bin/python``); the plugin imported is this worktree's.

What writes what (the truth of each run in ``truth.json`` beside it):

- ``hf-epochs``: ``transformers`` ``Trainer``, 3 epochs (``num_train_epochs``, no
  ``max_steps``) of a dataset whose last accumulation of each epoch is partial,
  ``gradient_accumulation_steps=4``, ``logging_steps=7``, ``warmup_steps=0.1`` (the ratio),
  cosine, ``eval_strategy="steps"``; to MLflow and W&B (offline) at once, and
  ``trainer_state.json``. No token count is logged and no sequence length is in the
  config: the honest answer is the step axis.
- ``hf-tokens``: the same with ``include_num_input_tokens_seen=True``, accumulation 3,
  ``logging_steps=5``, linear decay, ``max_steps``: tokens are logged.
- ``lightning``: ``lightning`` ``Trainer`` with ``accumulate_grad_batches=2`` (a Trainer
  argument, so not in the hparams), ``val_check_interval=0.5``, two param groups and
  ``LearningRateMonitor``, ``log_every_n_steps=3``, ``max_epochs=3``; ``MLFlowLogger``,
  ``WandbLogger`` (offline) and ``CSVLogger``. The hparams name ``batch_size`` and
  ``block_size`` but not the accumulation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEQ = 32


def curve(step: float) -> float:
    """The training loss at the 1-based optimizer step ``step``."""
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def _env(work: Path, name: str = "") -> dict[str, str]:
    """The writer's environment; each setup's W&B runs in a folder of its own, ``_wandb/NAME``."""
    env = dict(os.environ)
    (work / "_wandb" / name).mkdir(parents=True, exist_ok=True)
    env.update(
        WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_CODE="true", WANDB_DIR=str(work / "_wandb" / name),
        MLFLOW_TRACKING_URI=f"sqlite:///{work / 'mlflow.db'}", HF_MLFLOW_LOG_ARTIFACTS="0",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


# -- writing ---------------------------------------------------------------------------------


def _hf(work: Path, name: str) -> None:
    import torch
    from torch import nn
    from transformers import Trainer, TrainerCallback, TrainingArguments

    tokens = name == "hf-tokens"
    batch, accum, logging_steps = (4, 3, 5) if tokens else (4, 4, 7)
    # Micro-batches per epoch not a multiple of the accumulation: the last step of each
    # epoch accumulates fewer (2), as HF does.
    micro = accum * 40 + 2
    samples = micro * batch

    class Curve(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))
            self.step = 1

        def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
            value = curve(self.step) + (0.0 if self.training else 0.1)
            return {"loss": torch.tensor(value) + 0.0 * self.w.sum() + 0.0 * input_ids.float().mean()}

    class StepOf(TrainerCallback):
        """The model's loss follows the optimizer step the trainer is on (1-based)."""

        def __init__(self, model: Curve) -> None:
            self.model = model

        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            self.model.step = state.global_step + 1

    class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self, n: int) -> None:
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.zeros(SEQ, dtype=torch.long)
            return {"input_ids": ids, "labels": ids}

    extra = {"max_steps": 100, "lr_scheduler_type": "linear", "warmup_steps": 10} if tokens else {
        "num_train_epochs": 3, "lr_scheduler_type": "cosine", "warmup_steps": 0.1,
    }
    args = TrainingArguments(
        output_dir=str(work / "_hf" / name), run_name=name, per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum, learning_rate=1e-3, logging_steps=logging_steps,
        eval_strategy="steps", eval_steps=20, per_device_eval_batch_size=4, save_strategy="no",
        report_to=["mlflow", "wandb"], include_num_input_tokens_seen=tokens, use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, **extra,
    )
    model = Curve()
    trainer = Trainer(model=model, args=args, train_dataset=Data(samples), eval_dataset=Data(8), callbacks=[StepOf(model)])
    trainer.train()
    trainer.save_state()  # trainer_state.json in output_dir, as a checkpoint holds it
    state = json.loads((work / "_hf" / name / "trainer_state.json").read_text())
    per_epoch = math.ceil(micro / accum)
    steps = state["global_step"]
    # Sequences in each optimizer step: accum micro-batches, the epoch's last step 2.
    seqs = [batch * (micro - accum * (per_epoch - 1) if (s % per_epoch == 0) else accum) for s in range(1, steps + 1)]
    logged = [row["step"] for row in state["log_history"] if "loss" in row]
    _truth(work, name, {
        "trainer": "Hugging Face Trainer", "base": 1, "total_steps": steps, "logged_steps": logged,
        "mean_over": logging_steps, "tokens_per_step": [s * SEQ for s in seqs], "tokens_logged": tokens,
        "loss": {"mlflow": "loss", "wandb": "train/loss", "trainer_state": "loss"},
        "lr": {"mlflow": "learning_rate", "wandb": "train/learning_rate", "trainer_state": "learning_rate"},
        "config": f"accum {accum}, log every {logging_steps}, " + ("max_steps, tokens logged" if tokens else
                                                                  "3 epochs, warmup ratio, eval"),
        "sources": {"mlflow": f"run:{name}", "wandb": f"wandb:{name}",
                    "trainer_state": str(work / "_hf" / name / "trainer_state.json")},
    })


def _lightning(work: Path, name: str) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
    from torch import nn

    batch, accum, log_every, epochs, batches = 8, 2, 3, 3, 101  # 51 optimizer steps an epoch

    class Module(L.LightningModule):
        def __init__(self, batch_size: int, block_size: int, lr: float) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.body = nn.Parameter(torch.zeros(1))
            self.head = nn.Parameter(torch.zeros(1))

        def training_step(self, x: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = torch.tensor(curve(self.global_step + 1)) + 0.0 * (self.body + self.head).sum()
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, x: torch.Tensor, batch_idx: int) -> None:
            self.log("val_loss", torch.tensor(curve(self.global_step + 1) + 0.1))

        def configure_optimizers(self) -> dict[str, object]:
            opt = torch.optim.AdamW([{"params": [self.body], "lr": 1e-3}, {"params": [self.head], "lr": 3e-3}])
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[1e-3, 3e-3], total_steps=epochs * 51)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    train = torch.utils.data.DataLoader(torch.zeros(batches * batch, SEQ, dtype=torch.long), batch_size=batch)
    val = torch.utils.data.DataLoader(torch.zeros(2 * batch, SEQ, dtype=torch.long), batch_size=batch)
    csv = CSVLogger(str(work / "_csv"), name=name)
    wandb_logger = WandbLogger(project="outside", name=name, save_dir=os.environ["WANDB_DIR"], offline=True)
    mlflow_logger = MLFlowLogger(experiment_name="outside", run_name=name, tracking_uri=_env(work)["MLFLOW_TRACKING_URI"])
    trainer = L.Trainer(
        max_epochs=epochs, accumulate_grad_batches=accum, log_every_n_steps=log_every, val_check_interval=0.5,
        logger=[mlflow_logger, wandb_logger, csv], callbacks=[LearningRateMonitor(logging_interval="step")],
        accelerator="cpu", enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(Module(batch, SEQ, 1e-3), train, val)
    import pandas as pd

    (metrics,) = (work / "_csv" / name).rglob("metrics.csv")
    logged = pd.read_csv(metrics).dropna(subset=["train_loss_step"])["step"].astype(int).tolist()
    per_epoch = math.ceil(batches / accum)
    steps = trainer.global_step
    seqs = [batch * (batches - accum * (per_epoch - 1) if (s + 1) % per_epoch == 0 else accum) for s in range(steps)]
    _truth(work, name, {
        "trainer": "PyTorch Lightning", "base": 0, "total_steps": steps, "logged_steps": logged, "mean_over": 1,
        "tokens_per_step": [s * SEQ for s in seqs], "tokens_logged": False,
        "loss": dict.fromkeys(("mlflow", "wandb", "csv"), "train_loss_step"),
        "lr": dict.fromkeys(("mlflow", "wandb", "csv"), "lr-AdamW/pg1"),
        "config": f"accum {accum} (Trainer arg), log every {log_every}, 3 epochs, 2 param groups, val",
        "sources": {"mlflow": f"run:{name}", "wandb": f"wandb:{name}", "csv": str(metrics)},
    })


# -- trainers beyond the first eight (issue 30) -----------------------------------------------


def _fixtures_module():  # type: ignore[no-untyped-def]
    """make_framework_runs.py: its loaders of torchtune's metric loggers and OLMo-core's callback."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_framework_runs", Path(__file__).with_name("make_framework_runs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _own_store(work: Path, name: str) -> str:
    """An MLflow store of the setup's own (the trainers that set the URI themselves)."""
    (work / name).mkdir(exist_ok=True)
    return f"sqlite:///{work / name / 'mlflow.db'}"


def _trl(work: Path, name: str) -> None:
    """TRL's SFTTrainer on samples of 7 to 30 tokens, ``max_length`` 24 (it truncates the
    longer ones), accumulation 3, ``logging_steps`` 7, cosine with a warmup ratio, to MLflow
    and W&B at once; ``packing`` on (``bfd``: whole samples packed into rows of 24, padding
    free) or off. The tokens each optimizer step took are counted in the collator TRL built
    (the attention mask's sum, or with packing the row length), not from TRL's log."""
    import datasets
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    packing = name == "trl-pack"
    batch, accum, logging_steps, max_length, steps = 3, 3, 7, 24, 90
    os.environ["MLFLOW_TRACKING_URI"] = _own_store(work, name)
    vocab = {"[PAD]": 0, "[EOS]": 1, **{f"w{i}": i + 2 for i in range(30)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[PAD]")),
                                        pad_token="[PAD]", eos_token="[EOS]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=8, n_layer=1, n_head=1))
    state = {"step": 1}
    micro: list[int] = []

    def curve_loss(outputs, labels, num_items_in_batch=None):  # type: ignore[no-untyped-def]
        return torch.tensor(curve(state["step"]) / accum) + 0.0 * outputs.logits.sum()

    class StepOf(TrainerCallback):
        def on_step_begin(self, args, trainer_state, control, **kwargs):  # type: ignore[no-untyped-def]
            state["step"] = trainer_state.global_step + 1

    lengths = [7 + (i * 11) % 24 for i in range(steps * batch * accum * 3)]
    ids = [[2 + (i + j) % 30 for j in range(n)] for i, n in enumerate(lengths)]
    args = SFTConfig(
        output_dir=str(work / "_trl" / name), run_name=name, max_steps=steps, per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum, learning_rate=1e-3, lr_scheduler_type="cosine", warmup_steps=0.1,
        logging_steps=logging_steps, save_strategy="no", report_to=["wandb", "mlflow"], use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, max_length=max_length, packing=packing,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_dict({"input_ids": ids}),
                         processing_class=tokenizer, callbacks=[StepOf()], compute_loss_func=curve_loss)
    collate = trainer.data_collator

    def counting(examples):  # type: ignore[no-untyped-def]
        out = collate(examples)
        micro.append(int(out["attention_mask"].sum()) if "attention_mask" in out else int(out["input_ids"].numel()))
        return out

    trainer.data_collator = counting
    trainer.train()
    trainer.save_state()
    history = json.loads((work / "_trl" / name / "trainer_state.json").read_text())["log_history"]
    per_step = [sum(micro[s * accum:(s + 1) * accum]) for s in range(steps)]
    _truth(work, name, {
        "trainer": "Hugging Face Trainer", "label": "TRL SFT", "base": 1, "total_steps": steps,
        "logged_steps": [row["step"] for row in history if "loss" in row], "mean_over": logging_steps,
        "tokens_per_step": per_step, "tokens_logged": True, "variable_tokens": True,
        "loss": {"mlflow": "loss", "wandb": "train/loss"}, "lr": {"mlflow": "learning_rate", "wandb": "train/learning_rate"},
        # max_steps and a warmup ratio: the params hold the schedule.
        "plan": {"mlflow": "params", "wandb": "params"},
        "config": f"packing {'on' if packing else 'off'}, max_length {max_length}, accum {accum}, log every {logging_steps}",
        "sources": {"mlflow": f"run:{name}@{name}", "wandb": f"wandb:{name}"},
    })


def _accelerate(work: Path, name: str) -> None:
    """A run_clm_no_trainer-style loop on Accelerate's tracking API: ``init_trackers`` with the
    script's args, ``accelerator.log(values, step=completed_steps)`` every ``logging_steps``;
    ``accelerate-tokens`` logs ``tokens_seen`` (accumulation 4, every 5), ``accelerate-plain``
    only ``train_loss``, ``lr`` and ``step`` (accumulation 3, every 7; the batch, accumulation
    and block_size are in the config, the world size (1) in none)."""
    import torch
    from accelerate import Accelerator

    tokens = name == "accelerate-tokens"
    batch, accum, every, block, steps = (4, 4, 5, 48, 120) if tokens else (2, 3, 7, 40, 119)
    os.environ["MLFLOW_TRACKING_URI"] = _own_store(work, name)
    accelerator = Accelerator(gradient_accumulation_steps=accum, log_with=["wandb", "mlflow"], cpu=True)
    config = {"per_device_train_batch_size": batch, "gradient_accumulation_steps": accum, "block_size": block,
              "learning_rate": 1e-3, "lr_scheduler_type": "linear", "num_warmup_steps": 10, "max_train_steps": steps,
              "with_tracking": True, "report_to": "all", "checkpointing_steps": None}
    accelerator.init_trackers("outside", config, init_kwargs={"wandb": {"name": name}, "mlflow": {"run_name": name}})
    w = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([w], lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / 10, max(0.0, (steps - s) / (steps - 10))))
    data = torch.utils.data.DataLoader(torch.zeros(steps * accum * batch, block, dtype=torch.long), batch_size=batch)
    optimizer, data, scheduler = accelerator.prepare(optimizer, data, scheduler)
    completed, seen = 0, 0
    for item in data:
        with accelerator.accumulate(w):
            loss = torch.tensor(curve(completed + 1)) + 0.0 * w.sum()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            seen += int(accelerator.gather(torch.tensor(item.numel())).sum())
        if accelerator.sync_gradients:
            completed += 1
            if completed % every == 0:
                values = {"train_loss": loss.item(), "lr": scheduler.get_last_lr()[0], "step": completed}
                accelerator.log({**values, "tokens_seen": seen} if tokens else values, step=completed)
    accelerator.end_training()
    _truth(work, name, {
        "trainer": "Accelerate", "base": 1, "total_steps": steps, "logged_steps": list(range(every, steps + 1, every)),
        "mean_over": 1, "tokens_per_step": [batch * accum * block] * steps, "tokens_logged": tokens,
        "loss": {"mlflow": "train_loss", "wandb": "train_loss"}, "lr": {"mlflow": "lr", "wandb": "lr"},
        # max_train_steps only (the schedule's shape is the script's get_scheduler, not read).
        "plan": {"mlflow": "steps-only", "wandb": "steps-only"},
        "config": f"accum {accum}, log every {every}, " + ("tokens_seen" if tokens else "no token count"),
        "sources": {"mlflow": f"run:{name}@{name}", "wandb": f"wandb:{name}"},
    })


def _torchtune(work: Path, name: str) -> None:
    """torchtune's own WandBLogger and MLFlowLogger with the dicts its recipe logs every
    ``log_every_n_steps`` (7) at ``global_step``; ``torchtune-packed``: 3 ranks, batch 3,
    accumulation 4, ``tokenizer.max_seq_len`` 48, ``dataset.packed`` (every pack padded to
    48); ``torchtune-unpacked``: 1 rank, batch 2, accumulation 3, samples of varying length
    under a cap of 40 (tokens unknowable from the config: ``max_seq_len`` only caps)."""
    from omegaconf import OmegaConf

    packed = name == "torchtune-packed"
    dp, batch, accum, cap, steps, every = (3, 3, 4, 48, 112, 7) if packed else (1, 2, 3, 40, 105, 7)
    wandb_logger, mlflow_logger = _fixtures_module()._torchtune_loggers()
    cfg = OmegaConf.create({
        "output_dir": str(work / "_torchtune" / name), "batch_size": batch, "gradient_accumulation_steps": accum,
        "epochs": 1, "max_steps_per_epoch": steps, "log_every_n_steps": every, "seed": 3,
        "tokenizer": {"_component_": "torchtune.models.llama3.llama3_tokenizer", "max_seq_len": cap},
        "dataset": {"_component_": "torchtune.datasets.alpaca_dataset", "packed": packed},
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 2e-5},
        "lr_scheduler": {"_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                         "num_warmup_steps": 10},
    })
    (work / "_torchtune" / name).mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = _own_store(work, name)
    loggers = [wandb_logger(project="outside", name=name, dir=os.environ["WANDB_DIR"]),
               mlflow_logger(experiment_name="outside", run_name=name)]
    for logger in loggers:
        logger.log_config(cfg)
    per_step = []
    for global_step in range(1, steps + 1):
        lengths = [cap] * (batch * accum * dp) if packed else [
            min(cap, 9 + (global_step * 7 + i * 13) % 45) for i in range(batch * accum * dp)]
        per_step.append(sum(lengths))
        if global_step % every == 0:
            log_dict = {"loss": curve(global_step), "lr": 2e-5, "tokens_per_second_per_gpu": per_step[-1] / (0.5 * dp),
                        "grad_norm": 1.0}
            for logger in loggers:
                logger.log_dict(log_dict, step=global_step)
    for logger in loggers:
        logger.close()
    _truth(work, name, {
        "trainer": "torchtune", "base": 1, "total_steps": steps, "logged_steps": list(range(every, steps + 1, every)),
        "mean_over": 1, "tokens_per_step": per_step, "tokens_logged": False,
        "loss": {"mlflow": "loss", "wandb": "loss"}, "lr": {"mlflow": "lr", "wandb": "lr"},
        "plan": {"mlflow": "assumed", "wandb": "assumed"},
        # torchrun's world size is in no config: given, as a user would.
        "facts": {"--world-size": dp} if packed else {},
        "config": f"{dp} ranks, batch {batch}, accum {accum}, max_seq_len {cap}, " + ("packed" if packed else "not packed"),
        "sources": {"mlflow": f"run:{name}@{name}", "wandb": f"wandb:{name}"},
    })


def _olmo_core(work: Path, name: str) -> None:
    """OLMo-core's own WandBCallback, the trainer's metrics every 7 steps
    (``metrics_collect_interval``), 4 ranks of 3 x 48-token instances, 140 steps."""
    import types

    module = _fixtures_module()
    import olmo_core

    root = Path(olmo_core.__file__).parent
    for package_name, path in (("olmo_core.train", root / "train"), ("olmo_core.train.callbacks", root / "train" / "callbacks")):
        package = types.ModuleType(package_name)
        package.__path__ = [str(path)]
        sys.modules[package_name] = package
    import importlib

    WandBCallback = importlib.import_module("olmo_core.train.callbacks.wandb").WandBCallback
    del module
    dp, batch, seq, steps, every = 4, 3, 48, 140, 7
    tokens_per_step = dp * batch * seq
    config = {"run_name": name, "dataset": {"sequence_length": seq},
              "data_loader": {"global_batch_size": tokens_per_step}, "train_module": {"rank_microbatch_size": batch * seq},
              "trainer": {"max_duration": {"value": steps, "unit": "steps"}, "metrics_collect_interval": every}}
    # pre_train demands the variable even offline: a placeholder, no key (nothing is sent).
    os.environ.setdefault("WANDB_API_KEY", "x" * 40)
    callback = WandBCallback(name=name, project="outside", config=config)
    callback._trainer = types.SimpleNamespace(work_dir=Path(os.environ["WANDB_DIR"]))
    callback.pre_train()
    for step in range(1, steps + 1):
        if step % every == 0:
            callback.log_metrics(step, {"train/CE loss": curve(step), "throughput/total tokens": step * tokens_per_step,
                                        "optim/LR (group 0)": 1e-3})
    callback.wandb.finish()
    _truth(work, name, {
        "trainer": "OLMo-core", "base": 1, "total_steps": steps, "logged_steps": list(range(every, steps + 1, every)),
        "mean_over": 1, "tokens_per_step": [tokens_per_step] * steps, "tokens_logged": True,
        "loss": {"wandb": "train/CE loss"}, "lr": {"wandb": "optim/LR (group 0)"}, "plan": {"wandb": "assumed"},
        "config": f"{dp} ranks, log every {every}, seq {seq}", "sources": {"wandb": f"wandb:{name}"},
    })


def _lightning_cli(work: Path, name: str) -> None:
    """LightningCLI with ``--config cli.yaml`` holding ``trainer.accumulate_grad_batches: 3``
    (``lightning-cli-yaml``: CSVLogger, WandbLogger, MLFlowLogger; SaveConfigCallback's
    config.yaml beside metrics.csv), or Lightning's documented LoggerSaveConfigCallback that
    logs the whole config as one YAML string, ``log_hyperparams({"config": yaml_text})``
    (``lightning-cli-logged``: WandbLogger and MLFlowLogger, accumulation 5)."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
    from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, WandbLogger
    from torch import nn

    logged = name == "lightning-cli-logged"
    accum, batch, block, steps, every = (5, 2, 40, 90, 4) if logged else (3, 4, 48, 100, 6)

    class Module(L.LightningModule):
        def __init__(self, batch_size: int = 1, block_size: int = 8) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.w = nn.Parameter(torch.zeros(1))

        def training_step(self, x: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = torch.tensor(curve(self.global_step + 1)) + 0.0 * self.w.sum()
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def train_dataloader(self) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
            data = torch.zeros(steps * accum * self.hparams["batch_size"], self.hparams["block_size"], dtype=torch.long)
            return torch.utils.data.DataLoader(data, batch_size=self.hparams["batch_size"])

        def configure_optimizers(self) -> dict[str, object]:
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class LoggerSaveConfigCallback(SaveConfigCallback):  # Lightning's docs (cli_advanced_3)
        def save_config(self, trainer, pl_module, stage) -> None:  # type: ignore[no-untyped-def]
            if isinstance(trainer.logger, Logger):
                config = self.parser.dump(self.config, skip_none=False)
                trainer.logger.log_hyperparams({"config": config})

    cli_yaml = work / f"{name}.yaml"
    cli_yaml.write_text(
        f"trainer:\n  max_steps: {steps}\n  accumulate_grad_batches: {accum}\n  log_every_n_steps: {every}\n"
        f"model:\n  batch_size: {batch}\n  block_size: {block}\n"
    )
    wandb_logger = WandbLogger(project="outside", name=name, save_dir=os.environ["WANDB_DIR"], offline=True)
    mlflow_logger = MLFlowLogger(experiment_name="outside", run_name=name, tracking_uri=_own_store(work, name))
    loggers = [wandb_logger, mlflow_logger] if logged else [CSVLogger(str(work / "_csv"), name=name), wandb_logger,
                                                           mlflow_logger]
    kwargs = {"save_config_callback": LoggerSaveConfigCallback} if logged else {"save_config_kwargs": {"overwrite": True}}
    LightningCLI(
        Module, trainer_defaults={"logger": loggers, "callbacks": [LearningRateMonitor(logging_interval="step")],
                                  "accelerator": "cpu", "enable_checkpointing": False, "enable_progress_bar": False,
                                  "enable_model_summary": False},
        args=["fit", "--config", str(cli_yaml)], **kwargs,
    )
    last = steps - 1
    logged_steps = [s for s in range(steps) if (s + 1) % every == 0]
    sources = {"mlflow": f"run:{name}@{name}", "wandb": f"wandb:{name}"}
    if not logged:
        (metrics,) = (work / "_csv" / name).rglob("metrics.csv")
        sources["csv"] = str(metrics)
    del last
    _truth(work, name, {
        "trainer": "PyTorch Lightning", "label": "LightningCLI", "base": 0, "total_steps": steps,
        "logged_steps": logged_steps, "mean_over": 1, "tokens_per_step": [batch * accum * block] * steps,
        "tokens_logged": False, "loss": dict.fromkeys(sources, "train_loss_step"), "lr": dict.fromkeys(sources, "lr-AdamW"),
        "plan": dict.fromkeys(sources, "assumed"),
        "config": f"accum {accum} in " + ("the config logged as one YAML string" if logged else "--config YAML file"),
        "sources": sources,
    })


def _truth(work: Path, name: str, truth: dict[str, object]) -> None:
    (work / f"{name}.truth.json").write_text(json.dumps(truth))


_SETUPS = {
    "hf-epochs": _hf, "hf-tokens": _hf, "lightning": _lightning,
    "trl-pack": _trl, "trl-nopack": _trl, "accelerate-tokens": _accelerate, "accelerate-plain": _accelerate,
    "torchtune-packed": _torchtune, "torchtune-unpacked": _torchtune, "olmo-core": _olmo_core,
    "lightning-cli-yaml": _lightning_cli, "lightning-cli-logged": _lightning_cli,
}


# -- measuring -------------------------------------------------------------------------------


def _sources(work: Path, truth: dict) -> dict[str, tuple[str, str | None]]:
    """Each tracker's run string and MLflow store (MLflow by run name, ``run:NAME[@STORE]``
    with STORE a setup's own store; W&B by the setup's own offline directory)."""
    from mlflow import MlflowClient

    out: dict[str, tuple[str, str | None]] = {}
    for tracker, where in truth["sources"].items():
        if where.startswith("run:"):
            name, _, store = where[4:].partition("@")
            uri = f"sqlite:///{work / store / 'mlflow.db'}" if store else _env(work)["MLFLOW_TRACKING_URI"]
            client = MlflowClient(uri)
            runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
                    if r.info.run_name == name]
            out[tracker] = (f"mlflow:{runs[0].info.run_id}", uri)
        elif where.startswith("wandb:"):
            (run_dir,) = sorted((work / "_wandb" / where[6:]).rglob("offline-run-*"))
            out[tracker] = (f"wandb-offline:{run_dir}", None)
        else:
            out[tracker] = (where, None)
    return out


def _expected_crossing(truth: dict, target: float, window_steps: float) -> float:
    """The step (the trainer's numbering) where the EMA (span ``window_steps`` steps,
    pandas' ``adjust=False``) of the loss as the trainer logs it (HF: the mean since the
    last log) first reaches ``target``, from the trainer's first logged row on."""
    base, mean_over = truth["base"], truth["mean_over"]
    steps = list(range(base, base + truth["total_steps"]))
    true = [curve(s + 1 - base) for s in steps]
    logged = [sum(true[max(0, i - mean_over + 1): i + 1]) / len(true[max(0, i - mean_over + 1): i + 1])
              for i in range(len(true))]
    first = steps.index(truth["logged_steps"][0])
    alpha = 2.0 / (max(window_steps, 1.0) + 1.0)
    ema = logged[first]
    previous = ema
    for i in range(first, len(steps)):
        ema = logged[i] if i == first else (1 - alpha) * ema + alpha * logged[i]
        if ema <= target:
            if i == first:
                return float(steps[i])
            return steps[i - 1] + (previous - target) / (previous - ema)
        previous = ema
    return math.nan


def _tokens_before(truth: dict, step: float) -> float:
    """Tokens consumed before the trainer's step ``step`` (the frame's convention)."""
    per_step = truth["tokens_per_step"]
    done = int(step) - truth["base"]  # optimizer steps completed before this one
    return float(sum(per_step[:done]))


def _analyze(python: str, root: str, source: tuple[str, str | None], targets: list[float], work: Path,
             facts: dict[str, float]) -> dict:
    """``analyze SOURCE --json`` with no reading flags but ``facts`` (what no run of the
    setup holds, as a user would give it) and the MLflow store."""
    command = [python, "-m", "tracker_plugin", "analyze", source[0], "--target", *(f"{t:g}" for t in targets),
               "--json", "--no-cache", *(str(part) for flag, value in facts.items() for part in (flag, value))]
    if source[1] is not None:
        command += ["--tracking-uri", source[1]]
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


_SHORT = {"Hugging Face Trainer": "HF", "PyTorch Lightning": "Lightning"}  # else the trainer's own name


def _row(truth: dict, tracker: str, doc: dict, target: float) -> list[str]:
    label = truth.get("label") or _SHORT.get(truth["trainer"], truth["trainer"])
    name = f"{label} -> {tracker}" + "".join(f" {flag} {value:g}" for flag, value in truth.get("facts", {}).items())
    if "error" in doc:
        return [name, truth["config"], "ERROR", "-", "-", "-", "-", "-", "-", doc["error"][:80]]
    last = truth["logged_steps"][-1]
    step_ok = doc["observed"]["step"] == last
    observed_tokens = doc["observed"]["tokens"]
    read_tokens = doc["read_as"]["tokens"]
    on_steps = doc.get("axis") == "steps" or read_tokens.startswith("none (on steps)")
    if on_steps:
        tokens = "steps (honest)" if not truth["tokens_logged"] else "steps (MISSED tokens)"
        if observed_tokens is not None:
            tokens = "WRONG: steps as tokens"
        window_steps = doc.get("ema_steps") or doc["ema_token_window"]
    else:
        want = _tokens_before(truth, doc["observed"]["step"])
        error = abs(observed_tokens - want) / want
        tokens = f"{'ok' if error < 0.02 else 'WRONG'} ({error:.1%})"
        window_steps = doc["ema_token_window"] / (want / (doc["observed"]["step"] - truth["base"]))
    loss_ok = doc["loss_key"] == truth["loss"][tracker]
    lr_ok = doc["read_as"].get("lr") == truth["lr"][tracker]
    result = doc["targets"][0]  # the second, past the log, makes the forecast read the lr plan
    expected = _expected_crossing(truth, target, window_steps)
    crossing = "-" if result["step"] is None else f"{100 * abs(result['step'] - expected) / expected:.2f}%"
    notes = [n for n in doc["notes"] if "tokens" in n or "step" in n][:1]
    epochs = [n for n in doc["notes"] if "num_train_epochs" in n]  # why the plan is not from the params
    notes = epochs or notes
    # One batch each run: a short step at an epoch's end is no batch stage. Samples of
    # varying length (TRL without packing, or packed to a count) make every step's tokens
    # their own: stages are then the logged counts' differences, not a misreading.
    stages = len(doc["batch"]["stages"])
    varies = truth.get("variable_tokens", False)
    return [name, truth["config"], "ok" if step_ok else f"WRONG ({doc['observed']['step']:g} vs {last})", tokens,
            "ok" if loss_ok else f"WRONG {doc['loss_key']}", "ok" if lr_ok else f"WRONG {doc['read_as'].get('lr')}",
            "ok" if stages == 1 else f"varies ({stages})" if varies else f"WRONG ({stages})", crossing,
            _plan(truth, tracker, doc),
            (notes[0][:90] if notes else read_tokens[:90])]


def _plan_source(truth: dict, tracker: str) -> str:
    """The lr plan each run's config honestly gives.

    - HF with max_steps: the params hold the schedule (lr_scheduler_type, warmup_steps, max_steps).
    - HF planned in epochs: the args log max_steps -1 and num_train_epochs, and the steps an
      epoch takes (the data loader's length) reach neither tracker (train_steps_per_second x
      train_runtime gives it only once training ended): the shape is inferred from the
      logged lr, and a note says why.
    - trainer_state.json: TrainerState.max_steps, the total HF computed, and no schedule
      (steps-only); once the log reaches that total it adds nothing, and the lr is inferred.
    - Lightning: the hparams hold no schedule (OneCycleLR is built in configure_optimizers);
      it anneals to 4e-6x its peak by the last step, no shape the inference knows, so the
      last lr is held ("assumed"), as for any finished run.
    """
    if tracker in truth.get("plan", {}):  # the setups beyond the first eight say theirs
        return str(truth["plan"][tracker])
    if truth["trainer"] != "Hugging Face Trainer":
        return "assumed"
    if tracker == "trainer_state":
        return "steps-only" if truth["logged_steps"][-1] < truth["total_steps"] else "inferred"
    return "params" if truth["tokens_logged"] else "inferred"


def _plan(truth: dict, tracker: str, doc: dict) -> str:
    """The lr plan's source and planned total as the analysis used them; WRONG when the
    source is not the one the run's config gives."""
    plan = doc.get("lr_plan")
    # No lr_plan: no forecast read one; a plan without a schedule holds the last lr ("assumed").
    source = "-" if plan is None else plan["source"] or "assumed"
    want = _plan_source(truth, tracker)
    plan = plan or {}
    total = plan.get("total_steps")
    words = source + (f" {total:g}" if total is not None else "")
    if source == want:
        return words
    # A shape read from the logged lr that ends at the run's planned total is the plan too:
    # what would be wrong is a plan ending elsewhere, or a schedule the config contradicts.
    if source in ("inferred", "steps-only") and total is not None and abs(total - truth["total_steps"]) <= max(
        0.02 * truth["total_steps"], 1
    ):
        return f"{words} (ends at the total)"
    return f"WRONG {words} (want {want})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plugin-python", default="/work/main/.venv/bin/python")
    parser.add_argument("--plugin-root", default=str(ROOT), help="the checkout whose plugin is measured")
    parser.add_argument("--keep", help="write the runs here instead of a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="outside-runs-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in _SETUPS:
            if (work / f"{name}.truth.json").exists():  # --keep a second time: measure again only
                continue
            print(f"writing {name}", file=sys.stderr, flush=True)
            done = subprocess.run([sys.executable, __file__, "--one", name, str(work)], env=_env(work, name),
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"writing {name} failed")
        header = ["trainer -> tracker", "config", "step", "tokens", "loss", "lr", "stages", "crossing err",
                  "lr plan", "note / tokens read as"]
        rows = [header]
        for name in _SETUPS:
            truth = json.loads((work / f"{name}.truth.json").read_text())
            # A target the EMA crosses mid-run: the true loss at 40% of the steps.
            target = round(curve(0.4 * truth["total_steps"]), 2)
            beyond = round(curve(3.0 * truth["total_steps"]), 2)  # forecast: the lr plan is read
            for tracker, source in _sources(work, truth).items():
                doc = _analyze(args.plugin_python, args.plugin_root, source, [target, beyond], work,
                               truth.get("facts", {}))
                rows.append(_row(truth, tracker, doc, target))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
        for r in rows:
            print(" | ".join(c.ljust(w) for c, w in zip(r, widths)) + " | " + r[-1])
        wrong = sum(any("WRONG" in c or c == "ERROR" for c in r[:-1]) for r in rows[1:])
        print(f"\n{len(rows) - 1} runs read; {wrong} WRONG (a row with any WRONG or ERROR cell)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        _SETUPS[sys.argv[2]](Path(sys.argv[3]), sys.argv[2])
    else:
        main()
