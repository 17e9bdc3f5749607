"""MLflow: what is particular to MLflow runs and stores.

What every source must do (read what was logged, write only the annotation, once, and
redo a write cut short) is in the adapter contract suite, ``test_contract.py``, which runs
over MLflow's local store and a real ``mlflow server`` too. Here: MLflow's own step and
timestamps, params, paging, the cache, MLflow's errors and the REST calls the plugin
makes itself. Tests that depend on the transport run against a real ``mlflow server``
process (started once per session) and a local sqlite store; the fault tests, which stop
a server, are in ``test_mlflow_faults.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.doubles.mlflow_runs import log_frame, log_run
from tests.doubles.mlflow_server import MlflowServer, free_port
from tracker_plugin import AnalysisConfig, Columns, DataError, build_history
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import run_analysis
from tracker_plugin.core.status import Status
from tracker_plugin.jobs.annotation import build_annotation, settings_of
from tracker_plugin.keys import KEY_PATTERN, SERIES, SERIES_LOSS
from tracker_plugin.report.target_text import target_status
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, mlflow_client, mlflow_points
from tracker_plugin.trackers.mlflow_runs import MlflowSource

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
MLFLOW_KEY = re.compile(r"^[/\w.\- :]{1,250}$")
TARGETS = ("5.5", "4.0", "0.5")  # reached, forecast_beyond_plan, unreachable on the runs below


@dataclass
class Tracking:
    """One place runs live in for a test: its URI, a client, and a fresh experiment."""

    uri: str
    client: object
    experiment_id: str
    experiment: str
    server: MlflowServer | None
    tmp: Path

    def log(self, frame: pd.DataFrame, name: str = "run", **kwargs) -> str:
        return log_run(self.client, self.experiment_id, frame, name=name, **kwargs)

    def source(self, spec: str, **options) -> MlflowSource:
        options.setdefault("cache_dir", str(self.tmp / "cache"))
        return MlflowSource(spec.removeprefix("mlflow:"), ReadOptions(**options), MlflowOptions(tracking_uri=self.uri))

    def cli(self, capsys, command: str, *args: str) -> tuple[int, str, str]:
        capsys.readouterr()  # drop what logging the runs printed
        code = main(
            [command, *map(str, args), "--tracking-uri", self.uri, "--cache-dir", str(self.tmp / "cache")]
        )
        out, err = capsys.readouterr()
        return code, out, err


def make_tracking(request, tmp_path, kind: str) -> Tracking:
    server = request.getfixturevalue("mlflow_server") if kind == "server" else None
    uri = server.uri if server else request.getfixturevalue("sqlite_store")
    client = MlflowClient(uri)
    name = f"test-{uuid.uuid4().hex[:10]}"
    # Artifacts of a local store go under the test's temp dir, never the working directory.
    location = None if server else (tmp_path / "artifacts").as_uri()
    experiment_id = client.create_experiment(name, artifact_location=location)
    return Tracking(uri, client, experiment_id, name, server, tmp_path)


@pytest.fixture(params=["server", "sqlite"])
def tracking(request, tmp_path) -> Tracking:
    """A fresh experiment on the session's mlflow server, then on the local sqlite store."""
    return make_tracking(request, tmp_path, request.param)


@pytest.fixture
def local(request, tmp_path) -> Tracking:
    """The local store only: for behaviour that does not depend on the transport."""
    return make_tracking(request, tmp_path, "sqlite")


@pytest.fixture
def served(request, tmp_path) -> Tracking:
    """The server only: for what only a server shows (pages, its access log)."""
    return make_tracking(request, tmp_path, "server")


def training_log(steps: int = 400, seed: int = 0) -> pd.DataFrame:
    """A run whose smoothed loss crosses 5.5, heads for 4.0 and never reaches 0.5 (L0 = 2)."""
    return synthetic_run(steps, batch=4_194_304.0, seed=seed)


def snapshot(tracking: Tracking, run_id: str) -> dict:
    """Everything about a run that annotating could change."""
    client = tracking.client
    run = client.get_run(run_id)
    rows = {key: len(client.get_metric_history(run_id, key)) for key in run.data.metrics}
    artifacts = {}
    folders: list[str | None] = [None]
    while folders:
        for info in client.list_artifacts(run_id, folders.pop()):
            if info.is_dir:
                folders.append(info.path)
                continue
            target = tracking.tmp / "downloads" / uuid.uuid4().hex
            artifacts[info.path] = Path(
                client.download_artifacts(run_id, info.path, str(target))
            ).read_bytes()
    return {
        "status": run.info.status,
        "end_time": run.info.end_time,
        "params": dict(run.data.params),
        "tags": dict(run.data.tags),
        "metrics": {key: _nan_safe(value) for key, value in run.data.metrics.items()},
        "rows": rows,
        "artifacts": artifacts,
    }


def _nan_safe(value: float) -> float | str:
    return "nan" if math.isnan(value) else value


