"""The live callbacks inside the real trainers: Hugging Face's ``Trainer`` and Lightning's.

A tiny GPT-2 trains for 200 steps on the CPU (``tests.doubles.tiny_trainers``), in
a process of its own, reporting to an MLflow local store and a W&B offline run at once,
under a cosine and a WSD schedule. Asserted: the plan was read from the live scheduler;
the forecast keys were logged during training at the trainer's steps, so the trackers
chart them; the final annotation is complete; and ``annotate`` of the finished MLflow run
finds it current (the W&B run, annotated while still open, is annotated again once closed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tracker_plugin.cli import main
from tracker_plugin.keys import MARKER
from tracker_plugin.report.target_text import target_status
from tracker_plugin.trackers.wandb_offline import read_offline_run

# Minutes long: left out of the default run, run with --all (CI runs it).
pytestmark = pytest.mark.slow

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]  # where ``-m tests.doubles.tiny_trainers`` is found
STEPS = 200
TARGETS = ("2.5", "2.0")
KEY = "when_2_step"


def train(tmp_path: Path, trainer: str, schedule: str, *extra: str) -> tuple[dict, str]:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    # Run from tmp_path: the trainer's MLflow integration makes the experiment, and a local store
    # puts its artifacts under ./mlruns; the checkout is found through PYTHONPATH.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(MLFLOW_TRACKING_URI=store, MLFLOW_EXPERIMENT_NAME="live", WANDB_MODE="offline",
               WANDB_DIR=str(tmp_path), WANDB_SILENT="true", MLFLOW_DISABLE_TELEMETRY="true")
    done = subprocess.run(
        [sys.executable, "-m", "tests.doubles.tiny_trainers", trainer, "--schedule", schedule,
         "--steps", str(STEPS), "--out", str(tmp_path / "out"), "--report-to", "mlflow", "wandb",
         "--targets", *TARGETS, "--every-logs", "10", "--inline", *extra],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "live forecast:" not in done.stderr, done.stderr[-3000:]  # no warning: nothing went wrong inside
    return json.loads(done.stdout.strip().splitlines()[-1]), store


@pytest.mark.parametrize(("trainer", "schedule"), [
    ("hf", "cosine"), ("hf", "wsd"), ("lightning", "cosine"), ("lightning", "wsd"), ("hf-no-token-count", "cosine"),
])
def test_a_real_trainer_logs_live_forecasts_and_ends_annotated(tmp_path, capsys, trainer, schedule):
    """A real trainer logs live forecasts and ends annotated, and ``annotate`` with no flags finds the run current in both trackers: a run whose
    trainer counts no tokens (Lightning; HF without include_num_input_tokens_seen) holds the
    callback's ``tokens_per_step`` param, and the W&B run the fingerprint it closed with."""
    from mlflow.tracking import MlflowClient

    extra = ("--no-token-count",) if trainer == "hf-no-token-count" else ()
    seen, store = train(tmp_path, trainer.removesuffix("-no-token-count"), schedule, *extra)
    assert seen["plan"].startswith("read from the scheduler (LambdaLR") and f"{STEPS} steps" in seen["plan"]
    assert seen["final_step"] == STEPS and seen["status"].startswith(f"forecast at step {STEPS}")
    assert seen["plan_error"] < 1e-9  # the plan is the lr the trainer then used, at each of its steps
    assert [o.split(": ")[1] for o in seen["outcomes"]] == ["annotated", "annotated"]

    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("live").experiment_id])
    points = client.get_metric_history(run.info.run_id, KEY)
    steps = [p.step for p in points]
    # a series over the run (2 points or more: the early forecasts of the tiny model, on a 5% gain
    # prior, call the target unreachable), a point per forecast that had a number for the target (every 10 logged rows
    # once the warmup is over), at the trainer's logged steps; forecasts run inline here, so the series
    # does not depend on the machine's speed (the background thread is tested in test_live.py).
    # The last point is the last forecast's (one cadence, 20 steps, from the end at most): the final
    # annotation logs a value at the last step only where it differs from the live one.
    assert len(set(steps)) >= 2 and steps == sorted(steps) and STEPS - 20 <= steps[-1] <= STEPS, str(steps)
    assert all(0 < s <= STEPS for s in steps) and len(steps) - len(set(steps)) <= 1
    assert set(run.data.metrics) >= {KEY, "when_2p5_step", "when_2p5_hours"}
    assert run.data.tags[MARKER] and target_status(run.data.tags["when_2p5"]) == "reached"

    if trainer != "hf":  # no token count: the callback's tokens per step, as a param the reader takes
        assert float(run.data.params["tokens_per_step"]) == (256 if trainer == "lightning" else 128)
    capsys.readouterr()
    assert main(["annotate", "mlflow:experiment/live", "-t", *TARGETS, "--tracking-uri", store, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)  # a row per target of the one run
    assert len(rows) == len(TARGETS) and {row["action"] for row in rows} == {"unchanged"}, rows

    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    offline = read_offline_run(wandb_file, {KEY, "train/global_step"}, ref="w")
    live_steps, values = offline.data[KEY]
    assert len(values) >= 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)  # whole steps
    assert offline.summary[MARKER] and target_status(offline.summary["when_2p5"]) == "reached"
    # annotated while open, the W&B run is current once closed: no flag, nothing to redo
    assert main(["annotate", f"wandb-offline:{wandb_file.parent}", "-t", *TARGETS, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(TARGETS) and {row["action"] for row in rows} == {"unchanged"}, rows


def test_under_torchrun_only_rank_0_forecasts_and_logs(tmp_path):
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # run from tmp_path
    env.update(MLFLOW_TRACKING_URI=store, MLFLOW_EXPERIMENT_NAME="ddp", WANDB_MODE="offline",
               WANDB_DIR=str(tmp_path), WANDB_SILENT="true", MLFLOW_DISABLE_TELEMETRY="true", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
         "-m", "tests.doubles.tiny_trainers", "hf", "--steps", "100", "--out", str(tmp_path / "out"),
         "--report-to", "mlflow", "wandb", "--targets", *TARGETS, "--every-logs", "10"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_rank = sorted(seen, key=lambda s: s["rank"])
    assert [s["rank"] for s in by_rank] == [0, 1]
    assert by_rank[0]["forecasts"] >= 1 and by_rank[0]["outcomes"] and by_rank[0]["world_size"] == 2
    assert by_rank[1]["forecasts"] == 0 and by_rank[1]["outcomes"] == [] and by_rank[1]["status"] == "off: not rank 0"
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("ddp").experiment_id])
    steps = [p.step for p in client.get_metric_history(run.info.run_id, "when_2p5_step")]
    # each forecast logged once, not once per rank (the final annotation may add one at the last step)
    assert steps and len(steps) - len(set(steps)) <= 1
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1


def _free_port() -> int:
    from tests.doubles.mlflow_server import free_port

    return free_port()


# -- in this process, reporting to no tracker: resumed runs, schedulers without a plan, failures
def hf_trainer(tmp_path: Path, live, *, steps: int = 120, optimizers=(None, None), save_steps: int | None = None,
               eval_steps: int | None = None):
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from tests.doubles.tiny_trainers import BATCH, _data, _Dataset, _model

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=3e-3,
        lr_scheduler_type="cosine", warmup_steps=10, logging_steps=2, report_to=[], use_cpu=True, seed=0,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, disable_tqdm=True,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps,
    )
    model = _model()
    if optimizers[0] == "plateau":
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        optimizers = (optimizer, torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer))
    evaluation = _Dataset(_data(4 * BATCH)) if eval_steps else None
    trainer = Trainer(model, args, train_dataset=_Dataset(_data(steps * BATCH)), eval_dataset=evaluation,
                      callbacks=[live], optimizers=optimizers)
    trainer.remove_callback(PrinterCallback)
    return trainer


