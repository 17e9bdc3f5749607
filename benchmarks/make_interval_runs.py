"""Write the held-out runs of the interval-mean benchmark with the real trainers (developer only).

Not run by CI: ``bench_trainers.py --interval`` reads what this writes into
``benchmarks/data/interval/``. Each run trains a tiny GPT-2 (``tests.doubles.
tiny_trainers``'s model and data, on the CPU) and logs it as its trainer does, beside the
per-step training loss of the same training (``*.truth.csv.gz``, the truth the benchmark
compares crossings with):

- ``hf-N``: the ``transformers`` ``Trainer`` with ``logging_steps=N`` (10, 50, 500) and
  ``report_to=["mlflow"]``, 5,000 steps, into ``hf/mlflow.db.gz``. Its truth is the same
  training with ``logging_steps=1`` (the loss HF logs at every step is that step's; the
  seeds make the trainings the same, which the benchmark checks on the logged rows).
- ``nanogpt-N``: nanoGPT's ``train.py`` loop (karpathy/nanoGPT@e2221318e607eb5ee0669d6b7641af25a2111545
  ``train.py``: ``get_lr``, ``estimate_loss`` on ``eval_iters`` batches in eval mode every
  ``eval_interval`` iters, before that iter's update, and ``wandb.log({"iter", "train/loss",
  "val/loss", "lr", "mfu"})``; ``config`` its globals) with ``eval_interval`` N (100, 250,
  500) of 5,000 iters, ``eval_iters`` 200 (its default), into W&B offline
  (``wandb/nanogpt-N``); its truth is each iter's training loss, the mean over its four
  micro-batches (``train.py`` prints the last one's, ``lossf``, at ``log_interval``).
- ``lightning-epoch``: Lightning's ``Trainer`` with ``self.log("train_loss", loss,
  on_step=False, on_epoch=True)`` (the epoch's mean, logged at its end), 40 steps an epoch
  for 4,000 steps, ``LearningRateMonitor``, ``MLFlowLogger`` and ``WandbLogger``.

Run from the worktree (about three minutes on two cores)::

    python benchmarks/make_interval_runs.py benchmarks/data/interval
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' doubles: the tiny model and data
HF_STEPS = 5000
HF_LOGGING = (10, 50, 500)
NANOGPT_ITERS = 5000
NANOGPT_EVALS = (100, 250, 500)
LIGHTNING_STEPS, LIGHTNING_EPOCH = 4000, 40
SEED = 0
# Slow enough that the tiny model's loss falls over the whole run, as a real run's does.
LR = 1e-4


def _write_truth(path: Path, steps: list[int], losses: list[float]) -> None:
    lines = ["step,loss"] + [f"{s},{v:.6g}" for s, v in zip(steps, losses)]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def _hf(out: Path, logging_steps: int) -> None:
    """One HF Trainer run into the MLflow store; logging_steps 1 writes the truth instead."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from tests.doubles.tiny_trainers import BATCH, _data, _Dataset, _model

    report = [] if logging_steps == 1 else ["mlflow"]
    args = TrainingArguments(
        output_dir=str(out / "_hf"), max_steps=HF_STEPS, per_device_train_batch_size=BATCH, learning_rate=LR,
        lr_scheduler_type="cosine", warmup_steps=HF_STEPS // 20, logging_steps=logging_steps, report_to=report,
        save_strategy="no", use_cpu=True, run_name=f"hf-{logging_steps}", disable_tqdm=True, seed=SEED,
    )
    trainer = Trainer(_model(), args, train_dataset=_Dataset(_data(HF_STEPS * BATCH)))
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    if logging_steps == 1:
        entries = [e for e in trainer.state.log_history if "loss" in e]
        _write_truth(out / "hf.truth.csv.gz", [int(e["step"]) for e in entries], [float(e["loss"]) for e in entries])


def _nanogpt(out: Path, eval_interval: int) -> None:
    """nanoGPT's train.py loop and W&B logging, on the tiny GPT-2 and its data."""
    import torch
    import wandb

    from tests.doubles.tiny_trainers import SEQ_LEN, _data, _model

    batch_size, gradient_accumulation_steps, block_size = 8, 4, SEQ_LEN
    learning_rate, max_iters, warmup_iters, min_lr, eval_iters = LR, NANOGPT_ITERS, 100, LR / 10, 200
    lr_decay_iters, decay_lr, log_interval = NANOGPT_ITERS, True, 10
    config = {k: v for k, v in locals().items() if k in (
        "batch_size", "gradient_accumulation_steps", "block_size", "learning_rate", "max_iters", "warmup_iters",
        "min_lr", "eval_iters", "lr_decay_iters", "decay_lr", "eval_interval", "log_interval")}
    config["wandb_log"] = True
    torch.manual_seed(1337)
    model = _model()
    model.config.resid_pdrop = model.config.embd_pdrop = model.config.attn_pdrop = 0.0  # nanoGPT pretraining: dropout 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    data = {"train": _data(20000), "val": _data(2000)[1:]}
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)

    def get_batch(split: str) -> Any:
        rows = data[split]
        ix = torch.randint(len(rows), (batch_size,))
        return rows[ix]

    @torch.no_grad()
    def estimate_loss() -> dict[str, float]:
        out_: dict[str, float] = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                ids = get_batch(split)
                losses[k] = model(input_ids=ids, labels=ids).loss.item()
            out_[split] = float(losses.mean())
        model.train()
        return out_

    def get_lr(it: int) -> float:
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (learning_rate - min_lr)

    run = wandb.init(project="interval", name=f"nanogpt-{eval_interval}", config=config)
    steps, losses = [], []
    ids = get_batch("train")
    iter_num = 0
    while True:
        lr = get_lr(iter_num) if decay_lr else learning_rate
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % eval_interval == 0:
            est = estimate_loss()
            wandb.log({"iter": iter_num, "train/loss": est["train"], "val/loss": est["val"], "lr": lr, "mfu": -100.0})
        step_loss = 0.0
        for _ in range(gradient_accumulation_steps):
            loss = model(input_ids=ids, labels=ids).loss / gradient_accumulation_steps
            ids = get_batch("train")
            loss.backward()
            step_loss += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps.append(iter_num)
        losses.append(step_loss)  # the iteration's loss: the mean over its micro-batches
        iter_num += 1
        if iter_num > max_iters:
            break
    run.finish()
    _write_truth(out / f"nanogpt-{eval_interval}.truth.csv.gz", steps, losses)


