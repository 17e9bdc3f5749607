"""Bulk jobs fanned out: threads, processes, a Dask LocalCluster and a local Ray instance.

Each executor annotates the same small experiment, on a local MLflow sqlite store and on
a real ``mlflow server``, as the serial job does: the same keys in every run, one failed
outcome for the run with no loss among the good ones. Two jobs at once on 4 Dask workers
leave every run consistent (the checks of tests/test_mlflow_faults.py). A server's
``Retry-After`` is honoured by the plugin's own reads; MLflow's client honours it itself.
"""

from __future__ import annotations

import email.utils
import http.server
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

import pytest

from tests.doubles.mlflow_runs import log_run
from tests.test_mlflow_faults import check
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import MissingDependency
from tracker_plugin.jobs.annotate import annotate_runs
from tracker_plugin.jobs.fanout import make_executor
from tracker_plugin.jobs.runner import outcome_rows, process_runs
from tracker_plugin.keys import is_own
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, open_source
from tracker_plugin.trackers.mlflow_rest import MAX_RETRY_AFTER, RestTarget, Unreachable, retry_after

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
CONFIG = AnalysisConfig(targets=(5.5, 4.0))
GOOD = 3


def experiment(uri: str, good: int = GOOD, steps: int = 300, artifacts: Path | None = None) -> tuple[str, list[str]]:
    """Runs with a loss and one without (it must fail, alone): the experiment's name and run
    ids. A local store's artifacts go to ``artifacts`` (MLflow's default is ./mlruns)."""
    client = MlflowClient(uri)
    name = f"fanout-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name, artifact_location=None if artifacts is None else artifacts.as_uri())
    ids = [
        log_run(client, experiment_id, synthetic_run(steps, batch=4_194_304.0, seed=k), name=f"run{k}")
        for k in range(good)
    ]
    broken = synthetic_run(50, seed=9).rename(columns={"train_loss": "something_else"})
    ids.append(log_run(client, experiment_id, broken, name="no-loss"))
    return name, ids


def options(uri: str, workers: int = 2) -> SourceOptions:
    return SourceOptions(ReadOptions(workers=workers, use_cache=False), MlflowOptions(tracking_uri=uri))


def own_keys(uri: str, run_id: str) -> dict[str, object]:
    """The run's keys of ours; a cleared number (NaN) as "nan", so that two can be compared."""
    record = MlflowClient(uri).get_run(run_id)
    keys: dict[str, object] = {k: "nan" if v != v else v for k, v in record.data.metrics.items() if is_own(k)}
    keys.update((k, v) for k, v in record.data.tags.items() if is_own(k))
    return keys


# Every executor with --all: each worker imports the package anew and starts its own
# cluster, so the fan-out checks take a minute or more.
@pytest.fixture(scope="module", params=["processes", "dask", "ray"])
def executor(request) -> Iterator[Executor]:
    """One executor of each kind with 2 workers, for the module."""
    if request.param == "dask":
        pytest.importorskip("distributed")
    if request.param == "ray":
        pytest.importorskip("ray")
    with make_executor(request.param, 2) as made:
        assert made is not None
        yield made


@pytest.fixture(params=["server", "sqlite"])
def store(request, mlflow_server, sqlite_store) -> str:
    return mlflow_server.uri if request.param == "server" else sqlite_store


@pytest.mark.slow
def test_every_executor_writes_what_the_serial_job_writes(store, executor, tmp_path):
    name, ids = experiment(store, artifacts=None if store.startswith("http") else tmp_path / "artifacts")
    spec = f"mlflow:experiment/{name}"
    serial = annotate_runs([spec], options(store, workers=1), CONFIG)
    expected = {run_id: own_keys(store, run_id) for run_id in ids[:GOOD]}
    fanned = annotate_runs([spec], options(store), CONFIG, force=True, executor=executor)
    # The same outcomes in the same order, one failure among them, naming the missing loss.
    assert [str(o.action) for o in serial] == ["annotated"] * GOOD + ["failed"]
    assert [str(o.action) for o in fanned] == ["annotated"] * GOOD + ["failed"]
    assert "no loss metric" in str(fanned[-1].error) and fanned[-1].run.name == "no-loss"
    assert [row.status for row in outcome_rows(fanned)] == [row.status for row in outcome_rows(serial)]
    assert [row.tokens for row in outcome_rows(fanned)] == [row.tokens for row in outcome_rows(serial)]
    # Rewritten with the same settings from the same history: every key exactly as before.
    assert {run_id: own_keys(store, run_id) for run_id in ids[:GOOD]} == expected
    assert all(check(MlflowClient(store), run_id, tmp_path)["consistent"] for run_id in ids[:GOOD])
    # Then nothing has changed: every good run is left alone, on every executor.
    again = annotate_runs([spec], options(store), CONFIG, executor=executor)
    assert [str(o.action) for o in again] == ["unchanged"] * GOOD + ["failed"]