# -- reading ---------------------------------------------------------------------------------


def test_read_aligns_keys_on_step_and_the_latest_timestamp_wins(tracking):
    log = training_log(300)
    log["lr"] = log["lr"].where(log["step"] % 10 == 0)  # lr logged every 10 steps only
    log["loss_text"] = log["train_loss"].map(repr).astype(object)
    log.loc[log["step"] == 250, "loss_text"] = "nan"  # a diverged step, logged as NaN
    log.loc[log["step"] == 260, "loss_text"] = "inf"
    first = log[log["step"] < 200].copy()
    resumed = log[log["step"] >= 150].copy()
    resumed["loss_text"] = resumed["loss_text"].map(
        lambda v: v if v in ("nan", "inf") else repr(float(v) + 0.25)
    )
    run_id = tracking.client.create_run(tracking.experiment_id, run_name="resumed").info.run_id
    keys = ["tokens", "global_batch", "lr", "loss_text"]
    t0 = int(time.time() * 1000)
    log_frame(tracking.client, run_id, first, keys=keys, start_ms=t0)
    # The restart from the step-150 checkpoint logs steps 150..199 again, later.
    log_frame(tracking.client, run_id, resumed, keys=keys, start_ms=t0 + 10_000)
    tracking.client.set_terminated(run_id)

    source = tracking.source(f"mlflow:{run_id}", columns=Columns().with_overrides(loss="loss_text"))
    history = source.read(source.runs()[0])

    expected_frame = pd.concat([first[first["step"] < 150], resumed])[["step", *keys]]
    expected = build_history(
        expected_frame.assign(loss_text=pd.to_numeric(expected_frame["loss_text"], errors="coerce")),
        run="expected",
        columns=Columns().with_overrides(loss="loss_text"),
        logged_nan_loss=(expected_frame["loss_text"] == "nan").to_numpy(),
    )
    for name in ("step", "tokens", "batch", "loss", "lr"):
        np.testing.assert_allclose(getattr(history, name), getattr(expected, name), rtol=1e-12, err_msg=name)
    assert history.loss[history.step == 180][0] == pytest.approx(float(log.loc[180, "train_loss"]) + 0.25)
    assert 250 not in history.step and 260 not in history.step
    assert any("dropped 2 rows whose loss was NaN or infinite" in note for note in history.notes)
    assert history.loss_key == "loss_text" and history.batch_source == "column 'global_batch'"


def test_batch_from_a_run_param(local):
    run_id = local.log(
        training_log().drop(columns=["global_batch", "tokens"]), params={"global_batch_size": 4194304}
    )
    source = local.source(f"mlflow:{run_id}")
    history = source.read(source.runs()[0])
    assert set(history.batch) == {4194304.0}
    assert history.batch_source == "param 'global_batch_size'"
    assert history.tokens[-1] == 399 * 4194304.0


def test_a_batch_param_that_looks_like_sequences_gets_a_note(local):
    frame = training_log().drop(columns=["global_batch", "tokens"])
    run_id = local.log(frame, params={"global_batch_size": 512, "batch_size": 4194304})
    source = local.source(f"mlflow:{run_id}")
    history = source.read(source.runs()[0])
    assert history.batch_source == "param 'global_batch_size'" and set(history.batch) == {512.0}
    assert any("512 from param 'global_batch_size' is read as tokens per step" in n for n in history.notes)
    # A per-device `batch_size` is not read unless named; a tokens-sized param has no note.
    plain = local.log(frame, params={"batch_size": 8})
    source = local.source(f"mlflow:{plain}", batch_size=2048.0 * 512)
    history = source.read(source.runs()[0])
    assert history.batch_source == "batch_size" and not any("sequences" in n for n in history.notes)


def test_planned_lr_schedule_is_read_from_params(local):
    params = {"lr_scheduler": "cosine", "optimizer.lr": "3e-4", "min_lr": "3e-5", "warmup_steps": "100",
              "max_steps": "5000", "seed": "1"}  # fmt: skip
    run_id = local.log(training_log(50), params=params)
    source = local.source(f"mlflow:{run_id}")
    plan = source.read(source.runs()[0]).lr_plan
    assert plan.source == "params" and plan.total_steps == 5000
    np.testing.assert_allclose(plan.at([0, 100, 5000, 6000]), [0, 1, 0.1, 0.1], atol=1e-12)
    other = local.source(f"mlflow:{local.log(training_log(50), params={'seed': '1'})}")
    assert other.read(other.runs()[0]).lr_plan is None
    broken = local.source(f"mlflow:{local.log(training_log(50), params={'lr_schedule': 'cosine:total=x'})}")
    with pytest.raises(DataError, match="planned lr schedule in its params does not parse"):
        broken.read(broken.runs()[0])


