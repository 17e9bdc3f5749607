"""``tracker-plugin plan``: a run not started, forecast by its finished siblings' law.

The siblings are three real runs of one configuration (the multi-power law paper's 25M
model: a constant, a cosine and a WSD schedule, 24k steps); the planned run is a fourth
of them (WSD with a linear decay), whose real log is the truth the forecast is held to.
They are read from a folder of CSVs and from an experiment on a real ``mlflow server``.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.cli.entry import main
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.core.status import Status
from tracker_plugin.report.plan_plot import plan_figure
from tracker_plugin.trackers import ReadOptions, SourceOptions

DATA = Path(__file__).resolve().parent / "data"
SIBLINGS = DATA / "mpl-25M-siblings"
TRUTH = DATA / "mpl-25M-wsdld-20000-24000.csv"
WINDOW = 1000  # the EMA window: these runs log no batch, read at 1 token a step
WSD = "wsd:warmup=2160,total=24000,decay=4000,final=0.1"  # the planned run's own schedule
COSINE = "cosine:warmup=2160,total=24000,final=0.1"
TARGETS = (3.5, 3.35, 3.3)
COMMON = ["--batch-size", "1", "--ema-token-window", str(WINDOW), "-t", *map(str, TARGETS)]


@cache
def truth() -> tuple[dict[float, float], float]:
    """Where the planned run's own smoothed loss crossed each target, and where it ended."""
    log = pd.read_csv(TRUTH)
    smoothed = token_window_ema(log.train_loss.to_numpy(), log.step.to_numpy(), np.ones(len(log)), WINDOW)
    steps = log.step.to_numpy(float)
    crossed = {}
    for target in TARGETS:
        i = int(np.argmax(smoothed <= target))
        crossed[target] = float(np.interp(target, smoothed[i - 1:i + 1][::-1], steps[i - 1:i + 1][::-1]))
    return crossed, float(smoothed[-1])


@cache
def planned() -> list[tp.PlannedRun]:
    from tracker_plugin.jobs.plan import plan_runs

    return plan_runs(str(SIBLINGS), [WSD, COSINE], TARGETS, batch=1,
                     config=tp.AnalysisConfig(targets=TARGETS, ema_token_window=WINDOW),
                     options=SourceOptions(read=ReadOptions(batch_size=1)))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_forecasts_a_run_before_it_starts_from_its_siblings(capsys):
    code, out, err = _cli(capsys, "plan", "--siblings", SIBLINGS, "--lr-spec", WSD, *COMMON, "--json")
    assert code == 0, err
    doc = json.loads(out)
    crossed, end = truth()
    assert doc["observed"] is None and doc["run"] == WSD
    assert doc["project_law"]["shared"] is True and len(doc["project_law"]["siblings"]) == 3
    for target in doc["targets"]:
        assert target["status"] == "forecast"
        # Before the run, its siblings' law: within 5% of where the run really got there.
        assert abs(math.log(target["step"] / crossed[target["target"]])) < 0.05
        low, high = target["step_interval"]
        assert low < target["step"] < high
        assert 0.5 < target["p_reach_within_plan"] <= 1.0
    plan_end = doc["plan_end"]
    assert plan_end["step"] == 24000 and plan_end["source"] == "project law"
    assert plan_end["loss"] == pytest.approx(end, abs=0.01)
    low, high = plan_end["loss_interval"]
    assert low < end < high


def test_plan_text_says_each_target_and_the_plan_end(capsys):
    code, out, _ = _cli(capsys, "plan", "--siblings", SIBLINGS, "--lr-spec", COSINE, *COMMON)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"planned run: {COSINE}"
    assert lines[2].startswith("siblings: the project's law:") and "3 finished run(s)" in lines[2]
    assert sum(line.startswith("target=") for line in lines) == 3
    assert "FORECAST within the plan" in out
    # The cosine's slower end puts 3.3 past 24k steps: a chance, never an early "no".
    assert any(line.startswith("target=3.3 ") and "UNLIKELY within the plan" in line for line in lines)
    assert "NOT REACHED" not in out and "UNREACHABLE" not in out
    assert lines[-1].startswith("plan end: step=24,000") and "predicted smoothed loss=" in lines[-1]