@pytest.mark.slow
def test_the_command_line_fans_out_to_dask_with_one_table(mlflow_server, capsys, tmp_path):
    pytest.importorskip("distributed")
    name, ids = experiment(mlflow_server.uri, good=2)
    capsys.readouterr()  # MLflow's own lines while the runs were logged
    code = main([
        "annotate", f"mlflow:experiment/{name}", "-t", "5.5", "--executor", "dask", "--workers", "2",
        "--tracking-uri", mlflow_server.uri, "--no-cache", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err, (code, out[-2000:], err[-3000:])
    assert out.startswith("["), out[:3000]
    rows = json.loads(out)
    assert sorted((row["run"], row["action"]) for row in rows) == [
        ("no-loss", "failed"), ("run0", "annotated"), ("run1", "annotated")
    ]
    assert "no-loss" in err and "no loss metric" in err
    assert "INFO" not in err  # the local cluster's own logging stays out of a cron mail


@pytest.mark.slow
def test_watch_keeps_one_cluster_for_its_passes(mlflow_server, capsys):
    pytest.importorskip("distributed")
    name, ids = experiment(mlflow_server.uri, good=2)
    capsys.readouterr()
    code = main([
        "watch", f"mlflow:experiment/{name}", "-t", "5.5", "--executor", "dask", "--workers", "2",
        "--every", "0.001", "--max-cycles", "2", "--tracking-uri", mlflow_server.uri, "--no-cache", "--json",
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err
    assert "pass 1: 2 annotated, 1 failed" in err and "pass 2: 2 unchanged, 1 failed" in err, err
    assert sorted(row["action"] for row in json.loads(out)) == ["failed", "unchanged", "unchanged"]


def test_dask_address_is_for_the_dask_executor(capsys, tmp_path):
    code = main(["annotate", str(tmp_path), "-t", "3", "--dask-address", "tcp://127.0.0.1:1"])
    assert code == 2
    assert "--dask-address is for --executor dask" in capsys.readouterr().err


@pytest.mark.slow
def test_two_jobs_at_once_on_four_dask_workers_leave_every_run_consistent(mlflow_server, tmp_path):
    pytest.importorskip("distributed")
    client = MlflowClient(mlflow_server.uri)
    name, ids = experiment(mlflow_server.uri, good=6)
    configs = [CONFIG, AnalysisConfig(targets=(5.0,), ema_token_window=3e8)]
    outcomes: list = [None, None]
    with make_executor("dask", 4) as executor:

        def job(k: int) -> None:
            source = open_source(f"mlflow:experiment/{name}", options(mlflow_server.uri))
            try:
                outcomes[k] = process_runs(source, source.runs(), configs[k], write=True, executor=executor, progress=False)
            finally:
                source.close()

        threads = [threading.Thread(target=job, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    assert all(o is not None for o in outcomes)
    for out in outcomes:
        assert [str(o.action) for o in out] == ["annotated"] * 6 + ["failed"], [o.error for o in out]
    results = [check(client, run_id, tmp_path) for run_id in ids[:6]]
    assert [r["consistent"] for r in results] == [1] * 6, results
    assert all(r["relogs"] == 0 for r in results), results


@pytest.mark.parametrize(("kind", "module"), [("dask", "distributed"), ("ray", "ray")])
def test_a_missing_engine_names_the_extra_to_install(kind, module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # what an uninstalled package looks like to import
    with pytest.raises(MissingDependency, match=rf"pip install 'tracker_plugin\[{kind}\]'"):
        with make_executor(kind, 2):
            pass


# -- Retry-After ------------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates():
    now = time.time()
    assert retry_after("3") == 3.0
    assert retry_after(" 0.5 ") == 0.5
    assert retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0  # past: at once
    assert retry_after("86400") == MAX_RETRY_AFTER  # a job does not stall for a day
    assert retry_after(None) is None and retry_after("soon") is None and retry_after("nan") is None


class _Limited(http.server.BaseHTTPRequestHandler):
    """Answers 429 with ``Retry-After`` to the first request, then 200."""

    served: list[float] = []
    status = 429

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.served.append(time.monotonic())
        if len(self.served) == 1:
            self.send_response(self.status)
            self.send_header("Retry-After", "2")
            self.end_headers()
            return
        body = json.dumps({"metrics": [{"step": 1, "value": 2.0, "timestamp": 3}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        return None


def _serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class _Busy(http.server.BaseHTTPRequestHandler):
    """Answers ``status`` to the first ``busy`` requests (no Retry-After), then 200."""

    served: list[float] = []
    status = 503
    busy = 3

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.served.append(time.monotonic())
        if len(self.served) <= self.busy:
            self.send_response(self.status)
            self.end_headers()
            return
        body = b'{"metrics": []}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        return None


def test_a_busy_server_gets_more_tries_than_a_failing_one(monkeypatch):
    from tracker_plugin.trackers import mlflow_rest

    monkeypatch.setattr(mlflow_rest, "_BACKOFF", 0.05)  # the count of tries is the point, not the waits
    busy = type("Busy", (_Busy,), {"served": [], "status": 503, "busy": 3})
    server, url = _serve(busy)
    try:
        assert RestTarget(url=url, timeout=5, retries=1).get("/x", {}) == {"metrics": []}
    finally:
        server.shutdown()
        server.server_close()
    assert len(busy.served) == 4  # 503 three times, then the answer: retries=1 did not stop it
    failing = type("Failing", (_Busy,), {"served": [], "status": 500, "busy": 3})
    server, url = _serve(failing)
    try:
        with pytest.raises(Unreachable, match="server errors"):
            RestTarget(url=url, timeout=5, retries=1).get("/x", {})
    finally:
        server.shutdown()
        server.server_close()
    assert len(failing.served) == 2  # a 500 keeps to retries=1


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503])
def test_the_history_reads_wait_as_long_as_retry_after_asks(status):
    handler = type("Handler", (_Limited,), {"served": [], "status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = RestTarget(url=f"http://127.0.0.1:{server.server_address[1]}", timeout=10, retries=2)
        answer = target.get("/api/2.0/mlflow/metrics/get-history", {"run_id": "r", "metric_key": "loss"})
    finally:
        server.shutdown()
        server.server_close()
    assert answer["metrics"][0]["value"] == 2.0
    assert len(handler.served) == 2
    # 2 s asked; the backoff alone would have waited 1 s.
    assert handler.served[1] - handler.served[0] >= 1.9
