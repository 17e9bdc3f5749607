"""Write-back keys and the many-run loop, on CSV runs (artifacts beside the files).

What every source must do, CSV files included, is in the adapter contract suite,
``test_contract.py``.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

import tracker_plugin as tp
from tracker_plugin.cli import main
from tracker_plugin.core.status import Status
from tracker_plugin.jobs.annotation import build_annotation, settings_hash, settings_of
from tracker_plugin.keys import (
    KEY_PATTERN,
    MARKER,
    PLAN_END,
    PLAN_END_TEXT,
    PROVENANCE,
    SERIES,
    SERIES_LOSS,
    SERIES_POINTS,
    SERIES_TOKENS,
    TARGET_METRICS,
    content_hash,
    target_key,
    target_slug,
)
from tracker_plugin.report.target_text import target_status
from tracker_plugin.trackers.base import previous_of

MLFLOW_KEY = re.compile(r"^[/\w.\- :]{1,250}$")


@pytest.mark.parametrize(
    ("target", "slug"),
    [
        (3.3, "3p3"), (2.875, "2p875"), (10, "10"), (-1, "m1"), (3.30004, "3p30004"), (1e-5, "0p00001"),
        (0, "0"), (2e7, "2e7"), (2.5e7, "2p5e7"),
    ],
)  # fmt: skip
def test_target_slug(target, slug):
    assert target_slug(target) == slug


def test_every_key_is_valid_in_both_trackers(data_dir):
    history = tp.load_csv(data_dir / "parity_dynamic.csv")
    config = tp.AnalysisConfig(targets=(5.5, 3.9, 2.1, 3.14159))
    analysis = tp.analyze(history, config.targets, model="power-law")
    annotation = build_annotation(analysis, settings_of(config, tp.Columns(), None))
    keys = annotation.keys()
    # Per target its text and 3 numbers (billions of tokens, step, hours left); for the
    # run one provenance tag (the marker is written apart), the two series, and the loss at
    # the plan's end: a number (none here: the power law has no plan) and no text.
    assert TARGET_METRICS == ("Btok", "step", "hours")
    assert len(keys) == 4 * (1 + 3) + 1 + 2 + 1 and PROVENANCE in keys and set(SERIES) <= set(keys)
    assert PLAN_END in keys and annotation.metrics[PLAN_END] is None and PLAN_END_TEXT not in keys
    for key in keys:
        assert KEY_PATTERN.match(key), key  # W&B: [_a-zA-Z0-9] names
        assert MLFLOW_KEY.match(key), key
        assert key in (PROVENANCE, PLAN_END, PLAN_END_TEXT, *SERIES) or key.startswith("when_")
    keys = [key for key in keys if key not in SERIES]
    # MLflow's runs table shows about 13 characters: the target comes first, and the
    # columns of targets of up to 2 decimals differ within them
    short = [key for key in keys if "3p14159" not in key]
    assert len({key[:13] for key in short}) == len(short) == 14
    # every target writes every field, None where there is nothing to say
    assert annotation.metrics[target_key(2.1, "Btok")] is None
    assert target_status(annotation.labels[target_key(2.1)]) == "unreachable"
    # The runs table shows about 10 characters of a text: the mark and the whole number first.
    for target in config.targets:
        text = annotation.labels[target_key(target)]
        assert re.match(r"^[✓≈→✗–] \d[\d.,]*[KMBT]?( |$)", text[:11]), text


@pytest.fixture
def runs_dir(tmp_path, data_dir):
    for name in ("olmo-ladder-370M-5xC.csv", "parity_fixed.csv"):
        shutil.copy(data_dir / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("targets", [("3.3", "3.3000000001"), ("1e-9", "0.5", "2e-9")])
def test_targets_that_would_share_keys_are_refused_before_anything_is_written(capsys, runs_dir, targets):
    before = sorted(p.name for p in runs_dir.iterdir())
    code, out, err = _annotate(capsys, runs_dir, "-t", *targets)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "would both be written to when_" in err
    assert sorted(p.name for p in runs_dir.iterdir()) == before


def _annotate(capsys, *args):
    code = main(["annotate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_annotate_writes_beside_each_csv_then_skips_unchanged(capsys, runs_dir):
    code, out, _ = _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss")
    assert code == 0
    report = json.loads((runs_dir / "olmo-ladder-370M-5xC.loss_eta.json").read_text())
    assert report["targets"][0]["status"] == "reached"
    png = (runs_dir / "parity_fixed.loss_eta.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    before = {p.name: p.stat().st_mtime_ns for p in runs_dir.iterdir()}
    code, out, _ = _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss")
    assert code == 0 and out.count("unchanged") == 2
    assert {p.name: p.stat().st_mtime_ns for p in runs_dir.iterdir()} == before
    code, out, _ = _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss", "--force")
    assert code == 0 and "unchanged" not in out
    after = {p.name: p.stat().st_mtime_ns for p in runs_dir.iterdir()}
    assert after["parity_fixed.loss_eta.json"] > before["parity_fixed.loss_eta.json"]


def test_the_report_artifact_puts_the_answer_first(capsys, runs_dir):
    """loss_eta.json opens with the run and where each target stands; the settings, hashes
    and provenance come after, so a person opening it sees the answer first."""
    code, _, _ = _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss")
    assert code == 0
    text = (runs_dir / "olmo-ladder-370M-5xC.loss_eta.json").read_text()
    assert list(json.loads(text))[:2] == ["run", "targets"]
    assert text.index('"targets"') < text.index('"settings_hash"') < text.index('"plot_sha256"')


def test_changed_settings_reannotate(capsys, runs_dir):
    _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss")
    _, out, _ = _annotate(capsys, runs_dir, "-t", "4.4", "--loss-col", "val_loss", "--loss-col", "train_loss")
    assert "unchanged" not in out
    report = json.loads((runs_dir / "parity_fixed.loss_eta.json").read_text())
    assert report["targets"][0]["target"] == 4.4


def test_one_bad_run_fails_alone_with_exit_code_1(capsys, runs_dir):
    (runs_dir / "broken.csv").write_text("step,train_loss,global_batch\n0,5,10\n1,oops,10\n")
    code, out, err = _annotate(capsys, runs_dir, "-t", "4.5", "--loss-col", "val_loss", "--loss-col", "train_loss", "--json")
    assert code == 1
    rows = json.loads(out)
    broken = [r for r in rows if r["run"] == "broken"]
    assert broken[0]["status"] == "failed" and "non-numeric value 'oops'" in broken[0]["note"]
    assert (runs_dir / "parity_fixed.loss_eta.json").exists()
    assert "Traceback" not in err


def test_a_planned_lr_schedule_is_in_the_settings_hash_but_not_copied_whole():
    steps = list(range(0, 100_000, 10))
    plan = tp.LrSchedule.from_table(steps, [1.0 - s / 200_000 for s in steps])
    other = tp.LrSchedule.from_table(steps, [1.0 - s / 150_000 for s in steps])
    settings = settings_of(tp.AnalysisConfig(targets=(3.0,), lr_schedule=plan), tp.Columns(), None)
    assert len(json.dumps(settings)) < 2_000
    changed = settings_of(tp.AnalysisConfig(targets=(3.0,), lr_schedule=other), tp.Columns(), None)
    assert settings_hash(settings) != settings_hash(changed)


def test_old_status_words_read_as_todays_and_an_annotation_in_the_earlier_layout_is_redone():
    """Earlier versions wrote 'extrapolated' and 'failed' (read back as today's nearest
    word) in keys of an earlier layout: a complete annotation in that layout is redone,
    saying why; one in today's is current."""
    assert Status("extrapolated") is Status.FORECAST and Status("failed") is Status.NOT_ENOUGH_DATA
    assert Status.read(" Extrapolated ") is Status.FORECAST and Status.read("stale") is None
    legacy = {"loss_eta/settings_hash": "s", "loss_eta/progress": "p", "loss_eta/plot_sha256": "q",
              "loss_eta/target_3p10/status": "extrapolated"}
    previous = previous_of({**legacy, "loss_eta/marker": content_hash(legacy)})
    assert previous is not None and previous.legacy and not previous.current("s", "p", "q")
    assert "earlier version" in (previous.why_redone("s", "p", "q") or "")
    provenance = json.dumps({"settings_hash": "s", "progress": "p", "plot_sha256": "q", "report_sha256": "r"})
    today = {PROVENANCE: provenance, target_key(3.1): "forecast_beyond_plan · 250B tok", target_key(3.1, "step"): 9.0}
    previous = previous_of({**today, MARKER: content_hash(today)})
    assert previous is not None and previous.current("s", "p", "q") and previous.why_redone("s", "p", "q") is None
    assert previous.report == "r"
    # A cleared number (MLflow keeps NaN) is no key: the legacy keys, cleared, leave none behind.
    cleared = {**today, "loss_eta/target_3p10/tokens": float("nan")}
    previous = previous_of({**cleared, MARKER: content_hash(today)})
    assert previous is not None and not previous.legacy and previous.complete


