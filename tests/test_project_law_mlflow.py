"""``annotate`` over an MLflow experiment forecasts its running run by the project's law.

Against a real ``mlflow server``: three finished runs and one running run of one model
(real logs, :mod:`tests.law_project`). The finished runs keep their evidence in their own
``loss_eta`` tag; the running run's keys are the pooled law's answer (not the run alone's)
and its provenance names the runs the law was fitted on; a rerun reads no history; a
sibling that finishes redoes the running run and nothing else.
"""

from __future__ import annotations

import json

import pytest

from tests.law_project import (
    ARGS,
    CONFIG,
    FINISHED,
    RUNNING,
    RUNNING_ROWS,
    TARGET,
    assert_law_answer,
    by_law,
    frame,
    params,
)
from tests.test_mlflow import Tracking, make_tracking
from tracker_plugin.jobs.project_book import decode_evidence
from tracker_plugin.jobs.runs import analyze_one
from tracker_plugin.keys import target_key
from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, open_source
from tracker_plugin.trackers.mlflow_runs import MlflowSource


@pytest.fixture
def project(request, tmp_path) -> tuple[Tracking, dict[str, str]]:
    """The experiment on the session's server: name -> run id."""
    tracking = make_tracking(request, tmp_path, "server")
    ids = {name: tracking.log(frame(stem), name=name, params=params(stem)) for name, stem in FINISHED.items()}
    name, stem = RUNNING
    ids[name] = tracking.log(frame(stem, RUNNING_ROWS), name=name, params=params(stem), status="RUNNING")
    return tracking, ids


def _annotate(tracking: Tracking, capsys, *extra: str) -> dict[str, str]:
    code, out, err = tracking.cli(capsys, "annotate", f"mlflow:experiment/{tracking.experiment}", *ARGS, "--json", *extra)
    assert code == 0, out + err
    return {row["run"]: row["action"] for row in json.loads(out)}


def _provenance(tracking: Tracking, run_id: str) -> dict:
    return json.loads(tracking.client.get_run(run_id).data.tags["loss_eta"])


def _options(tracking: Tracking) -> SourceOptions:
    return SourceOptions(read=ReadOptions(use_cache=False, batch_size=1.0), mlflow=MlflowOptions(tracking_uri=tracking.uri))


@pytest.mark.slow
def test_the_running_run_is_forecast_by_the_law_of_the_finished_runs(project, capsys, count_reads):
    tracking, ids = project
    running = ids[RUNNING[0]]
    assert set(_annotate(tracking, capsys).values()) == {"annotated"}
    said = _provenance(tracking, running)["project_law"]
    assert said["shared"] and said["law"] in ("multi-power", "lr-annealing")
    assert sorted(s["name"] for s in said["siblings"]) == sorted(FINISHED)
    assert sorted(s["run"] for s in said["siblings"]) == sorted(f"mlflow:{ids[n]}" for n in FINISHED)
    report = json.loads(open(tracking.client.download_artifacts(running, "loss_eta.json", str(tracking.tmp))).read())
    assert sorted(report["project_law"]["siblings"]) == sorted(f"mlflow:{ids[n]}" for n in FINISHED)

    # The key is the law's answer from the evidence the finished runs hold, not the run alone's.
    evidences = []
    for name in FINISHED:
        stored = _provenance(tracking, ids[name])["siblings"]
        evidence = decode_evidence(stored, stored["hash"])
        assert evidence is not None and evidence.finished and evidence.own
        evidences.append(evidence)
    source = open_source(f"mlflow:{running}", _options(tracking))
    try:
        history = source.read(source.runs()[0])
    finally:
        source.close()
    alone = analyze_one(f"mlflow:{running}", _options(tracking), CONFIG)
    annotated = tracking.client.get_run(running).data.metrics[target_key(TARGET, "step")]
    text = tracking.client.get_run(running).data.tags[target_key(TARGET)]
    assert text.endswith(" · by the project's law (3 runs)"), text
    assert_law_answer(annotated, by_law(history, evidences), alone)

    # A rerun: every run unchanged, no history read, not one history request to the server.
    reads = count_reads(MlflowSource)
    mark = tracking.server.mark()
    assert set(_annotate(tracking, capsys).values()) == {"unchanged"}
    assert reads == [] and tracking.server.requests_since(mark, "/metrics/get-history") == 0

    # A sibling finishes: its evidence is taken, the running run redone, the others left alone.
    new = tracking.log(frame(FINISHED["constant"]), name="again", params=params(FINISHED["constant"]))
    actions = _annotate(tracking, capsys)
    assert actions == {**{n: "unchanged" for n in FINISHED}, "again": "annotated", RUNNING[0]: "annotated"}
    assert sorted(reads) == sorted([f"mlflow:{new}", f"mlflow:{running}"])
    assert len(_provenance(tracking, running)["project_law"]["siblings"]) == 4


def test_no_siblings_forecasts_each_run_alone(project, capsys):
    tracking, ids = project
    _annotate(tracking, capsys, "--no-siblings")
    assert "project_law" not in _provenance(tracking, ids[RUNNING[0]])
    assert all("siblings" not in _provenance(tracking, ids[n]) for n in FINISHED)