def test_a_resumed_hf_run_picks_its_history_back_up(tmp_path):
    from tracker_plugin.live import LossEtaCallback

    first = LossEtaCallback([2.0], every_logs=10**6, min_rows=5, annotate_at_end=False)
    hf_trainer(tmp_path, first, steps=60, save_steps=60).train()
    assert len(first.live.snapshot()["step"]) == 30
    resumed = LossEtaCallback([2.0], every_logs=10**6, min_rows=5, annotate_at_end=False)
    hf_trainer(tmp_path, resumed, steps=120).train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-60"))
    steps = resumed.live.snapshot()["step"]
    assert steps[:30] == [float(s) for s in range(2, 61, 2)]  # the checkpoint's log history, then the new rows
    assert steps[30:] == [float(s) for s in range(62, 121, 2)]
    assert resumed.live.latest is not None and resumed.live.latest.rows == 60, resumed.live.status


def test_a_scheduler_without_a_plan_infers_it_and_the_status_says_so(tmp_path):
    from tracker_plugin.live import LossEtaCallback

    live = LossEtaCallback([2.0], every_logs=10, every_seconds=0, min_rows=10, annotate_at_end=False)
    hf_trainer(tmp_path, live, optimizers=("plateau", None)).train()
    assert live.live.config.lr_schedule is not None and live.live.config.lr_schedule.source == "steps-only"
    assert live.live.status.endswith(
        "plan: ReduceLROnPlateau follows the loss, not the step: the plan is inferred from the log"
    ), live.live.status