@pytest.mark.parametrize(
    ("params", "said"),
    [({"training.steps": "lots", "lr_scheduler.decay_type": "cosine", "lr_scheduler.warmup_steps": "10"},
      "torchtitan param training.steps='lots' is not a number: ignored"),
     ({"max_duration": "3ep", "scheduler.t_warmup": "10", "model.max_sequence_length": "64",
       "optimizer.learning_rate": "1e-3"}, "OLMo max_duration='3ep' gives no step count")],
)
def test_params_that_plan_no_lr_still_say_why_in_the_report(local, capsys, params, said):
    """A trainer's config whose planned total does not parse gives no plan at all: the note
    saying so reaches the report (the lr is then inferred from the log)."""
    run_id = local.log(training_log(50), params=params)
    source = local.source(f"mlflow:{run_id}")
    history = source.read(source.runs()[0])
    assert history.lr_plan is None and any(said in note for note in history.notes)
    code, out, _ = local.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "5.5")
    assert code == 0
    (line,) = [line for line in out.splitlines() if said in line]
    assert line.startswith("note: ")


def test_history_pages_are_all_read(served, monkeypatch):
    monkeypatch.setattr(mlflow_client, "_PAGE", 7)
    run_id = served.log(training_log(50))
    source = served.source(f"mlflow:{run_id}", use_cache=False)
    mark = served.server.mark()
    history = source.read(source.runs()[0])
    assert list(history.step) == list(range(50))
    assert served.server.requests_since(mark, "/metrics/get-history") == 4 * 8  # 4 keys x ceil(50 / 7) pages


# -- writing back ------------------------------------------------------------------------------


def test_annotate_logs_a_finished_runs_numbers_at_step_0_with_keys_mlflow_takes(local, capsys):
    # What the contract suite (tests/test_contract.py) does not: an experiment's runs, the
    # metrics' step (0 for a finished run: MLflow draws a bar, not a one-dot chart), the
    # summary table, and keys valid in both trackers.
    ids = [local.log(training_log(), name="a"), local.log(training_log(seed=1), name="b")]
    before = {run_id: snapshot(local, run_id) for run_id in ids}
    code, out, err = local.cli(capsys, "annotate", f"mlflow:experiment/{local.experiment}", "-t", *TARGETS)
    assert code == 0, err
    header, *rows = out.splitlines()
    column = header.split().index("status")
    statuses = sorted(line.split()[column] for line in rows)  # the table's status column
    # The lr held as logged, no planned end: 4.0 is forecast beyond the plan; 0.5 under L0 = 2
    # (and under what a law fitted to 400 steps, free to put its floor at 0, reaches in 20x the run).
    assert statuses == [Status.FORECAST_BEYOND_PLAN] * 2 + [Status.REACHED] * 2 + [Status.UNREACHABLE] * 2
    for run_id in ids:
        after, was = snapshot(local, run_id), before[run_id]
        written = (set(after["metrics"]) | set(after["tags"])) - set(was["metrics"]) - set(was["tags"])
        assert written and all(KEY_PATTERN.match(k) and MLFLOW_KEY.match(k) for k in written)
        for key in set(after["metrics"]) - set(was["metrics"]) - set(SERIES):
            assert [m.step for m in local.client.get_metric_history(run_id, key)] == [0], key
        smoothed = local.client.get_metric_history(run_id, SERIES_LOSS)  # at the run's own steps, up to its last
        assert 2 < len(smoothed) <= 400 and max(m.step for m in smoothed) == 399
        assert (after["status"], after["end_time"]) == ("FINISHED", was["end_time"])


def test_a_changed_setting_reannotates_in_place(local, capsys):
    run_id = local.log(training_log())
    assert local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", "5.5")[0] == 0
    rows = snapshot(local, run_id)["rows"]["when_5p5_Btok"]
    assert local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", "5.5", "--ema-token-window", "5e8")[0] == 0
    after = snapshot(local, run_id)
    assert after["rows"]["when_5p5_Btok"] == rows + 1  # a new value at the same step
    assert json.loads(after["tags"]["loss_eta"])["settings"]["ema_token_window"] == 5e8
    assert json.loads(after["artifacts"]["loss_eta.json"])["ema_token_window"] == 5e8


@pytest.mark.parametrize("other", [-1.0, 1.0])
def test_a_series_point_tied_with_another_jobs_is_judged_as_mlflow_judges_the_latest(local, capsys, other):
    # Two jobs that read a run at once log at the same timestamp; MLflow's latest value at
    # a step is then the larger one. A point of ours that is the latest is not logged again;
    # one that lost the tie is.
    from mlflow.entities import Metric

    run_id = local.log(training_log(), name="r")
    assert local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)[0] == 0
    ours = local.client.get_metric_history(run_id, SERIES_LOSS)
    tied = [Metric(SERIES_LOSS, m.value + other, m.timestamp, m.step) for m in ours]
    local.client.log_batch(run_id, metrics=tied)
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--force", "--dry-run")
    assert code == 0
    new = int(re.search(r"^  series: ([0-9,]+) new points", out, re.M).group(1).replace(",", ""))
    assert new == (len(ours) if other > 0 else 0), out


