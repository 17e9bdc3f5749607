"""The live callbacks inside the real trainers: Hugging Face's ``Trainer`` and Lightning's.

A tiny GPT-2 trains for 200 steps on the CPU (``tracker_plugin.testing.tiny_trainers``), in
a process of its own, reporting to an MLflow local store and a W&B offline run at once,
under a cosine and a WSD schedule. Asserted: the plan was read from the live scheduler;
the forecast keys were logged during training at the trainer's steps, so the trackers
chart them; the final annotation is complete; and ``annotate`` of the finished MLflow run
finds it current (the W&B run, annotated while still open, is annotated again once closed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracker_plugin.cli import main
from tracker_plugin.keys import MARKER
from tracker_plugin.trackers.wandb_offline import read_offline_run

pytest.importorskip("torch")
STEPS = 200
TARGETS = ("2.5", "2.0")
KEY = "loss_eta/target_2p00/step"


def train(tmp_path: Path, trainer: str, schedule: str) -> tuple[dict, str]:
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(MLFLOW_TRACKING_URI=store, MLFLOW_EXPERIMENT_NAME="live", WANDB_MODE="offline",
               WANDB_DIR=str(tmp_path), WANDB_SILENT="true", MLFLOW_DISABLE_TELEMETRY="true")
    done = subprocess.run(
        [sys.executable, "-m", "tracker_plugin.testing.tiny_trainers", trainer, "--schedule", schedule,
         "--steps", str(STEPS), "--out", str(tmp_path / "out"), "--report-to", "mlflow", "wandb",
         "--targets", *TARGETS, "--every-logs", "10"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "live forecast:" not in done.stderr, done.stderr[-3000:]  # no warning: nothing went wrong inside
    return json.loads(done.stdout.strip().splitlines()[-1]), store


@pytest.mark.parametrize("trainer", ["hf", "lightning"])
@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
def test_a_real_trainer_logs_live_forecasts_and_ends_annotated(tmp_path, capsys, trainer, schedule):
    from mlflow.tracking import MlflowClient

    seen, store = train(tmp_path, trainer, schedule)
    assert seen["plan"].startswith("read from the scheduler (LambdaLR") and f"{STEPS} steps" in seen["plan"]
    assert seen["final_step"] == STEPS and seen["status"].startswith(f"forecast at step {STEPS}")
    assert seen["plan_error"] < 1e-9  # the plan is the lr the trainer then used, at each of its steps
    assert [o.split(": ")[1] for o in seen["outcomes"]] == ["annotated", "annotated"]

    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("live").experiment_id])
    points = client.get_metric_history(run.info.run_id, KEY)
    steps = [p.step for p in points]
    # a series over the run, at the trainer's logged steps (each forecast takes longer than many of
    # these tiny steps, so few land before the last; a real run's chart has one per cadence)
    assert len(set(steps)) >= 2 and steps == sorted(steps) and steps[-1] == STEPS and all(0 < s <= STEPS for s in steps)
    assert set(run.data.metrics) >= {KEY, "loss_eta/target_2p50/step", "loss_eta/last_step"}
    assert run.data.tags[MARKER] and run.data.tags["loss_eta/target_2p50/status"] == "reached"

    capsys.readouterr()
    extra = ["--batch-size", "256"] if trainer == "lightning" else []  # Lightning's run logs no token count
    assert main(["annotate", "mlflow:experiment/live", "-t", *TARGETS, "--tracking-uri", store, "--json", *extra]) == 0
    assert [row["action"] for row in json.loads(capsys.readouterr().out)] == ["unchanged"]

    (wandb_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    offline = read_offline_run(wandb_file, {KEY, "train/global_step"}, ref="w")
    live_steps, values = offline.data[KEY]
    assert len(values) >= 2 and all(isinstance(v, float) for v in values)
    assert offline.summary[MARKER] and offline.summary["loss_eta/target_2p50/status"] == "reached"