def test_a_tracker_that_is_down_is_said_once_and_training_goes_on(tmp_path, monkeypatch):
    from tracker_plugin.live import LossEtaCallback
    from tracker_plugin.live.sinks import TrackerSinks

    def down(self, metrics, step, args=None):
        raise ConnectionError("the tracking server is not answering")

    monkeypatch.setattr(TrackerSinks, "log", down)
    live = LossEtaCallback([2.0], every_logs=5, every_seconds=0, min_rows=10, annotate_at_end=False)
    trainer = hf_trainer(tmp_path, live)
    with pytest.warns(RuntimeWarning, match="ConnectionError: the tracking server is not answering") as caught:
        trainer.train()
    assert trainer.state.global_step == 120
    assert len([w for w in caught if "live forecast" in str(w.message)]) == 1


def test_progress_lines_show_each_targets_eta_above_the_bar(tmp_path, capfd):
    from tracker_plugin.live import LossEtaCallback

    live = LossEtaCallback([2.0], every_logs=10, every_seconds=0, min_rows=10, progress=True, annotate_at_end=False)
    hf_trainer(tmp_path, live).train()
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("loss_eta step ")]
    targets = [line for line in lines if ": end " not in line]  # each forecast's plan end follows its targets
    assert targets and all(": 2.00 " in line for line in targets), lines
    ends = [line for line in lines if ": end " in line]
    assert all(re.search(r": end \d+\.\d+ \(80%: [\d.]+–[\d.]+\) at step [\d,]+$", line) for line in ends), ends


def test_a_lightning_run_planned_in_epochs_reads_its_plan_to_the_estimated_steps(tmp_path):
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from tests.doubles.tiny_trainers import BATCH, _data, _Dataset, _lr_shape, _model
    from tracker_plugin.live import LossEtaLightningCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _model()

        def training_step(self, batch, batch_idx):
            loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_shape("cosine", 60))
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    live = LossEtaLightningCallback([2.0], seq_len=16, every_logs=10**6, min_rows=5, annotate_at_end=False)
    trainer = L.Trainer(max_epochs=2, log_every_n_steps=2, logger=False, callbacks=[live], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                        default_root_dir=str(tmp_path))
    trainer.fit(Tiny(), DataLoader(_Dataset(_data(30 * BATCH)), batch_size=BATCH))
    assert trainer.estimated_stepping_batches == 60 and trainer.global_step == 60
    plan = live.live.config.lr_schedule
    assert plan is not None and plan.total_steps == 60 and live.plan_note.startswith("read from the scheduler")
    assert live.live.latest is not None and live.live.latest.step == 60


def test_the_eval_loss_when_asked(tmp_path):
    from tracker_plugin.live import LossEtaCallback

    live = LossEtaCallback([2.0], loss="eval", every_logs=10**6, min_rows=5, annotate_at_end=False)
    hf_trainer(tmp_path, live, eval_steps=10).train()
    rows = live.live.snapshot()
    assert rows["step"] == [float(s) for s in range(10, 121, 10)]  # one row per evaluation, at its step
    assert live.live.latest is not None and live.live.latest.analysis.loss_key == "loss"
