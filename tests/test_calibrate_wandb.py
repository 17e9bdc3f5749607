"""``annotate`` calibrates a project's running run on its finished runs: W&B, real ``wandb`` SDK.

The scenario of the MLflow one: three finished runs of a cosine recipe (3000 steps) and a
fourth of the same recipe cut at 1500 steps, logged by the real ``wandb`` SDK in a child
process, as a training script logs them; their plan comes from the HF-style config
(``lr_scheduler_type``, ``max_steps``, ``warmup_steps``, ``learning_rate``).

- **W&B online**, against :class:`~tests.doubles.wandb_server.WandbServer`: the
  running run's training process is killed once its rows reached the server, which keeps
  the run ``running`` there (as W&B does until its heartbeat times out).
- **W&B offline** (``wandb-offline:PATH``): an offline run's state is its exit record's
  (exit code 0: ``finished``; none: ``unknown``, not finished), so the running run is a
  process killed before ``run.finish()``. Such a run is never written (its file may still
  be written to), so its calibration is checked on what ``--dry-run`` would write, and a
  second pass reads that run again (it holds no annotation) but no finished one.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracker_plugin.cli import main
from tracker_plugin.testing import synthetic_run

SPEC = "cosine:warmup=100,total=3000,final=0.1"  # what the synthetic runs follow
CONFIG = {"lr_scheduler_type": "cosine", "max_steps": 3000, "warmup_steps": 100, "learning_rate": 1e-3}
TARGET, WINDOW = "6.79", "2.5e7"  # where the smoothed loss stands at about 80% of the runs
# One schedule-aware law rather than auto's choice among them (which backtests each run on
# its own history first): the same calibration, the file in about 20 s rather than 55.
ARGS = ["-t", TARGET, "--ema-token-window", WINDOW, "--model", "lr-annealing", "--json"]
KEYS = {"train_loss": "train/loss", "tokens": "throughput/total_tokens", "lr": "train/lr"}
# name, seed, steps logged: three finished runs, then the one still running
RUNS = [("sib1", 1, 3000), ("sib2", 2, 3000), ("sib3", 3, 3000), ("live", 0, 1500)]
FINISHED = ["sib1", "sib2", "sib3"]
LIVE_ROWS = 150  # the running run's rows: steps 0, 10, ..., 1490


def logged_rows(seed: int, steps: int) -> list[dict]:
    frame = synthetic_run(
        3000, batch=131072.0, noise=0.01, lr_schedule=SPEC, anneal_gain=0.1, log_every=10, seed=seed
    )
    frame = frame[frame.step < steps].rename(columns=KEYS)
    return [
        {k: (int(v) if k == "step" else float(v)) for k, v in r.items()} for r in frame.to_dict("records")
    ]


# The training script: each run logged row by row; the last one is left running (its
# process blocks until the test kills it). Each row is committed as it is logged, so the
# running run's rows all leave the process without run.finish().
_LOGGER = """
import json, sys, wandb
for spec in json.load(open(sys.argv[1])):
    run = wandb.init(entity=spec.get("entity"), project=spec["project"], name=spec["name"], config=spec["config"])
    for row in spec["rows"]:
        step = row.pop("step")
        run.log(row, step=step, commit=True)
    if spec["finish"]:
        run.finish()
    print(spec["name"], run.id, flush=True)
    if not spec["finish"]:
        sys.stdin.read()
