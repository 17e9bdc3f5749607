"""``analyze --siblings``: one run forecast by the law of the finished runs the user names.

Real logs (:mod:`tests.law_project`) as CSVs: three finished runs of one model and the
fourth cut at 40% of its plan. The run itself is never among its siblings; where no law is
shared the report says why in one line and the answer is the run alone's.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.law_project import (
    ARGS,
    CONFIG,
    DATA,
    FINISHED,
    RUNNING,
    RUNNING_ROWS,
    RUNNING_SPEC,
    assert_law_answer,
    by_law,
    frame,
)
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import run_analysis
from tracker_plugin.jobs.project_book import take_evidence
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.trackers.csvfile import read_csv as load_csv

# Each test fits a project's law on real runs, end to end: with --all.
pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of the finished runs, and the running run's CSV beside it."""
    folder = tmp_path / "project"
    folder.mkdir()
    for stem in FINISHED.values():
        shutil.copy(DATA / f"{stem}.csv", folder / f"{stem}.csv")
    running = tmp_path / "running.csv"
    frame(RUNNING[1], RUNNING_ROWS).to_csv(running, index=False)
    return folder, running


def _analyze(capsys, *args: object) -> dict:
    code = main(["analyze", *map(str, args), *ARGS, "--lr-spec", RUNNING_SPEC, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_the_run_is_forecast_by_its_siblings_law_and_is_never_its_own(capsys, project) -> None:
    folder, running = project
    # --calibrate-on is the same option; the run itself named among the siblings is left out.
    doc = _analyze(capsys, running, "--siblings", folder, "--calibrate-on", running)
    law = doc["project_law"]
    assert law["shared"] and sorted(law["siblings"]) == sorted(str(folder / f"{s}.csv") for s in FINISHED.values())
    assert {"run": str(running), "why": "the forecast run itself"} in law["left_out"]
    history = load_csv(running, batch_size=1.0)
    config = replace(CONFIG, lr_schedule=LrSchedule.parse_spec(RUNNING_SPEC))
    evidences = [take_evidence(load_csv(folder / f"{s}.csv", batch_size=1.0), config) for s in FINISHED.values()]
    assert_law_answer(doc["targets"][0]["step"], by_law(history, evidences, config), run_analysis(history, config))


def test_where_no_law_is_shared_the_run_alone_answers_and_the_report_says_why(capsys, project, tmp_path) -> None:
    folder, running = project
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(folder / f"{FINISHED['constant']}.csv", lone)
    (lone / "broken.csv").write_text("step,tokens\n1,100\n2,200\n")
    alone = _analyze(capsys, running)
    doc = _analyze(capsys, running, "--siblings", lone)
    assert doc["targets"] == alone["targets"]
    assert not doc["project_law"]["shared"] and "shared law is confirmed on at least 2" in doc["project_law"]["reason"]
    [said] = [n for n in doc["notes"] if n.startswith("no shared law: ")]
    assert "\n" not in said and "broken.csv left out: it could not be read" in said


def test_the_power_law_forecasts_the_run_alone_and_says_so(capsys, project) -> None:
    folder, running = project
    alone = _analyze(capsys, running, "--model", "power-law")
    doc = _analyze(capsys, running, "--model", "power-law", "--siblings", folder)
    assert doc["targets"] == alone["targets"]