def test_dry_run_says_what_it_would_change_and_why(local, capsys):
    run_id = local.log(training_log(), name="r")
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--dry-run")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"r (mlflow:{run_id}): would annotate: no annotation yet"
    assert lines[1] == f"  to: metrics at step 0, tags and artifacts loss_eta.json, loss_eta.png of mlflow:{run_id}"
    assert re.match(r"  series: \d+ new points of loss_eta_smoothed, loss_eta_tokens, at the run's own steps$", lines[2])
    assert re.search(r"^  when_5p5_Btok +\(none\) → [0-9.]+$", out, re.M)
    assert local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)[0] == 0
    # Then a target dropped and one added: the action and why, each changed key from its old
    # value to its new one, the dropped target's text going stale; no JSON text.
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", "5.5", "4.0", "4.5", "--dry-run")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"r (mlflow:{run_id}): would redo: targets +4.5 −0.5"
    assert "  series: 0 new points of loss_eta_smoothed, loss_eta_tokens, at the run's own steps" in lines
    assert re.search(r"^  when_0p5 +'✗ [^']+ · unreachable · [^']*' → 'stale'$", out, re.M), out
    assert re.search(r"^  when_4p5 +\(none\) → '[✓≈→✗–] [^']+'$", out, re.M), out
    assert "  stale: target 0.5 (its numbers cleared, its text set to stale)" in lines
    assert re.search(r"^  loss_eta +settings [0-9a-f]+ → [0-9a-f]+; report [0-9a-f]+ → [0-9a-f]+$", out, re.M)
    assert "{" not in out and len(out) < 2000
    # --json: each key's old and new value whole, the provenance's JSON text among them.
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", "5.5", "4.0", "4.5", "--dry-run", "--json")
    rows = json.loads(out)
    changes = rows[0]["would_write"]
    assert changes["when_0p5"]["new"] == "stale" and json.loads(changes["loss_eta"]["new"])["settings"]["targets"] == [5.5, 4.0, 4.5]
    assert snapshot(local, run_id)["tags"]["when_0p5"] == changes["when_0p5"]["old"]  # nothing written


def test_experiment_id_filter_and_a_running_run(tracking, capsys):
    done = tracking.log(training_log(), name="done")
    running = tracking.log(training_log(seed=2), name="running", status="RUNNING")
    code, out, _ = tracking.cli(
        capsys,
        "annotate",
        "--experiment-id",
        tracking.experiment_id,
        "--filter",
        "attributes.status = 'FINISHED'",
        "-t",
        "5.5",
        "--json",
    )
    assert code == 0
    assert {row["ref"] for row in json.loads(out)} == {f"mlflow:{done}"}
    code, out, _ = tracking.cli(
        capsys, "annotate", "--experiment-id", tracking.experiment_id, "-t", "5.5", "--json"
    )
    assert code == 0
    # The finished run is annotated once more, to keep its evidence for the running run's
    # project law (it had no running sibling before); then both are current.
    assert {row["ref"]: row["action"] for row in json.loads(out)} == {
        f"mlflow:{done}": "annotated",
        f"mlflow:{running}": "annotated",
    }
    code, out, _ = tracking.cli(capsys, "annotate", "--experiment-id", tracking.experiment_id, "-t", "5.5", "--json")
    assert {row["action"] for row in json.loads(out)} == {"unchanged"}
    run = tracking.client.get_run(running)
    assert run.info.status == "RUNNING" and run.info.end_time is None
    assert json.loads(run.data.tags["loss_eta"])["progress"].startswith("step 399 latest ")


def test_a_write_cut_short_is_redone(local, capsys, monkeypatch):
    run_id = local.log(training_log())
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import TEMPORARILY_UNAVAILABLE

    def refuse(*args, **kwargs):
        raise MlflowException("artifact store unavailable", error_code=TEMPORARILY_UNAVAILABLE)

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "log_artifact", refuse)
        code, out, err = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)
    assert code == 1 and "Traceback" not in err
    assert "the MLflow server failed: artifact store unavailable" in out
    tags = local.client.get_run(run_id).data.tags
    assert "loss_eta_marker" not in tags  # not marked complete
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)
    assert code == 0 and "unchanged" not in out
    after = snapshot(local, run_id)
    assert {"loss_eta.json", "loss_eta.png"} <= set(after["artifacts"])
    assert json.loads(after["tags"]["loss_eta"])["progress"].startswith("step 399 latest ")


def test_the_plot_artifact_is_titled_by_the_run_name(local, capsys):
    run_id = local.log(training_log(), name="lr3e-4-arm")
    code, _, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)
    assert code == 0
    import io

    from PIL import Image

    with Image.open(io.BytesIO(snapshot(local, run_id)["artifacts"]["loss_eta.png"])) as png:
        title = png.text["Title"]
    assert title.startswith(f"lr3e-4-arm  (mlflow:{run_id})")