def _lightning(out: Path) -> None:
    """Lightning's on_epoch mean of the training loss, to MLflow and W&B offline."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import LearningRateMonitor
    from torch.utils.data import DataLoader

    from tests.doubles.tiny_trainers import BATCH, SEQ_LEN, _data, _Dataset, _model

    truth: dict[int, float] = {}

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _model()
            self.save_hyperparameters({"batch_size": BATCH, "seq_len": SEQ_LEN, "accumulate_grad_batches": 1})

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            truth[self.trainer.global_step] = float(loss)
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.AdamW(self.parameters(), lr=LR)
            return optimizer

    L.seed_everything(SEED)
    loggers = [
        L.pytorch.loggers.MLFlowLogger(experiment_name="interval", tracking_uri=os.environ["MLFLOW_TRACKING_URI"],
                                       run_name="lightning-epoch"),
        L.pytorch.loggers.WandbLogger(name="lightning-epoch", project="interval", offline=True,
                                      save_dir=os.environ["WANDB_DIR"]),
    ]
    trainer = L.Trainer(max_steps=LIGHTNING_STEPS, log_every_n_steps=10, logger=loggers,
                        callbacks=[LearningRateMonitor(logging_interval="step")], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                        default_root_dir=str(out / "_lightning"))
    loader: Any = DataLoader(_Dataset(_data(LIGHTNING_EPOCH * BATCH)), batch_size=BATCH, shuffle=True)
    trainer.fit(Tiny(), loader)
    steps = sorted(truth)
    # At Lightning's global_step (the updates done before the batch), as it logs it.
    _write_truth(out / "lightning-epoch.truth.csv.gz", steps, [truth[s] for s in steps])


def _env(out: Path, store: str, name: str) -> dict[str, str]:
    env = dict(os.environ)
    (out / "_wandb" / name).mkdir(parents=True, exist_ok=True)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_CODE="true",
               WANDB_DIR=str(out / "_wandb" / name),
               MLFLOW_TRACKING_URI=f"sqlite:///{out / store}", MLFLOW_EXPERIMENT_NAME="interval",
               TOKENIZERS_PARALLELISM="false", HF_MLFLOW_LOG_ARTIFACTS="0", PYTHONPATH=str(ROOT))
    return env


def _keep(out: Path) -> None:
    """Keep only the .wandb files of the offline runs, and gzip the MLflow stores."""
    for run in (out / "_wandb").rglob("offline-run-*"):
        (record,) = run.glob("run-*.wandb")
        name = run.relative_to(out / "_wandb").parts[0]  # each job's own WANDB_DIR
        target = out / "wandb" / name / run.name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(record, target / record.name)
    for store in out.glob("*.db"):
        with open(store, "rb") as src, gzip.open(f"{store}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        store.unlink()
    for temp in ("_wandb", "_hf", "_lightning", "mlruns"):
        shutil.rmtree(out / temp, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--one":  # one training per process: the trackers' state is per process
        kind, _, n = argv[2].partition("=")
        out = Path(os.environ["INTERVAL_OUT"])
        import torch

        torch.set_num_threads(1)  # a tiny model: threads cost more than they give
        {"hf": lambda: _hf(out, int(n)), "nanogpt": lambda: _nanogpt(out, int(n)), "lightning": lambda: _lightning(out)}[kind]()
        return 0
    out = Path(argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    jobs = [("hf=1", "hf.db"), *((f"hf={n}", "hf.db") for n in HF_LOGGING),
            *((f"nanogpt={n}", "none.db") for n in NANOGPT_EVALS), ("lightning=0", "lightning.db")]
    only = set(argv[2].split(",")) if len(argv) > 2 else None
    for job, store in jobs:
        if only is not None and job.partition("=")[0] not in only:
            continue
        name = {"hf": "hf-{}", "nanogpt": "nanogpt-{}", "lightning": "lightning-epoch"}[job.partition("=")[0]]
        env = {**_env(out, store, name.format(job.partition("=")[2])), "INTERVAL_OUT": str(out)}
        subprocess.run([sys.executable, __file__, "--one", job], env=env, check=True)
    _keep(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