def test_compare_names_the_plan_first_to_each_target_and_the_lowest_end(capsys):
    code, out, err = _cli(capsys, "plan", "--siblings", SIBLINGS, "--compare", "--lr-spec", COSINE, "--lr-spec", WSD,
                          *COMMON, "--json")
    assert code == 0, err
    doc = json.loads(out)
    firsts = {f["target"]: f["plan"] for f in doc["first"]}
    # The cosine decays early: it gets to the middle targets first; the WSD's late decay ends lower.
    assert firsts[3.35] == COSINE
    assert firsts[3.3] == WSD  # the only one within its plan
    assert doc["lowest_end"] == WSD
    ends = {p["run"]: p["plan_end"]["loss"] for p in doc["plans"]}
    assert ends[WSD] < ends[COSINE] - 0.01
    assert ends == pytest.approx({p.run: p.plan_end.loss for p in planned()}, rel=1e-9)


def test_compare_table_marks_first_and_lowest(capsys):
    code, out, _ = _cli(capsys, "plan", "--siblings", SIBLINGS, "--compare", "--lr-spec", COSINE, "--lr-spec", WSD,
                        *COMMON)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    firsts = [row for row in rows if row and row[-1] == "first"]
    assert [(row[0], row[1]) for row in firsts] == [("3.5", COSINE), ("3.35", COSINE), ("3.3", WSD)]
    lowest = [row for row in rows if row and row[-1] == "lowest"]
    assert len(lowest) == 1 and lowest[0][0] == WSD


def test_siblings_that_share_no_law_give_no_curve(capsys):
    one = SIBLINGS / "mpl-25M-cosine-24000.csv"
    code, out, err = _cli(capsys, "plan", "--siblings", one, "--lr-spec", WSD, *COMMON)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no shared law" in err and "at least 2" in err


@pytest.mark.parametrize(("args", "says"), [
    (["--lr-spec", WSD, "--lr-spec", COSINE], "add --compare"),
    (["--total-steps", "24000"], "gives its length only"),
    (["--lr-spec", WSD, "--total-steps", "24000"], "not with --total-steps"),
])
def test_a_plan_that_cannot_be_forecast_is_refused_in_one_line(capsys, args, says):
    code, out, err = _cli(capsys, "plan", "--siblings", SIBLINGS, *args, *COMMON)
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_a_plan_needs_its_batch(capsys):
    code, _, err = _cli(capsys, "plan", "--siblings", SIBLINGS, "--lr-spec", WSD, "-t", "3.3")
    assert code == 2 and "--batch-size" in err


def test_the_api_raises_where_the_siblings_share_no_law():
    with pytest.raises(tp.NoSharedLaw) as caught:
        tp.plan_run(str(SIBLINGS / "mpl-25M-cosine-24000.csv"), WSD, [3.3], batch=1,
                    options=SourceOptions(read=ReadOptions(batch_size=1)))
    assert caught.value.project.reason is not None and not caught.value.project.shared