# -- cache ---------------------------------------------------------------------------------------


def test_a_cached_reanalysis_reads_no_history_from_the_server(tracking, capsys):
    done = tracking.log(training_log(), name="done")
    running = tracking.log(training_log(seed=3), name="running", status="RUNNING")
    server = tracking.server
    for run_id, cached in ((done, True), (running, False)):
        first = tracking.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "5.5", "--json")
        mark = server.mark() if server else 0
        second = tracking.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "5.5", "--json")
        assert first[0] == second[0] == 0 and first[1] == second[1]
        if server:
            assert server.requests_since(mark, "/metrics/get-history") == (0 if cached else 4)
    if server:
        mark = server.mark()
        assert tracking.cli(capsys, "analyze", f"mlflow:{done}", "-t", "5.5", "--no-cache")[0] == 0
        assert server.requests_since(mark, "/metrics/get-history") == 4
    # A corrupt entry is a miss: read again, and replaced.
    for entry in (tracking.tmp / "cache" / "histories").glob("*.npz"):
        entry.write_bytes(b"not a zip file")
    code, out, _ = tracking.cli(capsys, "analyze", f"mlflow:{done}", "-t", "5.5", "--json")
    assert code == 0 and json.loads(out)["observed"]["step"] == 399
    assert all(entry.stat().st_size > 1000 for entry in (tracking.tmp / "cache" / "histories").glob("*.npz"))
    # A valid npz with the wrong arrays (another layout, lengths that disagree) is dropped
    # and fetched again, not a ValueError every time.
    for entry in (tracking.tmp / "cache" / "histories").glob("*.npz"):
        with np.load(entry) as stored:
            arrays = {name: stored[name] for name in stored.files}
        arrays["0.value"] = arrays["0.value"][:-5]
        np.savez(entry, **arrays)
    for _ in range(2):
        code, again, err = tracking.cli(capsys, "analyze", f"mlflow:{done}", "-t", "5.5", "--json")
        assert code == 0 and again == out and "Traceback" not in err


# -- errors ----------------------------------------------------------------------------------------


def one_line_error(result: tuple[int, str, str]) -> str:
    code, _, err = result
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_error_bad_run_id(tracking, capsys):
    err = one_line_error(
        tracking.cli(capsys, "analyze", "mlflow:0123456789abcdef0123456789abcdef", "-t", "3")
    )
    assert err == f"error: mlflow:0123456789abcdef0123456789abcdef: no such run at {tracking.uri}"
    err = one_line_error(tracking.cli(capsys, "annotate", "mlflow:not-a-run", "-t", "3"))
    assert "mlflow:not-a-run: no such run" in err


def test_error_missing_keys(tracking, capsys):
    run_id = tracking.log(pd.DataFrame({"step": range(10), "accuracy": np.linspace(0, 1, 10)}))
    err = one_line_error(tracking.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "3"))
    assert err == (
        f"error: mlflow:{run_id}: no loss metric 'train_loss' or 'train/loss' or 'loss' or 'train/CrossEntropyLoss'; "
        "the run logs ['accuracy'] (choose one with --loss-col)"
    )
    err = one_line_error(
        tracking.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "3", "--loss-col", "val_loss")
    )
    assert "no loss metric 'val_loss'" in err


def test_error_no_loss_history(tracking, capsys):
    frame = pd.DataFrame({"step": [0, 1, 2], "train_loss": ["nan", "nan", "5.0"], "global_batch": [1024] * 3})
    run_id = tracking.log(frame.astype({"train_loss": object}))
    err = one_line_error(tracking.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "3"))
    assert err == (
        f"error: mlflow:{run_id}: column 'train_loss': has only one finite value; at least two logged steps are needed"
    )


def test_error_missing_batch(local, capsys):
    run_id = local.log(
        training_log(20).drop(columns=["global_batch", "tokens"]), params={"global_batch_size": "big"}
    )
    # No tokens to be had: the analysis works on steps and says which flags give tokens.
    code, out, _ = local.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", "3")
    assert code == 0
    # No trainer detected: only tokens per step or a tokens column would give tokens.
    assert "working on steps; pass --batch-size (tokens per step) or name the tokens column with --tokens-col" in out
    assert "tokens=" not in out


def test_error_unknown_experiment_and_bad_filter(tracking, capsys):
    err = one_line_error(tracking.cli(capsys, "annotate", "mlflow:experiment/no-such-experiment", "-t", "3"))
    assert err.startswith(
        "error: mlflow:experiment/no-such-experiment: no experiment named 'no-such-experiment'"
    )
    err = one_line_error(
        tracking.cli(
            capsys, "annotate", "--experiment-id", tracking.experiment_id, "--filter", "status ==", "-t", "3"
        )
    )
    assert err.startswith("error: --filter 'status ==': ")


