"""``analyze --calibrate-on``: a forecast calibrated on finished sibling runs named by the user."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tracker_plugin.cli import main
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.errors import ConfigError
from tracker_plugin.jobs.calibration import progress, sibling_table
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import SourceOptions
from tracker_plugin.trackers.csvfile import read_csv as load_csv

SPEC = "cosine:warmup=100,total=3000,final=0.1"
WINDOW = "2.5e7"
# Where the smoothed loss of these runs stands at about 80% of their steps.
TARGET = "6.79"


def _write(path: Path, seed: int, steps: int = 3000) -> Path:
    frame = synthetic_run(3000, batch=131072.0, noise=0.01, lr_schedule=SPEC, anneal_gain=0.1, log_every=10, seed=seed)
    frame[frame.step < steps].to_csv(path, index=False)
    return path


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A run half done and three finished siblings of the same recipe, as CSVs."""
    run = _write(tmp_path / "run.csv", 0, steps=1500)
    siblings = [_write(tmp_path / f"sibling{k}.csv", k) for k in (1, 2, 3)]
    return run, siblings


def _cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_analyze_calibrated_on_finished_runs_says_from_what(capsys, project) -> None:
    run, siblings = project
    common = [run, "-t", TARGET, "--ema-token-window", WINDOW, "--lr-spec", SPEC, "--json"]
    code, out, err = _cli(capsys, "analyze", *common)
    assert code == 0, err
    plain = json.loads(out)
    calibrate_on = [x for s in siblings for x in ("--calibrate-on", s)]
    code, out, err = _cli(capsys, "analyze", *common, *calibrate_on, "--calibrate-on", run)
    assert code == 0, err
    doc = json.loads(out)
    cal = doc["calibration"]
    # Every sibling counted, the run itself left out and said so.
    assert cal["count"] == 3 and sorted(cal["runs"]) == sorted(str(s) for s in siblings)
    assert cal["cases"] >= 3
    note = next(n for n in doc["notes"] if n.startswith("calibrated on 3 finished run(s)"))
    assert f"{run} left out: the forecast run itself" in note
    # The point is the plain one moved by the bias the report gives.
    before, after = plain["targets"][0], doc["targets"][0]
    assert before["status"] == after["status"] == "forecast"
    assert after["tokens"] == pytest.approx(before["tokens"] * math.exp(-cal["bias"]["value"]), rel=1e-6)
    assert abs(cal["bias"]["value"]) <= abs(cal["bias"]["siblings"])


def test_siblings_are_backtested_where_the_run_stands(project) -> None:
    run, siblings = project
    config = AnalysisConfig(targets=(float(TARGET),), ema_token_window=float(WINDOW), lr_schedule=LrSchedule.parse_spec(SPEC))
    history = load_csv(run)
    at = progress(history, config)
    assert at == pytest.approx(1490 / 3000, abs=0.01)
    table = sibling_table([str(s) for s in siblings], SourceOptions(states=("finished",)), config, at, exclude=history.run)
    assert [r for r, _ in table.cases] == [str(s) for s in siblings] and not table.left_out
    # Each sibling is scored on the targets it reached, with a finite error.
    assert all(math.isfinite(c.error) for _, cases in table.cases for c in cases)


def test_a_run_of_unknown_length_cannot_be_calibrated(capsys, tmp_path, project) -> None:
    _run, siblings = project
    frame = synthetic_run(1500, batch=131072.0, noise=0.01, log_every=10, seed=5).drop(columns=["lr"])
    bare = tmp_path / "bare.csv"
    frame.to_csv(bare, index=False)
    code, _out, err = _cli(capsys, "analyze", bare, "-t", TARGET, "--calibrate-on", siblings[0])
    assert code != 0
    assert "bare.csv" in err and "--calibrate-on" in err and "not known" in err and "Traceback" not in err
    with pytest.raises(ConfigError, match="length is not known"):
        progress(load_csv(bare), AnalysisConfig(targets=(float(TARGET),)))


def test_the_power_law_is_not_calibrated_and_says_so(capsys, project) -> None:
    run, siblings = project
    code, _out, err = _cli(capsys, "analyze", run, "-t", TARGET, "--lr-spec", SPEC, "--model", "power-law",
                           "--calibrate-on", siblings[0])
    assert code != 0
    assert "--model power-law" in err and "--calibrate-on" in err and "Traceback" not in err


def test_a_sibling_that_cannot_be_read_is_left_out_with_why(tmp_path, project) -> None:
    run, siblings = project
    broken = tmp_path / "broken.csv"
    broken.write_text("step,tokens\n1,100\n2,200\n")
    config = AnalysisConfig(targets=(float(TARGET),), ema_token_window=float(WINDOW), lr_schedule=LrSchedule.parse_spec(SPEC))
    table = sibling_table([str(siblings[0]), str(broken)], SourceOptions(states=("finished",)), config, 0.5)
    assert [r for r, _ in table.cases] == [str(siblings[0])]
    [(ref, why)] = table.left_out
    assert ref == str(broken) and why.startswith("it could not be read: ") and "loss" in why
