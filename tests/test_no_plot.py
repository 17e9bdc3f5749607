"""``annotate --no-plot``: each run's loss_eta.png says no plot was drawn, and nothing else moves.

The picture carries the report's digest as a drawn plot does, so a run annotated without
its plot is complete and current on the next pass (``unchanged``), on CSV runs (whose
completion the picture beside the report records) and on MLflow (which reads the stored
picture back); turning the plot on again redraws it. A process that annotates with
``--no-plot`` never loads matplotlib.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.test_mlflow import make_tracking, training_log
from tracker_plugin.cli import main
from tracker_plugin.keys import PNG_DIGEST, report_digest
from tracker_plugin.report.plot_skipped import LINES
from tracker_plugin.trackers.base import png_text

TARGETS = ("-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss")


@pytest.fixture
def runs_dir(tmp_path, data_dir):
    for name in ("olmo-ladder-370M-5xC.csv", "parity_fixed.csv"):
        shutil.copy(data_dir / name, tmp_path / name)
    return tmp_path


def annotate(capsys, *args) -> tuple[int, str]:
    code = main(["annotate", *map(str, args)])
    return code, capsys.readouterr().out


def test_no_plot_writes_a_picture_that_says_so_and_the_run_stays_current(capsys, runs_dir):
    code, out = annotate(capsys, runs_dir, *TARGETS, "--no-plot")
    assert code == 0 and out.count("annotated") == 2
    for stem in ("olmo-ladder-370M-5xC", "parity_fixed"):
        picture = (runs_dir / f"{stem}.loss_eta.png").read_bytes()
        report = (runs_dir / f"{stem}.loss_eta.json").read_bytes()
        assert picture.startswith(b"\x89PNG") and len(picture) < 20_000
        assert png_text(picture)[PNG_DIGEST] == report_digest(report)  # the report it stands beside
        assert json.loads(report)["targets"][0]["target"] == 4.5
    assert "no plot drawn" in LINES[0]
    code, out = annotate(capsys, runs_dir, *TARGETS, "--no-plot")
    assert code == 0 and out.count("unchanged") == 2
    code, out = annotate(capsys, runs_dir, *TARGETS)  # the plot on again: drawn
    assert code == 0 and out.count("annotated") == 2
    drawn = (runs_dir / "parity_fixed.loss_eta.png").read_bytes()
    assert len(drawn) > 20_000 and png_text(drawn)[PNG_DIGEST] == report_digest(
        (runs_dir / "parity_fixed.loss_eta.json").read_bytes())
    code, out = annotate(capsys, runs_dir, *TARGETS)
    assert code == 0 and out.count("unchanged") == 2


@pytest.mark.slow
def test_no_plot_loads_no_matplotlib(runs_dir):
    probe = ("import sys; from tracker_plugin.cli import main; code = main(sys.argv[1:]); "
             "print(code, 'matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, "annotate", str(runs_dir), *TARGETS, "--no-plot"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.strip().splitlines()[-1] == "0 False", done.stderr[-2000:]
    with_plot = subprocess.run([sys.executable, "-c", probe, "annotate", str(runs_dir), *TARGETS],
                               capture_output=True, text=True, timeout=300, check=False)
    assert with_plot.stdout.strip().splitlines()[-1] == "0 True", with_plot.stderr[-2000:]


def test_an_mlflow_run_annotated_without_its_plot_is_current_on_the_next_pass(request, tmp_path, capsys):
    tracking = make_tracking(request, tmp_path, "sqlite")
    run_id = tracking.log(training_log(), name="no-plot")
    spec = ["--tracking-uri", tracking.uri, "-t", "5.5", "4.0"]
    code, out = annotate(capsys, f"mlflow:{run_id}", *spec, "--no-plot")
    assert code == 0 and "annotated" in out
    picture = tracking.client.download_artifacts(run_id, "loss_eta.png", str(tmp_path))
    assert png_text(open(picture, "rb").read()).get(PNG_DIGEST)
    code, out = annotate(capsys, f"mlflow:{run_id}", *spec, "--no-plot")
    assert code == 0 and "unchanged" in out