def test_error_no_store_and_no_server(capsys, tmp_path):
    missing = tmp_path / "nothing" / "mlflow.db"
    err = one_line_error(
        _cli(capsys, "analyze", "mlflow:abc", "-t", "3", "--tracking-uri", f"sqlite:///{missing}")
    )
    assert f"no MLflow store at {missing}" in err
    assert not missing.exists()
    start = time.monotonic()
    dead = f"http://127.0.0.1:{free_port()}"
    err = one_line_error(_cli(capsys, "analyze", "mlflow:abc", "-t", "3", "--tracking-uri", dead))
    assert (
        err == f"error: mlflow:abc: the MLflow tracking server {dead} is not answering (connection refused)"
    )
    # MLflow alone would retry for minutes; the bounded retries give up in seconds.
    assert time.monotonic() - start < 30


def test_error_mlflow_not_installed(capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import mlflow now fails
    err = one_line_error(_cli(capsys, "analyze", "mlflow:abc", "-t", "3"))
    assert err == "error: mlflow is not installed; install it with: pip install 'tracker_plugin[mlflow]'"


def test_error_mlflow_skinny_without_the_sql_stores(tmp_path, local):
    # mlflow-skinny has no sqlalchemy, so MLflow registers no SQL store. Simulated in a fresh
    # process (MLflow registers its stores when first imported) by hiding sqlalchemy.
    store = local.uri
    script = (
        "import sys; sys.modules['sqlalchemy'] = None\n"
        "from tracker_plugin.cli import main\n"
        f"sys.exit(main(['analyze', 'mlflow:abc', '-t', '3', '--tracking-uri', {store!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        (
            f"error: mlflow ({store}): the sqlite store needs the full mlflow package, with its SQL stores "
            "(mlflow-skinny, the client-only install, has none); install it with: "
            "pip install 'tracker_plugin[mlflow]' (or: pip install mlflow)"
        )
    ]


def test_error_a_store_uri_mlflow_has_no_store_for(capsys, tmp_path):
    err = one_line_error(_cli(capsys, "analyze", "mlflow:abc", "-t", "3", "--tracking-uri", "sqlit:///x.db"))
    assert err.startswith("error: mlflow (sqlit:///x.db): no MLflow tracking store for this URI (MLflow knows ")
    err = one_line_error(_cli(capsys, "analyze", "mlflow:abc", "-t", "3", "--tracking-uri", "htp://127.0.0.1:5000"))
    assert err.startswith("error: mlflow (htp://127.0.0.1:5000): no MLflow tracking store for this URI")


@pytest.mark.parametrize("uri", ["file:///tmp/mlruns", "./mlruns", "http//127.0.0.1:5000"])
def test_error_a_file_store_is_refused_in_one_line(capsys, uri):
    err = one_line_error(_cli(capsys, "annotate", "mlflow:abc", "-t", "3", "--tracking-uri", uri))
    assert err.startswith(f"error: mlflow ({uri}): not a tracking server or database store; MLflow's file store")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


# -- pure parts ------------------------------------------------------------------------------------


def test_a_logged_infinity_is_read_back_as_infinity():
    # MLflow stores +-inf as +-the largest float.
    restored = mlflow_points._restore_infinity(np.array([1.0, 1.7976931348623157e308, -1.7976931348623157e308]))
    assert list(restored) == [1.0, np.inf, -np.inf]


def test_annotation_keys_fit_one_log_batch():
    from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH, MAX_TAG_VAL_LENGTH

    history = build_history(training_log(), run="r")
    config = AnalysisConfig(targets=tuple(np.linspace(3, 7, 10)))
    annotation = build_annotation(run_analysis(history, config), settings_of(config, Columns(), None))
    assert (
        len(annotation.metrics) <= MAX_METRICS_PER_BATCH
        and len(annotation.labels) <= MAX_PARAMS_TAGS_PER_BATCH
    )
    assert max(map(len, annotation.labels.values())) <= MAX_TAG_VAL_LENGTH


# -- the REST calls the plugin makes itself ---------------------------------------------------


