"""Scheduled and comparative jobs against a real `mlflow server`: watch, compare, and the
nightly examples in examples/scheduling, each run as far as this machine allows."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time as time_module
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.doubles.mlflow_runs import log_csv, log_frame, log_run
from tracker_plugin.cli import main
from tracker_plugin.core.status import Status
from tracker_plugin.keys import is_own

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
ARMS = ("olmo-ladder-190M-2xC", "olmo-ladder-370M-2xC", "olmo-ladder-760M-2xC")


@pytest.fixture
def experiment(mlflow_server):
    client = MlflowClient(mlflow_server.uri)
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    return client, name, client.create_experiment(name)


def _cli(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what MLflow printed while the runs were logged
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# -- watch ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_watch_gives_a_run_that_finishes_mid_watch_its_final_annotation(
    experiment, mlflow_server, capsys, monkeypatch, tmp_path
):
    client, name, experiment_id = experiment
    log = pd.read_csv(EXAMPLES / "runs" / "olmo-ladder-370M-2xC.csv")
    done = log_csv(client, experiment_id, EXAMPLES / "runs" / "olmo-ladder-190M-2xC.csv")
    live = log_run(client, experiment_id, log.iloc[:40], name="live", status="RUNNING")
    passes = []

    def between_passes(seconds: float) -> None:
        """The training job logs the rest of its steps and ends while watch sleeps."""
        passes.append(seconds)
        if len(passes) == 2:
            log_frame(client, live, log.iloc[40:])
            client.set_terminated(live, status="FINISHED")

    monkeypatch.setattr(time_module, "sleep", between_passes)
    code, out, err = _cli(
        capsys, "watch", f"mlflow:experiment/{name}", "--tracking-uri", mlflow_server.uri,
        "--loss-col", "val_loss", "-t", "3.5", "3.3", "--every", "5", "--cache-dir", tmp_path,
    )
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("pass ")]
    assert lines == [
        "pass 1: 2 annotated; 1 still running",
        "pass 2: 2 unchanged; 1 still running",
        "pass 3: 1 unchanged, 1 annotated; 0 still running",
    ]
    assert "every run has finished" in err and passes == [300.0, 300.0]  # stopped by itself
    # The run the last pass left unchanged shows the numbers of its annotation, read back
    # from the server, with unchanged as its action (not instead of them).
    unchanged = [re.split(r"\s{2,}", line) for line in out.splitlines()[1:] if "  unchanged  " in line]
    assert len(unchanged) == 2 and all(row[3] != "-" for row in unchanged), out
    assert any(row[4] != "-" for row in unchanged), out  # a reached target's tokens
    run = client.get_run(live)
    assert run.info.status == "FINISHED"
    provenance = json.loads(run.data.tags["loss_eta"])
    assert provenance["progress"].startswith(f"step {int(log['step'].iloc[-1])} latest ")
    assert provenance["last_step"] == log["step"].iloc[-1]
    assert client.get_run(done).data.tags["when_3p3"]


def test_watch_stops_after_max_cycles_with_runs_still_running(experiment, mlflow_server, capsys, monkeypatch, tmp_path):
    client, name, experiment_id = experiment
    log_run(client, experiment_id, pd.read_csv(EXAMPLES / "runs" / "olmo-ladder-370M-2xC.csv"), name="r",
            status="RUNNING")
    monkeypatch.setattr(time_module, "sleep", lambda seconds: None)
    code, out, err = _cli(
        capsys, "watch", f"mlflow:experiment/{name}", "--tracking-uri", mlflow_server.uri,
        "--loss-col", "val_loss", "-t", "3.3", "--max-cycles", "2", "--cache-dir", tmp_path,
    )
    assert code == 0 and "stopping after 2 passes" in err


# -- compare --------------------------------------------------------------------------------
def test_compare_on_the_mlflow_server_matches_the_csv_files(experiment, mlflow_server, capsys, tmp_path):
    client, name, experiment_id = experiment
    for arm in ARMS:
        log_csv(client, experiment_id, EXAMPLES / "runs" / f"{arm}.csv")
    png = tmp_path / "overlay.png"
    code, out, err = _cli(
        capsys, "compare", f"mlflow:experiment/{name}", "--tracking-uri", mlflow_server.uri,
        "--loss-col", "val_loss", "-t", "3.4", "3.3", "--json", "--plot", png, "--cache-dir", tmp_path,
    )
    assert code == 0, err
    tracked = json.loads(out)
    code, out, _ = _cli(
        capsys, "compare", *(EXAMPLES / "runs" / f"{arm}.csv" for arm in ARMS), "--loss-col", "val_loss",
        "-t", "3.4", "3.3", "--json",
    )
    files = json.loads(out)
    for from_mlflow, from_files in zip(tracked, files):
        assert [r["run"] for r in from_mlflow["rows"]] == [r["run"] for r in from_files["rows"]]
        for a, b in zip(from_mlflow["rows"], from_files["rows"]):
            assert a["status"] == b["status"] and a["batch_last"] == b["batch_last"]
            assert a["tokens"] == pytest.approx(b["tokens"], rel=1e-6, abs=0) if b["tokens"] else a["tokens"] is None
    assert png.read_bytes().startswith(b"\x89PNG")
    # compare reads only: nothing was written to the runs
    for run in client.search_runs([experiment_id]):
        assert not any(is_own(key) for key in {**run.data.tags, **run.data.metrics})


# -- the nightly examples -------------------------------------------------------------------
CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")


def _valid_cron(expression: str) -> bool:
    fields = expression.split()
    limits = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
    if len(fields) != 5 or not all(CRON_FIELD.match(f) for f in fields):
        return False
    numbers = [[int(n) for n in re.findall(r"\d+", f.split("/")[0])] for f in fields]
    return all(lo <= n <= hi for nums, (lo, hi) in zip(numbers, limits) for n in nums)


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """An sqlite store with MLflow's tables made once: making them takes seconds."""
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def pretraining(tmp_path, empty_store):
    """A local sqlite store with a 'pretraining' experiment of finished example runs."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("pretraining", artifact_location=(tmp_path / "artifacts").as_uri())
    for arm in ARMS[:2]:
        log_csv(client, experiment_id, EXAMPLES / "runs" / f"{arm}.csv")
    return client, uri, experiment_id


# The two finished arms at 3.3: one reached it, 190M-2xC finished its plan short of it.
FINISHED_ARMS = sorted([Status.REACHED, Status.NOT_REACHED], key=str)


def _annotated(client, experiment_id) -> list[Status | None]:
    """The status each run's 3.3 text says, sorted."""
    from tracker_plugin.report.target_text import target_status

    texts = (r.data.tags.get("when_3p3", "") for r in client.search_runs([experiment_id]))
    return sorted((target_status(text) for text in texts), key=str)