def test_the_smoothed_series_is_the_forecasts_curve_thinned_on_a_grid_that_only_grows(data_dir):
    history = tp.load_csv(data_dir / "nanogpt-124M-adamw-llmc.csv")  # 9,538 logged steps
    config = tp.AnalysisConfig(targets=(3.3,))
    full = tp.analyze(history, config.targets)
    series = build_annotation(full, settings_of(config, tp.Columns(), None)).series
    assert series is not None and set(series.values) == set(SERIES)
    steps = np.asarray(series.steps)
    # About a thousand points, from the fit start to the run's last step, in order.
    assert SERIES_POINTS // 2 <= len(steps) <= SERIES_POINTS + 1
    assert steps[0] >= full.fit_start_step and steps[-1] == history.step[-1] and (np.diff(steps) > 0).all()
    rows = np.searchsorted(history.step, steps)
    assert np.allclose(series.values[SERIES_LOSS], full.smoothed[rows], rtol=1e-5)  # six digits
    assert np.array_equal(series.values[SERIES_TOKENS], np.round(history.tokens[rows]))
    # The same run a third done: every step of the later, coarser grid but its last was
    # kept by the earlier one, with the same value (the EMA reads no later row), so a pass
    # over the grown run writes only new steps.
    early = tp.analyze(history.head(len(history) // 3), config.targets)
    before = build_annotation(early, settings_of(config, tp.Columns(), None)).series
    assert before is not None
    held = dict(zip(before.steps, before.values[SERIES_LOSS]))
    shared = [s for s in series.steps if s <= before.steps[-1]]
    assert shared and all(s in held for s in shared[:-1])
    assert all(held[s] == v for s, v in zip(series.steps, series.values[SERIES_LOSS]) if s in held and s != before.steps[-1])
    # Turned off, nothing is written but the numbers and texts.
    off = build_annotation(full, settings_of(config, tp.Columns(), None, series=False))
    assert off.series is None and not set(SERIES) & set(off.keys())