class _Recorder:
    """A stand-in tracking server: answers get-history from a script of (status, body, delay)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[dict] = []
        self.script: list[tuple[int, dict | str, float]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # the http.server API
                recorder.requests.append({"path": self.path, "headers": dict(self.headers)})
                status, body, delay = recorder.script.pop(0) if recorder.script else (200, {}, 0.0)
                time.sleep(delay)
                payload = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # A client that timed out has gone by the time a slow answer is written: not an error here.
        self.httpd.handle_error = lambda request, address: None
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def recorder():
    server = _Recorder()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def _points(steps) -> dict:
    return {"metrics": [{"key": "loss", "value": 1.0 / (s + 1), "timestamp": 1000 + s, "step": s} for s in steps]}


def test_rest_reads_carry_the_documented_credentials_and_never_set_them(recorder, monkeypatch):
    from tracker_plugin.trackers.mlflow_rest import metric_history, rest_target

    before = dict(os.environ)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123")
    target = rest_target(recorder.uri, timeout=5, retries=0)
    recorder.script = [(200, {**_points([0, 1]), "next_page_token": "p2"}, 0.0), (200, _points([2]), 0.0)]
    step, value, stamp = metric_history(target, "run1", "loss", page_size=2)
    assert list(step) == [0, 1, 2] and list(stamp) == [1000, 1001, 1002] and value[2] == pytest.approx(1 / 3)
    first, second = recorder.requests
    assert first["headers"]["Authorization"] == "Bearer tok-123" and first["headers"]["Connection"] == "close"
    assert "max_results=2" in first["path"] and "page_token=p2" in second["path"]
    # username and password take precedence, as in MLflow
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ada")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    assert rest_target(recorder.uri, timeout=5, retries=0).headers["Authorization"] == "Basic YWRhOnMzY3JldA=="
    monkeypatch.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
    assert rest_target(recorder.uri, timeout=5, retries=0).verify is False
    # auth only MLflow's client can do, or a store that is not a server: read through the client
    assert rest_target("sqlite:///x.db", timeout=5, retries=0) is None
    monkeypatch.setenv("MLFLOW_TRACKING_AUTH", "my_auth_plugin")
    assert rest_target(recorder.uri, timeout=5, retries=0) is None
    monkeypatch.undo()
    assert dict(os.environ) == before


def test_rest_reads_retry_a_bounded_number_of_times_within_their_timeout(recorder, monkeypatch):
    from tracker_plugin.trackers import mlflow_rest
    from tracker_plugin.trackers.mlflow_rest import RestError, Unreachable, metric_history, rest_target

    monkeypatch.setattr(mlflow_rest, "_BACKOFF", 0.01)
    target = rest_target(recorder.uri, timeout=0.5, retries=2)
    recorder.script = [(503, "busy", 0.0), (200, _points([0]), 2.0), (200, _points([0, 1]), 0.0)]
    assert list(metric_history(target, "r", "loss", 10)[0]) == [0, 1]  # a 503, a timeout, then the answer
    assert len(recorder.requests) == 3
    recorder.script = [(500, "oops", 0.0)] * 3
    with pytest.raises(Unreachable, match="server errors"):
        metric_history(target, "r", "loss", 10)
    recorder.script = [(404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Run 'r' not found"}, 0.0)]
    with pytest.raises(RestError, match="Run 'r' not found"):  # not retried
        metric_history(target, "r", "loss", 10)
    assert len(recorder.requests) == 3 + 3 + 1
    dead = rest_target(f"http://127.0.0.1:{free_port()}", timeout=0.5, retries=1)
    with pytest.raises(Unreachable, match="connection refused"):
        dead.check_reachable()


def test_a_renamed_run_gets_its_plot_redrawn_and_nothing_else_is_written_twice(local, capsys):
    run_id = local.log(training_log(), name="arm-a")

    def annotate() -> str:
        code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--json")
        assert code == 0
        (row,) = {r["action"] for r in json.loads(out)}
        return row

    def title() -> str:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(snapshot(local, run_id)["artifacts"]["loss_eta.png"])) as png:
            return png.text["Title"]

    assert annotate() == "annotated" and title().startswith("arm-a  (")
    before = snapshot(local, run_id)
    assert annotate() == "unchanged"
    assert snapshot(local, run_id) == before  # nothing written
    local.client.update_run(run_id, name="arm-b")
    assert annotate() == "annotated"
    assert title().startswith(f"arm-b  (mlflow:{run_id})")
    renamed = snapshot(local, run_id)
    assert json.loads(renamed["tags"]["loss_eta"])["plot_sha256"] != json.loads(before["tags"]["loss_eta"])["plot_sha256"]
    assert annotate() == "unchanged"
    assert snapshot(local, run_id) == renamed


def test_a_plot_another_job_drew_is_redrawn(local, capsys, tmp_path):
    """After a race the picture can be another job's: its metadata names another report."""
    run_id = local.log(training_log(), name="arm")
    code, _, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS)
    assert code == 0
    ours = snapshot(local, run_id)["artifacts"]["loss_eta.png"]
    analysis = run_analysis(build_history(training_log(), run=f"mlflow:{run_id}"), AnalysisConfig(targets=(5.5,)))
    other = build_annotation(analysis, {"version": "other"}, run_name="arm").plot_bytes()
    (tmp_path / "loss_eta.png").write_bytes(other)
    local.client.log_artifact(run_id, str(tmp_path / "loss_eta.png"))
    code, out, _ = local.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--json")
    assert code == 0 and {r["action"] for r in json.loads(out)} == {"annotated"}
    redrawn = snapshot(local, run_id)["artifacts"]["loss_eta.png"]
    from tracker_plugin.trackers.base import png_text

    assert png_text(redrawn)["loss_eta_report_sha256"] == png_text(ours)["loss_eta_report_sha256"]
    assert png_text(other)["loss_eta_report_sha256"] != png_text(ours)["loss_eta_report_sha256"]