"""


def start_logging(home: Path, env: dict[str, str], **where: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """Log the four runs; return the process (blocked in the running run) and name -> run id."""
    home.mkdir(parents=True, exist_ok=True)
    specs = [
        {**where, "name": name, "config": CONFIG, "rows": logged_rows(seed, steps), "finish": name != "live"}
        for name, seed, steps in RUNS
    ]
    listing = home / "runs.json"
    listing.write_text(json.dumps(specs))
    env = {k: v for k, v in env.items() if k != "WANDB_SERVICE"}  # never the parent's wandb-core
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOGGER, str(listing)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ids = {}
    for _ in RUNS:
        line = proc.stdout.readline().split()
        assert len(line) == 2, f"the logger stopped: exit code {proc.wait(timeout=60)}"
        ids[line[0]] = line[1]
    return proc, ids


def kill_training(proc: subprocess.Popen) -> None:
    """Kill the training process (no run.finish()) and wait for its wandb-core to go too."""
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _has_service(proc.pid):
        assert time.monotonic() < deadline, "the killed run's wandb-core did not exit"
        time.sleep(0.05)


def _has_service(pid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--pid" in cmdline and str(pid).encode() in cmdline and any(b"wandb-core" in c for c in cmdline):
            return True
    return False


def wait_for(found, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not found():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def actions(out: str) -> dict[str, set[str]]:
    """Run name -> the actions the JSON summary gives it (one row per run and target)."""
    found: dict[str, set[str]] = {}
    for row in json.loads(out):
        found.setdefault(row["run"], set()).add(row["action"])
    return found


@pytest.fixture
def reports(monkeypatch) -> dict[str, dict]:
    """Run ref -> the report of each analysis the jobs make, written or not (``loss_eta.json``
    but the keys an annotation adds to it)."""
    from tracker_plugin.jobs import runner
    from tracker_plugin.report.render import to_json

    made: dict[str, dict] = {}
    analyse = runner.run_analysis

    def recorded(history, config):
        analysis = analyse(history, config)
        made[history.run] = to_json(analysis)
        return analysis

    monkeypatch.setattr(runner, "run_analysis", recorded)
    return made


def assert_record(provenance: dict) -> None:
    """A finished run's backtest record, as its provenance keeps it."""
    record = provenance["siblings"]
    assert set(record) >= {"hash", "kind", "peak_lr", "left_out", "cuts"}
    assert record["left_out"] is None and record["kind"] == "decay"  # cosine: decays from the warmup on
    assert record["cuts"] and any(record["cuts"].values()), record
    assert "calibration" not in provenance or provenance["calibration"] is None


def assert_calibrated(provenance: dict, report: dict, finished_refs: list[str]) -> None:
    """The running run's annotation: calibrated on the three finished runs."""
    calibration = provenance["calibration"]
    assert calibration["runs"] == 3 and calibration["cases"] >= 3
    assert set(calibration) >= {"runs", "cases", "cut", "left_out", "bias", "width"}
    assert set(calibration["bias"]) >= {"value", "siblings", "prior", "weight"}
    assert report["calibration"]["count"] == 3
    assert sorted(report["calibration"]["runs"]) == sorted(finished_refs)
    assert "siblings" not in provenance or provenance["siblings"] is None  # not a finished run: no record


# -- W&B online --------------------------------------------------------------------------------
@pytest.fixture
def online_project(wandb_server, tmp_path) -> Iterator[dict]:
    """The four runs logged online by the real SDK; the last one's process killed mid-run."""
    # The running run's rows reach the server within 1 s, not wandb's 15 (whole seconds:
    # wandb-core took 0.5 as its default).
    env = {**os.environ, "WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL": "1"}
    proc, ids = start_logging(tmp_path / "online", env, entity="ent", project="calib")
    try:
        live = wandb_server.run("ent", "calib", ids["live"])
        wait_for(lambda: len(live.history) == LIVE_ROWS, "the running run's rows on the server")
    finally:
        kill_training(proc)
    runs = {name: wandb_server.run("ent", "calib", run_id) for name, run_id in ids.items()}
    assert [runs[n].state for n in FINISHED] == ["finished"] * 3 and runs["live"].state == "running"
    assert len(runs["sib1"].history) == 300 and runs["live"].history[-1]["_step"] == 1490
    yield runs


def test_online_running_run_is_calibrated_on_the_finished_runs(
    wandb_server, online_project, capsys, count_reads
):
    from tracker_plugin.trackers.wandb_runs import WandbSource

    runs = online_project
    refs = {name: f"wandb:ent/calib/{run.run_id}" for name, run in runs.items()}
    code, out, err = cli(capsys, "annotate", "wandb:ent/calib", *ARGS)
    assert code == 0, out + err
    assert actions(out) == {name: {"annotated"} for name in runs}, out
    for name in FINISHED:
        assert_record(json.loads(runs[name].summary["loss_eta"]))
        assert json.loads(runs[name].files["loss_eta.json"])["calibration"] is None
    live = runs["live"]
    assert_calibrated(
        json.loads(live.summary["loss_eta"]),
        json.loads(live.files["loss_eta.json"]),
        [refs[n] for n in FINISHED],
    )

    # Nothing changed: every run unchanged, no history read, nothing written.
    reads = count_reads(WandbSource)
    wandb_server.requests.clear()
    code, out, err = cli(capsys, "annotate", "wandb:ent/calib", *ARGS)
    assert code == 0, out + err
    assert actions(out) == {name: {"unchanged"} for name in runs}, out
    assert reads == [] and wandb_server.mutations() == []
    assert not any(r.operation in ("SampledHistoryPage", "HistoryPage") for r in wandb_server.requests)

    # --no-calibrate: the running run is forecast on its own (its settings changed).
    code, out, err = cli(capsys, "annotate", "wandb:ent/calib", *ARGS, "--no-calibrate")
    assert code == 0, out + err
    assert actions(out) == {**{n: {"unchanged"} for n in FINISHED}, "live": {"annotated"}}, out
    assert reads == [refs["live"]]
    assert json.loads(live.summary["loss_eta"]).get("calibration") is None
    assert json.loads(live.files["loss_eta.json"])["calibration"] is None

    # Calibrated again: from the records the finished runs hold, none of them read.
    reads.clear()
    code, out, err = cli(capsys, "annotate", "wandb:ent/calib", *ARGS)
    assert code == 0, out + err
    assert reads == [refs["live"]] and actions(out)["live"] == {"annotated"}
    assert json.loads(live.summary["loss_eta"])["calibration"]["runs"] == 3


