"""``annotate`` forecasts a W&B project's running run by its law: the real ``wandb`` SDK.

The scenario of the MLflow one (:mod:`tests.law_project`: three finished runs of one model
with real logs, and the fourth cut at 40% of its plan), logged by the real ``wandb`` SDK
in a child process, as a training script logs them; each run's plan is in its config.

- **W&B online**, against :class:`~tests.doubles.wandb_server.WandbServer`: the
  running run's training process is killed once its rows reached the server, which keeps
  the run ``running`` there (as W&B does until its heartbeat times out).
- **W&B offline** (``wandb-offline:PATH``): an offline run's state is its exit record's
  (exit code 0: ``finished``; none: ``unknown``, not finished), so the running run is a
  process killed before ``run.finish()``. Such a run is never written (its file may still
  be written to), so its forecast is checked on what ``--dry-run`` would write, and a
  second pass reads that run again (it holds no annotation) but no finished one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.law_project import ARGS as LAW_ARGS
from tests.law_project import CONFIG, RUNNING, RUNNING_ROWS, TARGET, assert_law_answer, by_law, frame, params
from tests.law_project import FINISHED as FINISHED_STEMS
from tracker_plugin.cli import main
from tracker_plugin.core.analysis import run_analysis
from tracker_plugin.jobs.project_book import decode_evidence
from tracker_plugin.keys import target_key

ARGS = [*LAW_ARGS, "--json"]
KEYS = {"train_loss": "train/loss", "lr": "train/lr"}
# name, stem, rows logged: three finished runs, then the one still running
RUNS = [*((name, stem, None) for name, stem in FINISHED_STEMS.items()), ("live", RUNNING[1], RUNNING_ROWS)]
FINISHED = list(FINISHED_STEMS)
LIVE_ROWS = RUNNING_ROWS


def logged_rows(stem: str, rows: int | None) -> list[dict]:
    found = frame(stem, rows).rename(columns=KEYS)
    return [
        {k: (int(v) if k == "step" else float(v)) for k, v in r.items()} for r in found.to_dict("records")
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
        {**where, "name": name, "config": params(stem), "rows": logged_rows(stem, rows), "finish": name != "live"}
        for name, stem, rows in RUNS
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
def made(monkeypatch) -> dict[str, tuple]:
    """Run ref -> the history and report of each analysis the jobs make, written or not."""
    from tracker_plugin.jobs import runner
    from tracker_plugin.report.render import to_json

    found: dict[str, tuple] = {}
    analyse = runner.run_analysis

    def recorded(history, config):
        analysis = analyse(history, config)
        found[history.run] = (history, to_json(analysis))
        return analysis

    monkeypatch.setattr(runner, "run_analysis", recorded)
    return found


def assert_evidence(provenance: dict):
    """A finished run's evidence, as its provenance keeps it; returned decoded."""
    stored = provenance["siblings"]
    assert set(stored) == {"hash", "zlib"}
    evidence = decode_evidence(stored, stored["hash"])
    assert evidence is not None and evidence.finished and evidence.own
    assert "project_law" not in provenance  # a finished run is not forecast by the others
    return evidence


def assert_by_law(provenance: dict, report: dict, finished_refs: list[str]) -> None:
    """The running run's annotation: forecast by the law of the three finished runs."""
    said = provenance["project_law"]
    assert said["shared"] and sorted(s["name"] for s in said["siblings"]) == sorted(FINISHED)
    assert sorted(s["run"] for s in said["siblings"]) == sorted(finished_refs)
    assert sorted(report["project_law"]["siblings"]) == sorted(finished_refs)
    assert "siblings" not in provenance  # not a finished run: no evidence


def assert_the_laws_answer(step: float, history, evidences) -> None:
    """The running run's step key is the pooled law's answer, not the run alone's."""
    assert_law_answer(step, by_law(history, evidences), run_analysis(history, CONFIG))


# -- W&B online --------------------------------------------------------------------------------
@pytest.fixture
def online_project(wandb_server, tmp_path) -> Iterator[dict]:
    """The four runs logged online by the real SDK; the last one's process killed mid-run."""
    # The running run's rows reach the server within 1 s, not wandb's 15 (whole seconds:
    # wandb-core took 0.5 as its default).
    env = {**os.environ, "WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL": "1"}
    proc, ids = start_logging(tmp_path / "online", env, entity="ent", project="law")
    try:
        live = wandb_server.run("ent", "law", ids["live"])
        wait_for(lambda: len(live.history) == LIVE_ROWS, "the running run's rows on the server")
    finally:
        kill_training(proc)
    runs = {name: wandb_server.run("ent", "law", run_id) for name, run_id in ids.items()}
    assert [runs[n].state for n in FINISHED] == ["finished"] * 3 and runs["live"].state == "running"
    assert runs["live"].history[-1]["_step"] == frame(RUNNING[1], RUNNING_ROWS).step.iloc[-1]
    yield runs