def test_a_run_whose_only_loss_is_an_eval_loss_is_read_on_it_and_says_so(local, capsys):
    run_id = local.log(training_log().rename(columns={"train_loss": "eval_loss"}), name="eval-only")
    code, out, err = local.cli(capsys, "analyze", f"mlflow:{run_id}", "-t", *TARGETS)
    assert code == 0, err
    assert "note: the only loss logged is the eval loss 'eval_loss': it is the loss read (name another with --loss-col)" in out
    # a run that logs a training loss too keeps it, the eval loss left aside
    both = local.log(training_log().assign(eval_loss=lambda f: f.train_loss + 0.1), name="both")
    code, out, _ = local.cli(capsys, "analyze", f"mlflow:{both}", "-t", *TARGETS)
    assert code == 0 and "only loss logged" not in out


def test_a_run_annotated_in_the_earlier_layout_is_moved_to_todays(tracking, capsys, tmp_path):
    """Keys and files an earlier version wrote (``loss_eta/...``): the run is annotated again,
    the old tags and files removed, the old numbers cleared, and the user's keys untouched."""
    from mlflow.entities import Metric, RunTag

    run_id = tracking.log(training_log(), name="old")
    client = tracking.client
    client.log_batch(
        run_id,
        metrics=[Metric("loss_eta/target_5p50/tokens", 1.2e9, 0, 399), Metric("loss_eta/last_step", 399.0, 0, 399)],
        tags=[RunTag("loss_eta/target_5p50/status", "extrapolated"), RunTag("loss_eta/settings_hash", "old"),
              RunTag("loss_eta/marker", "old"), RunTag("notes", "mine")],
    )  # fmt: skip
    old = tmp_path / "old" / "loss_eta.json"
    old.parent.mkdir()
    old.write_text("{}")
    client.log_artifact(run_id, str(old), artifact_path="loss_eta")
    code, out, _ = tracking.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--json")
    assert code == 0
    assert {r["action"] for r in json.loads(out)} == {"annotated"}
    after = snapshot(tracking, run_id)
    assert not [key for key in after["tags"] if key.startswith("loss_eta/")], after["tags"]
    assert after["tags"]["notes"] == "mine" and target_status(after["tags"]["when_5p5"]) == "reached"
    old_numbers = {k: v for k, v in after["metrics"].items() if k.startswith("loss_eta/")}
    assert old_numbers and all(v == "nan" for v in old_numbers.values()), old_numbers  # cleared: MLflow keeps NaN
    assert "loss_eta/loss_eta.json" not in after["artifacts"] and "loss_eta.json" in after["artifacts"]
    code, out, _ = tracking.cli(capsys, "annotate", f"mlflow:{run_id}", "-t", *TARGETS, "--json")
    assert code == 0 and {r["action"] for r in json.loads(out)} == {"unchanged"}


class _TokenDropper:
    """A proxy in front of the real server that answers the first ``drops`` pages of the
    loss's history without their next-page token, as a faulty gateway or server does."""

    def __init__(self, upstream: str, drops: int) -> None:
        import http.server
        import threading
        import urllib.request

        self.drops = drops
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _forward(self, body: bytes | None) -> None:
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                with urllib.request.urlopen(request, timeout=30) as answer:
                    payload = answer.read()
                    status = answer.status
                if "get-history" in self.path and "metric_key=train_loss" in self.path and proxy.drops > 0:
                    page = json.loads(payload)
                    if page.pop("next_page_token", None):
                        proxy.drops -= 1
                    payload = json.dumps(page).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # the http.server API
                self._forward(None)

            def do_POST(self):  # the http.server API
                self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("drops", [1, 100])
def test_a_history_page_without_its_next_page_token_is_read_again_or_reported(served, monkeypatch, capsys, drops):
    """A page that lost its token would end the read short, silently: the read checks each
    history against the run's latest value, reads a short one again, and fails with one
    line naming the key when it stays short."""
    monkeypatch.setattr(mlflow_client, "_PAGE", 7)
    run_id = served.log(training_log(50))
    proxy = _TokenDropper(served.uri, drops)
    try:
        source = MlflowSource(run_id, ReadOptions(use_cache=False), MlflowOptions(tracking_uri=proxy.uri))
        if drops == 1:
            history = source.read(source.runs()[0])
            assert list(history.step) == list(range(50))
        else:
            capsys.readouterr()
            code = main(["analyze", f"mlflow:{run_id}", "-t", "5.5", "--tracking-uri", proxy.uri, "--no-cache"])
            err = capsys.readouterr().err.strip()
            assert code != 0 and err.count("\n") == 0
            assert f"mlflow:{run_id}" in err and "ends at step 6, but the run's latest" in err and "try again" in err
    finally:
        proxy.close()
