"""The MLflow server goes away in the middle of a many-run annotate, then comes back.

The test stops the session's server and starts it again (``stoppable_mlflow_server``);
a restarted server keeps its port and data, as it does for a user.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tracker_plugin.cli import main
from tracker_plugin.testing import synthetic_run
from tracker_plugin.testing.mlflow_runs import log_run
from tracker_plugin.testing.mlflow_server import MlflowServer

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
TARGETS = ("5.5", "4.0")
MARKERS = ("loss_eta/settings_hash", "loss_eta/progress")


def annotate(capsys, server: MlflowServer, experiment: str, cache_dir) -> tuple[int, list[dict], str]:
    capsys.readouterr()
    code = main([
        "annotate", f"mlflow:experiment/{experiment}", "-t", *TARGETS, "--workers", "1", "--json",
        "--tracking-uri", server.uri, "--cache-dir", str(cache_dir),
    ])  # fmt: skip
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def annotated_keys(client, run_id: str) -> set[str]:
    data = client.get_run(run_id).data
    return {k for k in [*data.metrics, *data.tags] if k.startswith("loss_eta/")}


def test_server_stopped_mid_annotate_then_restarted(stoppable_mlflow_server, tmp_path, capsys, monkeypatch):
    server = stoppable_mlflow_server
    # Retry at once: how long a dead server takes to give up on is tested in test_mlflow.py.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    name = f"faults-{uuid.uuid4().hex[:8]}"
    client = MlflowClient(server.uri)
    experiment = client.create_experiment(name)
    ids = [
        log_run(client, experiment, synthetic_run(300, batch=4_194_304.0, seed=k), name=f"run{k}")
        for k in range(4)
    ]
    capsys.readouterr()

    # Runs go one at a time (--workers 1), each uploading two artifacts. The server
    # stops when the third run starts its uploads: after its metrics were written,
    # before the tags that mark an annotation complete.
    uploads = []
    original = MlflowClient.log_artifact

    def log_artifact(self, *args, **kwargs):
        uploads.append(args)
        if len(uploads) == 5:
            server.stop()
        return original(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(MlflowClient, "log_artifact", log_artifact)
        code, rows, err = annotate(capsys, server, name, tmp_path / "cache")

    assert code == 1 and "Traceback" not in err
    actions = {row["ref"]: row["action"] for row in rows}
    assert actions == {
        f"mlflow:{ids[0]}": "annotated", f"mlflow:{ids[1]}": "annotated",
        f"mlflow:{ids[2]}": "failed", f"mlflow:{ids[3]}": "failed",
    }  # fmt: skip
    notes = {row["note"] for row in rows if row["action"] == "failed"}
    assert notes == {f"the MLflow tracking server {server.uri} is not answering (connection refused)"}

    server.start()
    complete = annotated_keys(client, ids[0])
    assert set(MARKERS) <= complete and "loss_eta/target_4p00/tokens" in complete
    assert annotated_keys(client, ids[1]) == complete
    assert {a.path for a in client.list_artifacts(ids[1])} == {"loss_eta.json", "loss_eta.png"}
    cut_short = annotated_keys(client, ids[2])
    assert "loss_eta/target_4p00/tokens" in cut_short and not set(MARKERS) & cut_short
    assert annotated_keys(client, ids[3]) == set()

    code, rows, _ = annotate(capsys, server, name, tmp_path / "cache")
    assert code == 0
    assert [row["action"] for row in rows if row["target"] in (None, 5.5)] == [
        "unchanged", "unchanged", "annotated", "annotated",
    ]  # fmt: skip
    for run_id in ids:
        assert annotated_keys(client, run_id) == complete
        assert {a.path for a in client.list_artifacts(run_id)} == {"loss_eta.json", "loss_eta.png"}
        assert client.get_run(run_id).info.status == "FINISHED"