@pytest.mark.slow
def test_crontab_line_runs_as_cron_would_run_it(tmp_path, pretraining):
    client, _, experiment_id = pretraining
    (line,) = [row for row in (EXAMPLES / "scheduling" / "crontab").read_text().splitlines() if row and row[0] != "#"]
    fields = line.split(None, 5)
    assert _valid_cron(" ".join(fields[:5]))
    # cron runs the command with /bin/sh, HOME set and a minimal PATH; the checkout is $HOME/tracker_plugin
    (tmp_path / "tracker_plugin" / ".venv").mkdir(parents=True)
    (tmp_path / "tracker_plugin" / ".venv" / "bin").symlink_to(BIN)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(["/bin/sh", "-c", fields[5]], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "tracker-plugin.log").read_text()
    assert "olmo-ladder-190M-2xC" in log and "Traceback" not in log
    assert _annotated(client, experiment_id) == FINISHED_ARMS


def _run_container_args(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    # Everything but the install step, which needs the package on PyPI.
    command = re.sub(r"^pip install [^&]*&&\s*", "", command.strip())
    full = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": env.get("HOME", "/tmp"), **env}
    return subprocess.run(["/bin/sh", "-c", command], env=full, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_kubernetes_cronjob_manifest_and_its_command(tmp_path, pretraining):
    client, uri, experiment_id = pretraining
    manifest = yaml.safe_load((EXAMPLES / "scheduling" / "kubernetes-cronjob.yaml").read_text())
    assert manifest["apiVersion"] == "batch/v1" and manifest["kind"] == "CronJob"
    spec = manifest["spec"]
    assert _valid_cron(spec["schedule"]) and spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in {"Never", "OnFailure"}
    (container,) = pod["containers"]
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts <= {v["name"] for v in pod["volumes"]}
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    assert "secretKeyRef" in json.dumps(container["env"])  # the API key comes from a secret
    env.update(SOURCE="mlflow:experiment/pretraining", LOSS_KEY="val_loss", MLFLOW_TRACKING_URI=uri)
    (tmp_path / "cache").mkdir()
    command = " ".join(container["args"]).replace("/cache", str(tmp_path / "cache"))
    done = _run_container_args(command, env)
    assert done.returncode == 0, done.stderr
    assert _annotated(client, experiment_id) == FINISHED_ARMS


@pytest.mark.slow
def test_github_actions_workflow_and_its_annotate_step(tmp_path, pretraining):
    client, uri, experiment_id = pretraining
    workflow = yaml.safe_load((EXAMPLES / "scheduling" / "github-actions-annotate.yml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert _valid_cron(triggers["schedule"][0]["cron"]) and "workflow_dispatch" in triggers
    job = workflow["jobs"]["annotate"]
    steps = {step.get("name", step.get("uses")): step for step in job["steps"]}
    assert "pip install" in steps["Install"]["run"]
    env = {k: str(v) for k, v in job["env"].items() if "${{" not in str(v)}
    env.update(SOURCE="mlflow:experiment/pretraining", LOSS_KEY="val_loss", MLFLOW_TRACKING_URI=uri,
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    script = steps["Annotate finished runs"]["run"]
    done = subprocess.run(["/bin/bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), **env})
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "annotate.json").read_text())
    assert {r["run"] for r in rows} == set(ARMS[:2])
    assert steps["Keep the summary"]["with"]["path"] == "annotate.json"
    assert _annotated(client, experiment_id) == FINISHED_ARMS
