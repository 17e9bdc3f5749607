"""``annotate`` over a project calibrates its running runs on its finished ones; ``calibrate`` prints it.

Against a real ``mlflow server`` and the local sqlite store: the finished runs of an
experiment are backtested once and keep their record in their own ``loss_eta`` tag; a
running run's annotation says what they set; a rerun with no new finished run reads no
history; a new finished run redoes the running run and nothing else.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.test_mlflow import Tracking, make_tracking
from tracker_plugin.core.siblings import LEVELS, SiblingCase, SiblingRecord, calibrate_records, schedule_kind
from tracker_plugin.jobs.calibration import decode_record, encode_record
from tracker_plugin.report.target_text import target_status
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers.mlflow_runs import MlflowSource

SPEC = "cosine:warmup=100,total=3000,final=0.1"
PARAMS = {"lr_scheduler_type": "cosine", "max_steps": 3000, "warmup_steps": 100, "learning_rate": 1e-3}
ARGS = ("-t", "6.85", "--ema-token-window", "2.5e7")  # the running run's forecast reaches it


def _log(tracking: Tracking, seed: int, steps: int = 3000, status: str = "FINISHED", name: str | None = None) -> str:
    frame = synthetic_run(3000, batch=131072.0, noise=0.01, lr_schedule=SPEC, anneal_gain=0.1, log_every=10, seed=seed)
    return tracking.log(frame[frame.step < steps], name=name or f"run{seed}", params=PARAMS, status=status)


@pytest.fixture(params=["server", "sqlite"])
def project(request, tmp_path) -> tuple[Tracking, list[str], str]:
    """An experiment with three finished runs and one running half-way."""
    tracking = make_tracking(request, tmp_path, request.param)
    finished = [_log(tracking, seed) for seed in (1, 2, 3)]
    return tracking, finished, _log(tracking, 0, steps=1500, status="RUNNING")


@pytest.fixture
def local(request, tmp_path) -> Tracking:
    return make_tracking(request, tmp_path, "sqlite")


def _provenance(tracking: Tracking, run_id: str) -> dict:
    return json.loads(tracking.client.get_run(run_id).data.tags["loss_eta"])


def _report(tracking: Tracking, run_id: str) -> dict:
    path = tracking.client.download_artifacts(run_id, "loss_eta.json", str(tracking.tmp / run_id))
    return json.loads(open(path).read())


def _annotate(tracking: Tracking, capsys, *extra: str) -> dict[str, str]:
    code, out, err = tracking.cli(capsys, "annotate", f"mlflow:experiment/{tracking.experiment}", *ARGS, "--json", *extra)
    assert code == 0, err
    return {row["run"]: row["action"] for row in json.loads(out)}


def test_a_running_run_is_calibrated_on_the_finished_runs_of_its_experiment(project, capsys, count_reads):
    tracking, finished, running = project
    assert set(_annotate(tracking, capsys).values()) == {"annotated"}
    said = _provenance(tracking, running)["calibration"]
    assert said["runs"] == 3 and said["cases"] >= 3 and said["cut"] == pytest.approx(0.5)
    assert said["bias"]["prior"] == 0.0 and said["width"]["prior"] == 1.0
    report = _report(tracking, running)
    assert report["calibration"]["count"] == 3
    assert sorted(report["calibration"]["runs"]) == sorted(f"mlflow:{r}" for r in finished)
    assert any(note.startswith("calibrated on 3 finished run(s)") for note in report["notes"])
    text = tracking.client.get_run(running).data.tags["when_6p85"]
    assert target_status(text) == "forecast" and text.endswith(" · calibrated on 3 runs"), text
    for run_id in finished:  # each keeps its own backtest, and is not calibrated itself
        provenance = _provenance(tracking, run_id)
        assert "calibration" not in provenance
        assert provenance["siblings"]["kind"] == "decay" and len(provenance["siblings"]["cuts"]) >= 5
    # Nothing new: every run unchanged, no history read (the records come with the listing).
    read = count_reads(MlflowSource)
    server = tracking.server
    mark = server.mark() if server else 0
    assert set(_annotate(tracking, capsys).values()) == {"unchanged"}
    assert read == []
    if server:
        assert server.requests_since(mark, "/metrics/get-history") == 0
    # A run finishes: it is backtested, the running run is redone on four, the others left alone.
    new = _log(tracking, 4, name="new")
    actions = _annotate(tracking, capsys)
    assert actions == {"run1": "unchanged", "run2": "unchanged", "run3": "unchanged", "new": "annotated",
                       "run0": "annotated"}
    assert sorted(read) == sorted([f"mlflow:{new}", f"mlflow:{running}"])
    assert _provenance(tracking, running)["calibration"]["runs"] == 4


def test_no_calibrate_forecasts_each_run_on_its_own(local, capsys):
    finished = [_log(local, seed) for seed in (1, 2)]
    running = _log(local, 0, steps=1500, status="RUNNING")
    _annotate(local, capsys, "--no-calibrate")
    assert "calibration" not in _provenance(local, running) and _report(local, running)["calibration"] is None
    assert all("siblings" not in _provenance(local, run_id) for run_id in finished)


def test_a_finished_run_that_stopped_short_of_its_plan_is_left_out_with_why(local, capsys):
    _log(local, 1)
    _log(local, 2, steps=1000, name="short")
    running = _log(local, 0, steps=1500, status="RUNNING")
    _annotate(local, capsys)
    calibration = _report(local, running)["calibration"]
    assert calibration["count"] == 1
    assert [item["why"] for item in calibration["left_out"]] == ["it stopped at 33% of its planned steps"]


def test_calibrate_prints_the_project_without_writing(local, capsys):
    for seed in (1, 2):
        _log(local, seed)
    _log(local, 0, steps=1500, status="RUNNING")
    code, out, err = local.cli(capsys, "calibrate", f"mlflow:experiment/{local.experiment}", "--ema-token-window", "2.5e7")
    assert code == 0, err
    assert "2 finished run(s); 2 read and backtested now" in out and "error@50%" in out and "width used" in out
    assert all("loss_eta" not in r.data.tags for r in local.client.search_runs([local.experiment_id]))
    _annotate(local, capsys)
    code, out, _ = local.cli(capsys, "calibrate", f"mlflow:experiment/{local.experiment}", "--ema-token-window", "2.5e7",
                             "--json")
    [book] = json.loads(out)
    assert book["read"] == 0 and {r["run"] for r in book["runs"]} == {"run1", "run2"}
    at_half = [c for c in book["calibrations"] if c["cut"] == 0.5]
    assert at_half and at_half[0]["runs"] == 2 and math.isfinite(at_half[0]["width"])


# -- the pieces --------------------------------------------------------------------------------


def test_a_plans_kind_is_told_from_its_lr():
    steps = np.array([0, 100, 3000.0])
    assert schedule_kind(steps, [0, 1, 1], 3000) == "constant"
    assert schedule_kind(steps, [0, 1, 0.1], 3000) == "decay"
    assert schedule_kind([0, 100, 2400, 3000], [0, 1, 1, 0], 3000) == "wsd"
    assert schedule_kind(steps, [0, 1, 0.1], None) is None


def _case(run: str, error: float) -> SiblingCase:
    return SiblingCase(run, error, (0.05,) * len(LEVELS), (math.inf,) * len(LEVELS))


def test_records_are_narrowed_by_kind_and_the_run_itself_is_never_a_sibling():
    records = [
        SiblingRecord("a", "decay", 1e-3, ((0.5, (_case("a", 0.1),)),)),
        SiblingRecord("b", "wsd", 1e-3, ((0.5, (_case("b", -0.3),)),)),
        SiblingRecord("c", "decay", 1e-3, ((0.3, (_case("c", 0.2),)),)),
        SiblingRecord("d", "decay", left_out="it stopped at 40% of its planned steps"),
        SiblingRecord("self", "decay", 1e-3, ((0.5, (_case("self", 0.5),)),)),
    ]
    found = calibrate_records(records, 0.47, "decay", exclude="self")
    assert found.runs == ("a",) and found.cut == 0.5 and found.raw_bias == pytest.approx(0.1)
    why = dict(found.left_out)
    assert "another kind" in why["b"] and "at 50%" in why["c"] and why["d"].startswith("it stopped")
    assert why["self"] == "the forecast run itself"
    assert calibrate_records(records, 0.5, None, exclude="self").runs == ("a", "b")


def test_a_record_survives_its_tag_and_a_record_of_other_settings_is_not_read():
    record = SiblingRecord("r", "wsd", 3e-4, ((0.2, (_case("r", 0.0123456789),)),))
    stored = json.loads(json.dumps(encode_record(record, "abc")))
    back = decode_record("r", stored, "abc")
    assert back is not None and back.kind == "wsd" and back.at(0.2)[0].highs == (math.inf,) * len(LEVELS)
    assert back.at(0.2)[0].error == pytest.approx(0.0123456789, rel=1e-5)
    assert decode_record("r", stored, "other settings") is None
    assert decode_record("r", {"hash": "abc", "cuts": {"0.2": [[1.0]]}}, "abc") is None
    assert decode_record("r", "not a record", "abc") is None


def test_new_targets_keep_the_finished_runs_records(local, capsys, monkeypatch):
    import tracker_plugin.jobs.runner as runner

    for seed in (1, 2):
        _log(local, seed)
    running = _log(local, 0, steps=1500, status="RUNNING")
    _annotate(local, capsys)
    made = []
    monkeypatch.setattr(runner, "sibling_record", lambda *args: made.append(args) or pytest.fail("backtested again"))
    code, out, err = local.cli(capsys, "annotate", f"mlflow:experiment/{local.experiment}", "-t", "6.9",
                               "--ema-token-window", "2.5e7", "--json")
    assert code == 0, err
    assert {row["action"] for row in json.loads(out)} == {"annotated"} and made == []
    assert _provenance(local, running)["calibration"]["runs"] == 2