def test_the_plot_draws_the_siblings_the_plan_its_targets_and_its_end():
    wsd, cosine = planned()
    fig = plan_figure([wsd])
    fig.canvas.draw()
    ax = fig.axes[0]
    gids = [line.get_gid() or "" for line in ax.lines]
    assert sum(g.startswith("sibling:") for g in gids) == 3
    (curve,) = [line for line in ax.lines if line.get_gid() == f"plan:{WSD}"]
    x, y = curve.get_data()
    assert x[-1] == pytest.approx(24000, rel=1e-3) and y[-1] == pytest.approx(wsd.plan_end.loss, abs=1e-3)
    # Each target within the plan: a marker on its line at the forecast tokens.
    marks = {line.get_gid(): line for line in ax.lines
             if (line.get_gid() or "").startswith("crossing:") and line.get_marker() == "D"}
    assert len(marks) == 3
    for t in wsd.targets:
        mx, my = marks[f"crossing:{WSD}:{t.target:g}"].get_data()
        assert (mx[0], my[0]) == pytest.approx((t.tokens, t.target), rel=1e-9)
    (end,) = [line for line in ax.lines if line.get_gid() == f"plan_end:{WSD}" and line.get_marker() == "s"]
    assert end.get_data()[1][0] == pytest.approx(wsd.plan_end.loss, rel=1e-9)
    low, high = wsd.plan_end.loss_interval
    assert f"plan end {wsd.plan_end.loss:.4f} (80%: {low:.4f}-{high:.4f})" in [c.get_label() for c in ax.containers]
    assert ax.get_xlim()[1] >= 24000 and "planned:" in ax.get_title()
    both = plan_figure([wsd, cosine]).axes[0]
    assert {line.get_gid() for line in both.lines} >= {f"plan:{WSD}", f"plan:{COSINE}"}
    assert "2 plans" in both.get_title()


