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


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_CODE="true", WANDB_DIR=str(work / "_wandb"),
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
    wandb_logger = WandbLogger(project="outside", name=name, save_dir=str(work / "_wandb"), offline=True)
    mlflow_logger = MLFlowLogger(experiment_name="outside", run_name=name, tracking_uri=_env(work)["MLFLOW_TRACKING_URI"])
    trainer = L.Trainer(
        max_epochs=epochs, accumulate_grad_batches=accum, log_every_n_steps=log_every, val_check_interval=0.5,
        logger=[mlflow_logger, wandb_logger, csv], callbacks=[LearningRateMonitor(logging_interval="step")],
        accelerator="cpu", enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(Module(batch, SEQ, 1e-3), train, val)
    import pandas as pd

    (metrics,) = (work / "_csv").rglob("metrics.csv")
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


def _truth(work: Path, name: str, truth: dict[str, object]) -> None:
    (work / f"{name}.truth.json").write_text(json.dumps(truth))


_SETUPS = {"hf-epochs": _hf, "hf-tokens": _hf, "lightning": _lightning}


# -- measuring -------------------------------------------------------------------------------


def _sources(work: Path, truth: dict) -> dict[str, str]:
    """Each tracker's run string (MLflow by run name, W&B by the run's offline directory)."""
    from mlflow import MlflowClient

    out = {}
    for tracker, where in truth["sources"].items():
        if where.startswith("run:"):
            client = MlflowClient(_env(work)["MLFLOW_TRACKING_URI"])
            runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
                    if r.info.run_name == where[4:]]
            out[tracker] = f"mlflow:{runs[0].info.run_id}"
        elif where.startswith("wandb:"):
            for run_dir in sorted((work / "_wandb").rglob("offline-run-*")):
                if _wandb_name(run_dir) == where[6:]:
                    out[tracker] = f"wandb-offline:{run_dir}"
        else:
            out[tracker] = where
    return out


def _wandb_name(run_dir: Path) -> str:
    config = run_dir / "files" / "wandb-metadata.json"
    for wandb_file in run_dir.glob("*.wandb"):
        text = wandb_file.read_bytes()
        for name in ("hf-epochs", "hf-tokens", "lightning"):
            if name.encode() in text:
                return name
    return config.name


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


def _analyze(python: str, root: str, source: str, targets: list[float], work: Path) -> dict:
    command = [python, "-m", "tracker_plugin", "analyze", source, "--target", *(f"{t:g}" for t in targets), "--json",
               "--no-cache"]
    if source.startswith("mlflow:"):
        command += ["--tracking-uri", _env(work)["MLFLOW_TRACKING_URI"]]
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout)


_SHORT = {"Hugging Face Trainer": "HF", "PyTorch Lightning": "Lightning"}


def _row(truth: dict, tracker: str, doc: dict, target: float) -> list[str]:
    name = f"{_SHORT[truth['trainer']]} -> {tracker}"
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
    # One batch each run: a short step at an epoch's end is no batch stage.
    stages = len(doc["batch"]["stages"])
    return [name, truth["config"], "ok" if step_ok else f"WRONG ({doc['observed']['step']:g} vs {last})", tokens,
            "ok" if loss_ok else f"WRONG {doc['loss_key']}", "ok" if lr_ok else f"WRONG {doc['read_as'].get('lr')}",
            "ok" if stages == 1 else f"WRONG ({stages})", crossing, _plan(truth, tracker, doc),
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
    return words if source == want else f"WRONG {words} (want {want})"


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
            subprocess.run([sys.executable, __file__, "--one", name, str(work)], env=_env(work), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        header = ["trainer -> tracker", "config", "step", "tokens", "loss", "lr", "stages", "crossing err",
                  "lr plan", "note / tokens read as"]
        rows = [header]
        for name in _SETUPS:
            truth = json.loads((work / f"{name}.truth.json").read_text())
            # A target the EMA crosses mid-run: the true loss at 40% of the steps.
            target = round(curve(0.4 * truth["total_steps"]), 2)
            beyond = round(curve(3.0 * truth["total_steps"]), 2)  # forecast: the lr plan is read
            for tracker, source in _sources(work, truth).items():
                doc = _analyze(args.plugin_python, args.plugin_root, source, [target, beyond], work)
                rows.append(_row(truth, tracker, doc, target))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
        for r in rows:
            print(" | ".join(c.ljust(w) for c, w in zip(r, widths)) + " | " + r[-1])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        _SETUPS[sys.argv[2]](Path(sys.argv[3]), sys.argv[2])
    else:
        main()