# -- W&B offline -------------------------------------------------------------------------------
@pytest.fixture
def offline_project(tmp_path) -> tuple[Path, dict[str, Path]]:
    """The four runs logged offline by the real SDK, in ``tmp_path/offline/wandb/``: name -> run
    directory; the last one's process killed before ``run.finish()`` (no exit record)."""
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    home = tmp_path / "offline"
    from tests.doubles.wandb_offline_runs import offline_env

    # The running run's rows on disk within 1 s.
    env = offline_env(home) | {"WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL": "1"}
    proc, ids = start_logging(home, env, project="calib")
    dirs = {name: next((home / "wandb").glob(f"offline-run-*-{run_id}")) for name, run_id in ids.items()}
    live_file = next(dirs["live"].glob("run-*.wandb"))
    try:
        wait_for(
            lambda: read_offline_run(live_file, (), ref="x").rows == LIVE_ROWS,
            "the running run's rows on disk",
        )
    finally:
        kill_training(proc)
    states = {
        name: read_offline_run(next(d.glob("run-*.wandb")), (), ref="x").state for name, d in dirs.items()
    }
    assert states == {"sib1": "finished", "sib2": "finished", "sib3": "finished", "live": "unknown"}
    return home, dirs


def offline_summary(run_dir: Path) -> dict:
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    return read_offline_run(next(run_dir.glob("run-*.wandb")), (), ref="x").summary


def test_offline_running_run_is_calibrated_on_the_finished_runs(
    offline_project, capsys, count_reads, reports
):
    from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

    home, dirs = offline_project
    spec = f"wandb-offline:{home}"
    refs = {name: f"wandb-offline:{d}" for name, d in dirs.items()}
    live_file = next(dirs["live"].glob("run-*.wandb"))
    live_bytes = live_file.read_bytes()

    # Annotated: the finished runs keep their records; the running run is not written.
    code, out, err = cli(capsys, "annotate", spec, *ARGS)
    assert code == 1, out + err
    assert actions(out) == {**{n: {"annotated"} for n in FINISHED}, "live": {"failed"}}, out
    assert "has no exit record" in next(r["note"] for r in json.loads(out) if r["run"] == "live")
    assert live_file.read_bytes() == live_bytes and not (dirs["live"] / "files" / "loss_eta.json").exists()
    for name in FINISHED:
        assert_record(json.loads(offline_summary(dirs[name])["loss_eta"]))
        assert json.loads((dirs[name] / "files" / "loss_eta.json").read_text())["calibration"] is None
    assert reports[refs["live"]]["calibration"]["count"] == 3  # analysed, calibrated, then refused

    # A second pass, as a dry run: the finished runs unchanged and not read (their records
    # come with the listing); the running run read again, and what it would get is
    # calibrated on the three.
    reads = count_reads(WandbOfflineSource)
    code, out, err = cli(capsys, "annotate", spec, *ARGS[:-1], "--dry-run")
    assert code == 0, out + err
    assert reads == [refs["live"]]
    # Only the running run would be written: the finished runs are unchanged (none failed).
    assert {line.split(": would write ")[0] for line in out.splitlines() if ": would write " in line} == {
        refs["live"]
    }
    assert_calibrated(
        _planned_provenance(out, refs["live"]), reports[refs["live"]], [refs[n] for n in FINISHED]
    )

    # --no-calibrate: no calibration in what the running run would get.
    code, out, err = cli(capsys, "annotate", spec, *ARGS[:-1], "--no-calibrate", "--dry-run")
    assert code == 0, out + err
    assert _planned_provenance(out, refs["live"]).get("calibration") is None
    assert reports[refs["live"]]["calibration"] is None


def _planned_provenance(out: str, ref: str) -> dict:
    """The provenance tag a --dry-run says it would write to run ``ref``."""
    prefix = f"{ref}: would write summary record loss_eta = "
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, out
    return json.loads(ast.literal_eval(lines[0][len(prefix) :]))