@pytest.mark.slow
def test_online_running_run_is_forecast_by_the_law_of_the_finished_runs(
    wandb_server, online_project, capsys, count_reads, made
):
    from tracker_plugin.trackers.wandb_runs import WandbSource

    runs = online_project
    refs = {name: f"wandb:ent/law/{run.run_id}" for name, run in runs.items()}
    code, out, err = cli(capsys, "annotate", "wandb:ent/law", *ARGS)
    assert code == 0, out + err
    assert actions(out) == {name: {"annotated"} for name in runs}, out
    evidences = [assert_evidence(json.loads(runs[name].summary["loss_eta"])) for name in FINISHED]
    live = runs["live"]
    assert_by_law(json.loads(live.summary["loss_eta"]), json.loads(live.files["loss_eta.json"]),
                  [refs[n] for n in FINISHED])
    assert_the_laws_answer(live.summary[target_key(TARGET, "step")], made[refs["live"]][0], evidences)

    # Nothing changed: every run unchanged, no history read, nothing written.
    reads = count_reads(WandbSource)
    wandb_server.requests.clear()
    code, out, err = cli(capsys, "annotate", "wandb:ent/law", *ARGS)
    assert code == 0, out + err
    assert actions(out) == {name: {"unchanged"} for name in runs}, out
    assert reads == [] and wandb_server.mutations() == []
    assert not any(r.operation in ("SampledHistoryPage", "HistoryPage") for r in wandb_server.requests)

    # --no-siblings: the running run is forecast on its own (its settings changed).
    code, out, err = cli(capsys, "annotate", "wandb:ent/law", *ARGS, "--no-siblings")
    assert code == 0, out + err
    assert actions(out) == {**{n: {"unchanged"} for n in FINISHED}, "live": {"annotated"}}, out
    assert reads == [refs["live"]]
    assert "project_law" not in json.loads(live.summary["loss_eta"])
    assert json.loads(live.files["loss_eta.json"])["project_law"] is None

    # By the law again: from the evidence the finished runs hold, none of them read.
    reads.clear()
    code, out, err = cli(capsys, "annotate", "wandb:ent/law", *ARGS)
    assert code == 0, out + err
    assert reads == [refs["live"]] and actions(out)["live"] == {"annotated"}
    assert len(json.loads(live.summary["loss_eta"])["project_law"]["siblings"]) == 3


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
    proc, ids = start_logging(home, env, project="law")
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
    assert states == {**{n: "finished" for n in FINISHED}, "live": "unknown"}
    return home, dirs


def offline_summary(run_dir: Path) -> dict:
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    return read_offline_run(next(run_dir.glob("run-*.wandb")), (), ref="x").summary


@pytest.mark.slow
def test_offline_running_run_is_forecast_by_the_law_of_the_finished_runs(
    offline_project, capsys, count_reads, made
):
    from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

    home, dirs = offline_project
    spec = f"wandb-offline:{home}"
    refs = {name: f"wandb-offline:{d}" for name, d in dirs.items()}
    live_file = next(dirs["live"].glob("run-*.wandb"))
    live_bytes = live_file.read_bytes()

    # Annotated: the finished runs keep their evidence; the running run is not written.
    code, out, err = cli(capsys, "annotate", spec, *ARGS)
    assert code == 1, out + err
    assert actions(out) == {**{n: {"annotated"} for n in FINISHED}, "live": {"failed"}}, out
    assert "has no exit record" in next(r["note"] for r in json.loads(out) if r["run"] == "live")
    assert live_file.read_bytes() == live_bytes and not (dirs["live"] / "files" / "loss_eta.json").exists()
    evidences = [assert_evidence(json.loads(offline_summary(dirs[name])["loss_eta"])) for name in FINISHED]
    history, report = made[refs["live"]]  # analysed, by the law, then refused
    assert sorted(report["project_law"]["siblings"]) == sorted(refs[n] for n in FINISHED)

    # A second pass, as a dry run: the finished runs unchanged and not read (their evidence
    # comes with the listing); the running run read again, and what it would get is the law's.
    reads = count_reads(WandbOfflineSource)
    code, out, err = cli(capsys, "annotate", spec, *ARGS, "--dry-run")
    assert code == 0, out + err
    assert reads == [refs["live"]]
    # Only the running run would be written: the finished runs are unchanged (none failed).
    rows = json.loads(out)
    assert {row["run"] for row in rows if row["would_write"]} == {"live"}, out
    assert_by_law(_planned_provenance(rows), made[refs["live"]][1], [refs[n] for n in FINISHED])
    step = made[refs["live"]][1]["targets"][0]["step"]
    assert_the_laws_answer(step, history, evidences)

    # --no-siblings: no law in what the running run would get.
    code, out, err = cli(capsys, "annotate", spec, *ARGS, "--no-siblings", "--dry-run")
    assert code == 0, out + err
    assert "project_law" not in _planned_provenance(json.loads(out))
    assert made[refs["live"]][1]["project_law"] is None


def _planned_provenance(rows: list[dict]) -> dict:
    """The provenance tag a --dry-run --json says it would write to the running run."""
    [planned] = [row["would_write"] for row in rows if row["run"] == "live"]
    return json.loads(planned["loss_eta"]["new"])
