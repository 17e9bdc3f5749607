"""Faults and races against a real ``mlflow server``: every run ends consistent.

The server is stopped (SIGKILL after a zero grace period) in the middle of an annotate at
several points, then started again (``stoppable_mlflow_server``: a restarted server keeps
its port and data, as it does for a user) and the annotate rerun; two annotates race on
one experiment; a resumed run logs its last steps again with new values. After each,
every run must hold one consistent annotation: its keys match its ``loss_eta_marker``,
its ``loss_eta.json`` is the one its keys record, the JSON's settings are the ones in the
``loss_eta`` tag and its numbers are the metrics. No run may be skipped as
``unchanged`` while inconsistent, and no metric row may be logged again when the key's
latest value at that step already was that value (what two same-settings annotates did).
The counts are printed at the end of the session.
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import FAULTS
from tests.doubles.mlflow_runs import log_run
from tests.doubles.mlflow_server import MlflowServer
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.runner import OVERTAKEN, process_runs
from tracker_plugin.keys import JSON_PATH, MARKER, PROVENANCE, is_own, report_digest, target_key
from tracker_plugin.report.target_text import target_status
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, open_source
from tracker_plugin.trackers.base import previous_of
from tracker_plugin.trackers.mlflow_runs import MlflowSource

# Minutes long: left out of the default run, run with --all (CI runs it).
pytestmark = pytest.mark.slow

MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
FIRST = ("-t", "5.5", "4.0")
OTHER = ("-t", "5.0", "--ema-token-window", "3e8")  # other settings, and a dropped target
RUNS = 2
# Kill points: the server is killed just before the Nth write request of the annotate
# (per run: the keys in one log_batch, two artifact uploads, the marker): after the
# first run's keys; before its marker; in the second run's uploads. Each costs a server
# restart, so there are few; other points were tried by hand (see the issue note).
KILL_POINTS = [("same", 3), ("different", 4), ("different", 6)]


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    # Retry at once: how long a dead server takes to give up on is tested in test_mlflow.py.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")


def experiment(client, steps: int = 300) -> tuple[str, list[str]]:
    name = f"faults-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    ids = [
        log_run(client, experiment_id, synthetic_run(steps, batch=4_194_304.0, seed=k), name=f"run{k}")
        for k in range(RUNS)
    ]
    return name, ids


def annotate(capsys, server: MlflowServer, name: str, flags, tmp: Path) -> tuple[int, dict[str, str]]:
    capsys.readouterr()
    code = main([
        "annotate", f"mlflow:experiment/{name}", *flags, "--workers", "1", "--json",
        "--tracking-uri", server.uri, "--cache-dir", str(tmp / "cache"),
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    rows = json.loads(out)
    return code, {row["ref"].removeprefix("mlflow:"): row["action"] for row in rows}


@contextmanager
def killed_at(server: MlflowServer, point: int, monkeypatch) -> Iterator[list[int]]:
    """Kill the server just before the ``point``-th write request (log_batch, log_artifact)."""
    calls = [0]

    def wrap(original):
        def call(self, *args, **kwargs):
            calls[0] += 1
            if calls[0] == point:
                server.stop(timeout=0)  # SIGTERM, then SIGKILL at once
            return original(self, *args, **kwargs)

        return call

    with monkeypatch.context() as patch:
        for method in ("log_batch", "log_artifact"):
            patch.setattr(MlflowClient, method, wrap(getattr(MlflowClient, method)))
        yield calls


def check(client, run_id: str, tmp: Path) -> dict[str, int]:
    """Is the run consistent? And its metric rows: (key, step, value) repeats, and
    re-logs of the value that was already the latest there."""
    run = client.get_run(run_id)
    own = {k: float(v) for k, v in run.data.metrics.items() if is_own(k)}
    own.update((k, v) for k, v in run.data.tags.items() if is_own(k))
    previous = previous_of(own)
    consistent = previous is not None and previous.complete
    with tempfile.TemporaryDirectory(dir=tmp) as folder:
        try:
            report_bytes = Path(client.download_artifacts(run_id, JSON_PATH, folder)).read_bytes()
        except Exception:  # noqa: BLE001 - no report: inconsistent
            report_bytes = b""
    consistent = consistent and previous is not None and report_digest(report_bytes) == previous.report
    if consistent:
        report = json.loads(report_bytes)
        provenance = json.loads(str(own[PROVENANCE]))
        consistent = (
            report["settings_hash"] == provenance["settings_hash"]
            and report["ema_token_window"] == provenance["settings"]["ema_token_window"]
        )
        for target in report["targets"]:
            stored, expected = own.get(target_key(target["target"], "step"), math.nan), target["step"]
            same = (expected is None and math.isnan(stored)) or (
                expected is not None and math.isclose(stored, round(expected), rel_tol=1e-12)
            )
            text = str(own[target_key(target["target"])])
            consistent = consistent and same and target_status(text) == target["status"]
    repeats = relogs = 0
    for key in (k for k in run.data.metrics if is_own(k)):
        rows = sorted((m.step, m.timestamp, m.value) for m in client.get_metric_history(run_id, key))
        seen = {(s, "nan" if math.isnan(v) else v) for s, _, v in rows}
        repeats += len(rows) - len(seen)
        relogs += sum(
            1 for a, b in zip(rows, rows[1:]) if a[0] == b[0] and (a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2])))
        )
    return {"consistent": int(consistent), "repeats": repeats, "relogs": relogs}


def record(scenario: str, results: list[dict[str, int]]) -> None:
    FAULTS["scenarios"] += 1
    FAULTS["runs"] += len(results)
    FAULTS["consistent"] += sum(r["consistent"] for r in results)
    FAULTS["relogs"] += sum(r["relogs"] for r in results)
    if scenario.startswith("same"):
        FAULTS["same_settings_repeats"] += sum(r["repeats"] for r in results)


@pytest.mark.parametrize(("settings", "point"), KILL_POINTS)
def test_server_killed_mid_annotate_then_restarted(stoppable_mlflow_server, tmp_path, capsys, monkeypatch, point, settings):
    server = stoppable_mlflow_server
    client = MlflowClient(server.uri)
    name, ids = experiment(client)
    if settings == "different":  # annotated with the first settings; the others are cut short
        assert annotate(capsys, server, name, FIRST, tmp_path)[0] == 0
    cut = FIRST if settings == "same" else OTHER
    with killed_at(server, point, monkeypatch):
        code, actions = annotate(capsys, server, name, cut, tmp_path)
    assert code == 1 and "failed" in actions.values()
    server.start()

    code, actions = annotate(capsys, server, name, FIRST, tmp_path)
    assert code == 0
    results = [check(client, run_id, tmp_path) for run_id in ids]
    # A run left unchanged must have been consistent before the rerun: checked, it is now.
    assert [r["consistent"] for r in results] == [1] * RUNS, (actions, results)
    assert all(r["relogs"] == 0 for r in results), results
    if settings == "same":
        assert all(r["repeats"] == 0 for r in results), results
    # ... and a second rerun finds nothing to do.
    assert set(annotate(capsys, server, name, FIRST, tmp_path)[1].values()) == {"unchanged"}
    record(f"{settings} settings, killed at {point}", results)


@pytest.mark.parametrize("settings", ["same", "different"])
def test_two_concurrent_annotates_converge(mlflow_server, tmp_path, settings):
    client = MlflowClient(mlflow_server.uri)
    name, ids = experiment(client)
    first = AnalysisConfig(targets=(5.5, 4.0))
    configs = [first, first if settings == "same" else AnalysisConfig(targets=(5.0,), ema_token_window=3e8)]
    # Both jobs read each run before either writes it: the race, every time.
    barrier = threading.Barrier(2, timeout=60)
    original = MlflowSource.held

    def held(self, run):
        found = original(self, run)
        if not getattr(threading.current_thread(), "raced", set()) >= {run.ref}:
            threading.current_thread().raced = getattr(threading.current_thread(), "raced", set()) | {run.ref}  # type: ignore[attr-defined]
            barrier.wait()
        return found

    outcomes: list = [None, None]

    def job(k: int) -> None:
        options = SourceOptions(ReadOptions(use_cache=False), MlflowOptions(tracking_uri=mlflow_server.uri))
        source = open_source(f"mlflow:experiment/{name}", options)
        try:
            outcomes[k] = process_runs(source, source.runs(), configs[k], write=True, workers=1, progress=False)
        finally:
            source.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MlflowSource, "held", held)
        threads = [threading.Thread(target=job, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert all(o is not None for o in outcomes)
    assert [o.action for out in outcomes for o in out] == ["annotated"] * (2 * RUNS), [o.error for out in outcomes for o in out]
    results = [check(client, run_id, tmp_path) for run_id in ids]
    assert [r["consistent"] for r in results] == [1] * RUNS, results
    assert all(r["relogs"] == 0 for r in results), results
    if settings == "same":
        assert all(r["repeats"] == 0 for r in results), results
    # Each job says whose annotation a run holds: a job that wrote the one in place says
    # nothing more; one whose write another's overtook says so (same settings: the same one).
    for k, run_id in enumerate(ids):
        targets = tuple(json.loads(client.get_run(run_id).data.tags[PROVENANCE])["settings"]["targets"])
        holder = [j for j in range(2) if configs[j].targets == targets]
        notes = [outcomes[j][k].note for j in range(2)]
        assert holder and all(notes[j] is None for j in holder), (targets, notes)
        assert all(note in (None, OVERTAKEN) for note in notes), notes
    record(f"{settings} settings, concurrent", results)


def test_a_resumed_run_relogging_up_to_the_same_last_step_is_reannotated(mlflow_server, tmp_path, capsys):
    client = MlflowClient(mlflow_server.uri)
    name, ids = experiment(client, steps=1500)
    assert annotate(capsys, mlflow_server, name, FIRST, tmp_path)[0] == 0
    before = json.loads(client.get_run(ids[0]).data.tags[PROVENANCE]), client.get_run(ids[0]).data.tags
    # Resumed from a checkpoint at step 1200: the same steps again, later, with lower losses.
    frame = synthetic_run(1500, batch=4_194_304.0, seed=0)
    resumed = frame[frame["step"] >= 1200].copy()
    resumed["train_loss"] = resumed["train_loss"] - 0.5
    from mlflow.entities import Metric

    stamp = max(m.timestamp for m in client.get_metric_history(ids[0], "train_loss")) + 10_000
    rows = [Metric("train_loss", float(v), stamp + i, int(s)) for i, (s, v) in enumerate(zip(resumed["step"], resumed["train_loss"]))]
    for start in range(0, len(rows), 1000):
        client.log_batch(ids[0], metrics=rows[start : start + 1000])

    code, actions = annotate(capsys, mlflow_server, name, FIRST, tmp_path)
    assert code == 0 and actions == {ids[0]: "annotated", ids[1]: "unchanged"}
    after = client.get_run(ids[0]).data.tags
    assert json.loads(after[PROVENANCE])["progress"] != before[0]["progress"]
    assert after[MARKER] != before[1][MARKER]  # the new values changed what was written
    results = [check(client, run_id, tmp_path) for run_id in ids]
    assert [r["consistent"] for r in results] == [1] * RUNS and all(r["relogs"] == 0 for r in results)
    FAULTS["resumed"] += 1
    FAULTS["resumed_reannotated"] += int(actions[ids[0]] == "annotated")
    record("same settings, resumed", results)
    assert json.loads(client.get_run(ids[0]).data.tags[PROVENANCE])["last_step"] == 1499
