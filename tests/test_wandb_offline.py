"""Offline W&B runs written by the real SDK (WANDB_MODE=offline), read back and annotated.

What every source must do is in the adapter contract suite, ``test_contract.py``, which
runs over an offline run too. Here: the SDK's value encodings and configs, folders of
runs, where the annotation's records go, ``wandb sync``, unfinished, synced and damaged
files.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.doubles.wandb_offline_runs import log_offline_runs
from tracker_plugin import Columns, build_history
from tracker_plugin.cli import main
from tracker_plugin.report.target_text import target_status
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import ReadOptions, SourceOptions, open_source
from tracker_plugin.trackers.wandb_log import read_log
from tracker_plugin.trackers.wandb_offline import WandbOfflineSource, read_offline_run

TARGETS = ["-t", "6", "4.5"]

def rows_of(frame: pd.DataFrame) -> list[dict]:
    """The keys a script logs at each step: those that are not NaN in the frame."""
    return [
        {
            k: (int(v) if k == "step" else v)
            for k, v in r.items()
            if not (isinstance(v, float) and math.isnan(v))
        }
        for r in frame.to_dict("records")
    ]


def logged_runs() -> dict[str, dict]:
    fixed = synthetic_run(2500, seed=11).drop(columns="global_batch")
    dynamic = synthetic_run(1500, batch=[(0, 262_144.0), (500, 524_288.0), (1000, 1_048_576.0)], seed=12)
    dynamic = dynamic.rename(
        columns={"tokens": "throughput/total_tokens", "global_batch": "batch_size_in_tokens"}
    )
    sparse = (
        synthetic_run(1000, seed=13)
        .drop(columns=["tokens", "global_batch"])
        .rename(columns={"train_loss": "train/loss"})
    )
    sparse.loc[sparse.step % 10 != 0, "lr"] = np.nan
    sparse_rows = rows_of(sparse)
    sparse_rows[5]["train/loss"] = math.nan  # a diverged step, logged as NaN
    return {
        "fixed": {
            "frame": fixed,
            "rows": rows_of(fixed),
            "config": {"global_batch_size": 524288, "lr": 3e-4},
            "encoding": "json",
        },
        "dynamic": {
            "frame": dynamic,
            "rows": rows_of(dynamic),
            "config": {"optimizer": {"lr": 6e-4}},
            "encoding": "json",
        },
        "sparse": {
            "frame": sparse,
            "rows": sparse_rows,
            "config": {"trainer": {"global_batch": 524288}},
            "encoding": "json,typed",
        },
    }


@pytest.fixture(scope="session")
def offline_runs(tmp_path_factory) -> dict[str, Path]:
    """Three offline runs written by the real SDK in a subprocess: name -> run directory."""
    specs = [
        {
            "name": name,
            "rows": spec["rows"],
            "config": spec["config"],
            "encoding": spec["encoding"],
            "summary": {"keep_me": 42, "best/loss": 3.25},
        }
        for name, spec in logged_runs().items()
    ]
    return log_offline_runs(tmp_path_factory.mktemp("offline"), specs)


@pytest.fixture
def runs_copy(offline_runs, tmp_path) -> dict[str, Path]:
    """A writable copy of the offline runs, in ``tmp_path/wandb/``."""
    out = {}
    for name, run_dir in offline_runs.items():
        out[name] = tmp_path / "wandb" / run_dir.name
        shutil.copytree(run_dir, out[name])
    return out


def wandb_file(run_dir: Path) -> Path:
    return next(run_dir.glob("run-*.wandb"))


def expected_history(name: str, columns: Columns, batch_size: float | None):
    spec = logged_runs()[name]
    frame = pd.DataFrame(spec["rows"]).rename(columns={"step": "_step"})
    loss = next(c for c in columns.loss if c in frame)
    nan_loss = np.array(
        [loss in r and isinstance(r[loss], float) and math.isnan(r[loss]) for r in spec["rows"]]
    )
    return build_history(frame, run="x", columns=columns, batch_size=batch_size, logged_nan_loss=nan_loss)


@pytest.mark.parametrize(
    ("name", "batch_size", "batch_source"),
    [
        ("fixed", 524288.0, "config 'global_batch_size'"),
        ("dynamic", None, "column 'batch_size_in_tokens'"),
        ("sparse", 524288.0, "config 'trainer.global_batch'"),
    ],
)
def test_offline_runs_read_back_as_logged(offline_runs, name, batch_size, batch_source):
    options = ReadOptions(batch_params=("global_batch_size", "trainer.global_batch"))
    source = open_source(f"wandb-offline:{offline_runs[name]}", SourceOptions(options))
    (info,) = source.runs()
    history = source.read(info)
    expected = expected_history(name, options.columns, batch_size)
    assert history.loss_key == expected.loss_key
    for field in ("step", "tokens", "batch", "loss", "lr"):
        np.testing.assert_array_equal(getattr(history, field), getattr(expected, field), err_msg=field)
    assert history.batch_source == batch_source
    last = logged_runs()[name]["rows"][-1]["step"]
    assert (info.name, info.state, info.previous) == (name, "finished", None)
    assert info.progress is not None and info.progress.startswith(f"_step {last} rows {len(logged_runs()[name]['rows'])} t ")
    if name == "sparse":  # one loss logged as NaN is dropped and counted; lr every 10 steps, typed values
        assert len(history) == 999 and any("dropped 1 rows whose loss was NaN" in n for n in history.notes)
        logged_lr = {r["step"]: r["lr"] for r in logged_runs()[name]["rows"] if "lr" in r}
        at = np.isin(history.step, list(logged_lr))
        assert at.sum() == 100 and history.lr[at].tolist() == [logged_lr[s] for s in history.step[at]]
    if name == "dynamic":
        assert sorted(set(history.batch)) == [262_144.0, 524_288.0, 1_048_576.0]


def test_config_summary_and_lr_schedule_of_an_offline_run(offline_runs):
    run = read_offline_run(wandb_file(offline_runs["dynamic"]), [], ref="x")
    assert run.config["optimizer"] == {"lr": 6e-4} and run.summary["keep_me"] == 42
    assert run.exit_code == 0 and run.incomplete_at is None
    source = open_source(f"wandb-offline:{offline_runs['dynamic']}", SourceOptions())
    assert source.read(source.runs()[0]).lr_plan is None  # a peak lr alone plans no schedule


def test_a_folder_of_offline_runs(offline_runs, capsys):
    folder = next(iter(offline_runs.values())).parent.parent  # holds wandb/offline-run-*
    names = sorted(r.name for r in open_source(f"wandb-offline:{folder}", SourceOptions()).runs())
    assert names == ["dynamic", "fixed", "sparse"]  # the latest-run link is not a second copy
    assert main(["analyze", f"wandb-offline:{offline_runs['fixed']}", *TARGETS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [t["status"] for t in report["targets"]] == ["reached", "forecast_beyond_plan"]


def test_annotating_an_offline_run_adds_three_records_before_its_exit(runs_copy):
    # The contract suite (tests/test_contract.py) checks the run's own bytes and keys are
    # untouched and a second write adds nothing; here, where the records go.
    run_dir = runs_copy["fixed"]
    path = wandb_file(run_dir)
    before = list(read_log(path.read_bytes()))
    assert main(["annotate", f"wandb-offline:{run_dir}", *TARGETS]) == 0
    after = list(read_log(path.read_bytes()))
    assert [r.data for r in after[: len(before) - 1]] == [r.data for r in before[:-1]]
    assert len(after) == len(before) + 3 and after[-1].data == before[-1].data  # the exit record last
    run = read_offline_run(path, [], ref="x")
    assert target_status(run.summary["when_6"]) == "reached" and run.exit_code == 0
    assert json.loads(run.summary["loss_eta"])["progress"].startswith("_step 2499 rows 2500 t ")
    # new settings: a second annotation goes after the first; the last one wins on sync
    assert main(["annotate", f"wandb-offline:{run_dir}", "-t", "5"]) == 0
    run = read_offline_run(path, [], ref="x")
    assert target_status(run.summary["when_5"]) == "reached"
    assert len(list(read_log(path.read_bytes()))) == len(after) + 3


def test_wandb_sync_brings_the_annotation_to_the_run(runs_copy, wandb_server, capsys, tmp_path):
    run_dir = runs_copy["dynamic"]
    assert main(["annotate", f"wandb-offline:{run_dir}", *TARGETS]) == 0
    env = {**os.environ, "WANDB_SILENT": "true"}
    sync = subprocess.run(
        [sys.executable, "-m", "wandb", "sync", "-e", "team", "-p", "synced", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sync.returncode == 0, sync.stderr
    (run,) = wandb_server.runs.values()
    assert run.state == "finished" and len(run.history) == 1500
    assert run.summary["keep_me"] == 42 and run.summary["best/loss"] == 3.25  # the run's own keys
    assert target_status(run.summary["when_6"]) == "reached"
    assert json.loads(run.files["loss_eta.json"])["targets"][1]["status"] == "forecast_beyond_plan"
    assert run.files["loss_eta.png"].startswith(b"\x89PNG")
    # online, the synced run's annotation is current: nothing to do
    capsys.readouterr()
    assert main(["annotate", "wandb:team/synced", *TARGETS]) == 0
    assert (
        "unchanged" in capsys.readouterr().out
        and wandb_server.mutations(run=run.run_id)[-1].operation == "file_stream"
    )
    # offline, a synced run is not written again: its annotation would never be sent
    before = wandb_file(run_dir).read_bytes()
    assert main(["annotate", f"wandb-offline:{run_dir}", "-t", "5"]) == 1
    assert "was synced to W&B already" in capsys.readouterr().out
    assert wandb_file(run_dir).read_bytes() == before


def test_an_unfinished_run_is_read_but_not_written(runs_copy, capsys):
    run_dir = runs_copy["sparse"]
    path = wandb_file(run_dir)
    entries = list(read_log(path.read_bytes()))
    path.write_bytes(path.read_bytes()[: entries[-1].offset + 3])  # killed while writing its exit record
    run = read_offline_run(path, [], ref="x")
    assert run.exit_code is None and run.incomplete_at == entries[-1].offset
    (info,) = open_source(f"wandb-offline:{run_dir}", SourceOptions()).runs()
    assert info.state == "unknown"
    before = path.read_bytes()
    assert main(["annotate", f"wandb-offline:{run_dir}", *TARGETS, "--batch-size", "524288"]) == 1
    assert "has no exit record" in capsys.readouterr().out and path.read_bytes() == before
    assert main(["analyze", f"wandb-offline:{run_dir}", *TARGETS, "--batch-size", "524288"]) == 0


def test_a_rewrite_that_does_not_read_back_leaves_the_file_alone(runs_copy, capsys, monkeypatch):
    from tracker_plugin.trackers import wandb_offline_write

    def broken(out, records, offset):
        out.write(b"\x00garbage")
        return offset + 8

    run_dir = runs_copy["fixed"]
    before = wandb_file(run_dir).read_bytes()
    monkeypatch.setattr(wandb_offline_write, "write_records", broken)
    assert main(["annotate", f"wandb-offline:{run_dir}", *TARGETS]) == 1
    assert "did not read back as written; the file was left as it was" in capsys.readouterr().out
    assert wandb_file(run_dir).read_bytes() == before and sorted(p.name for p in run_dir.glob(".*")) == []


def test_a_damaged_file_is_one_line_naming_the_run_and_the_byte(runs_copy, capsys):
    run_dir = runs_copy["fixed"]
    path = wandb_file(run_dir)
    data = bytearray(path.read_bytes())
    middle = list(read_log(bytes(data)))[len(list(read_log(bytes(data)))) // 2]
    data[middle.offset + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    assert main(["analyze", f"wandb-offline:{run_dir}", *TARGETS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        (
            f"error: wandb-offline:{run_dir}: {path.name}: "
            f"record checksum mismatch at byte {middle.offset}: the file is damaged"
        )
    ]


def test_offline_paths_that_name_no_run(tmp_path):
    from tracker_plugin.errors import RunNotFound

    with pytest.raises(RunNotFound, match="no such file or directory"):
        open_source(f"wandb-offline:{tmp_path / 'nope'}", SourceOptions()).runs()
    with pytest.raises(RunNotFound, match="holds no offline W&B run"):
        open_source(f"wandb-offline:{tmp_path}", SourceOptions()).runs()


def test_a_run_resumed_from_another_working_directory_is_joined_from_the_folder_holding_both(tmp_path):
    """Each attempt in its own working directory's wandb/ (a/wandb/offline-run-*,
    b/wandb/offline-run-*): the folder holding both reads one run, the attempts joined."""
    from tests.framework_runs import FRAMEWORKS

    first, second = sorted((FRAMEWORKS / "wandb" / "hf-resumed").glob("offline-run-*"))
    for attempt, name in ((first, "a"), (second, "b")):
        shutil.copytree(attempt, tmp_path / name / "wandb" / attempt.name)
    source = WandbOfflineSource(str(tmp_path), ReadOptions(use_cache=False))
    (run,) = source.runs()
    history = source.read(run)
    assert history.last_step == 400
    assert any(note.startswith("joined 2 attempts of W&B run hfresume1") for note in history.notes)