def test_plan_reads_its_siblings_from_an_mlflow_experiment(mlflow_server, capsys):
    from mlflow import MlflowClient

    from tests.doubles.mlflow_runs import log_csv

    client = MlflowClient(mlflow_server.uri)
    name = f"plan-{uuid.uuid4().hex[:8]}"
    experiment_id = client.create_experiment(name)
    for path in sorted(SIBLINGS.glob("*.csv")):
        log_csv(client, experiment_id, path)
    code, out, err = _cli(capsys, "plan", "--siblings", f"mlflow:experiment/{name}", "--tracking-uri",
                          mlflow_server.uri, "--lr-spec", WSD, *COMMON, "--json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    siblings = doc["project_law"]["siblings"]  # each by its run string
    assert len(siblings) == 3 and all(s.startswith("mlflow:") for s in siblings)
    (wsd, _) = planned()
    assert doc["plan_end"]["loss"] == pytest.approx(wsd.plan_end.loss, abs=1e-4)
    assert [t["step"] for t in doc["targets"]] == pytest.approx([t.step for t in wsd.targets], rel=1e-3)
    assert all(t["status"] == str(Status.FORECAST) for t in doc["targets"])


def test_hours_come_from_the_siblings_clock():
    """Siblings that logged a clock give each target its hours at their median pace (here
    their logs given a clock of 0.25 s a step, the first ``time`` a trainer would log)."""
    from dataclasses import replace

    from tracker_plugin.jobs.plan import siblings_evidence
    from tracker_plugin.report.plan_report import plan_json, plan_text

    read = siblings_evidence(str(SIBLINGS), tp.AnalysisConfig(targets=TARGETS, ema_token_window=WINDOW),
                             SourceOptions(read=ReadOptions(batch_size=1)))
    clocked = [replace(e, seconds=tuple((s, 0.25 * (s - e.curve[0][0])) for s, _ in e.curve)) for e in read.evidence]
    plan = tp.plan_run(clocked, WSD, TARGETS, batch=1, config=tp.AnalysisConfig(targets=TARGETS, ema_token_window=WINDOW))
    assert plan.seconds_per_token == pytest.approx(0.25, rel=1e-6)
    for t in plan.targets:
        assert t.seconds == pytest.approx(0.25 * t.tokens, rel=1e-6)
        assert t.seconds_interval == pytest.approx((0.25 * t.tokens_interval[0], 0.25 * t.tokens_interval[1]), rel=1e-6)
    assert plan.plan_end_seconds == pytest.approx(0.25 * 24000, rel=1e-6)
    doc = plan_json(plan)
    assert doc["throughput"]["seconds_per_token"] == pytest.approx(0.25, rel=1e-6)
    assert [t["seconds"] for t in doc["targets"]] == pytest.approx([t.seconds for t in plan.targets], rel=1e-9)
    text = plan_text(plan)
    assert text.count("hours from the start: ") == 3 and "1.7 h from the start" in text  # 6,000 s to step 24,000


def test_plot_written_by_the_command(capsys, tmp_path):
    path = tmp_path / "plans.png"
    code, _, err = _cli(capsys, "plan", "--siblings", SIBLINGS, "--compare", "--lr-spec", COSINE, "--lr-spec", WSD,
                        *COMMON, "--plot", path)
    assert code == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = _cli(capsys, "plan", "--siblings", SIBLINGS, "--lr-spec", WSD, *COMMON, "--plot", tmp_path / "x.gif")
    assert code == 2 and "cannot write a .gif plot" in err


def test_annotate_writes_the_loss_at_the_plan_end_to_a_running_run(mlflow_server, capsys):
    """A run halfway through its plan on a real server: ``loss_eta_end`` holds the smoothed
    loss its own law forecasts at step 24,000 (a number to sort on), and its text the interval."""
    from mlflow import MlflowClient

    from tests.doubles.mlflow_runs import log_run
    from tracker_plugin.keys import PLAN_END, PLAN_END_TEXT

    client = MlflowClient(mlflow_server.uri)
    experiment_id = client.create_experiment(f"plan-end-{uuid.uuid4().hex[:8]}")
    log = pd.read_csv(TRUTH)
    run_id = log_run(client, experiment_id, log[log.step <= 12000], name="wsdld-half", status="RUNNING")
    code, _, err = _cli(capsys, "annotate", f"mlflow:{run_id}", "--tracking-uri", mlflow_server.uri, "--lr-spec", WSD,
                        *COMMON, "--no-plot", "--no-series")
    assert code == 0, err
    data = client.get_run(run_id).data
    alone = tp.analyze(log[log.step <= 12000], TARGETS, batch_size=1, ema_token_window=WINDOW,
                       lr_schedule=tp.LrSchedule.parse_spec(WSD))
    assert data.metrics[PLAN_END] == pytest.approx(alone.plan_end.loss, rel=1e-3)
    text = data.tags[PLAN_END_TEXT]
    assert text.startswith(f"{data.metrics[PLAN_END]:#.4g} · 80%: ") and text.endswith("· step 24,000 · this run's law")
    # The run alone, halfway, before its decay: a wide interval, which holds where the run really ended.
    low, high = (float(v) for v in re.search(r"80%: ([\d.]+)–([\d.]+)", text).groups())
    _, end = truth()
    assert low < end < high


def test_the_plan_document_is_the_analyze_document_with_no_observed_rows():
    """The same keys as ``analyze --json`` at the top, in each target and in ``plan_end``
    (which adds its hours), so a tool reading one reads the other."""
    from tracker_plugin.report.plan_report import plan_json
    from tracker_plugin.report.render import to_json

    log = pd.read_csv(TRUTH)
    analysis = tp.analyze(log[log.step <= 12000], TARGETS, batch_size=1, ema_token_window=WINDOW,
                          lr_schedule=tp.LrSchedule.parse_spec(WSD))
    theirs, mine = to_json(analysis), plan_json(planned()[0])
    assert set(mine) == set(theirs) and mine["observed"] is None
    for ours, analyzed in zip(mine["targets"], theirs["targets"], strict=True):
        assert set(ours) == set(analyzed)
    assert set(mine["plan_end"]) == set(theirs["plan_end"]) | {"seconds"}
    assert set(mine["project_law"]) >= {"shared", "reason", "siblings", "left_out", "narrowed", "choice", "law", "run"}
    assert mine["project_law"]["run"]["share_of_plan"] == 0.0
    json.dumps(mine, allow_nan=False)  # strict JSON: no NaN or inf
