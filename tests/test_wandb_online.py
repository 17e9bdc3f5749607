"""W&B runs through the real wandb client (and its wandb-core process) against the test server.

What every source must do is in the adapter contract suite, ``test_contract.py``, which
runs over W&B online too. Here: W&B's scans, configs and selection of runs, how the
summary is written, and W&B's errors and time limits.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tracker_plugin import Columns, build_history
from tracker_plugin.cli import main
from tracker_plugin.errors import AuthError, ConfigError, RunNotFound, TrackerUnavailable
from tracker_plugin.report.target_text import target_status
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import ReadOptions, SourceOptions, WandbOptions, open_source
from tracker_plugin.trackers.wandb_runs import WandbSource, run_filters

TARGETS = ["-t", "6", "4.5", "1.5"]  # reached, extrapolated, unreachable on the synthetic runs
W_AND_B_KEYS = {"train_loss": "train/loss", "tokens": "throughput/total_tokens", "lr": "train/lr"}


def wandb_rows(frame: pd.DataFrame, names: dict[str, str] | None = None) -> list[dict]:
    """History rows as a training script logs them: only the keys it logged at each step."""
    names = names or {}
    rows = []
    for record in frame.to_dict("records"):
        row = {names.get(k, k): v for k, v in record.items() if not (isinstance(v, float) and math.isnan(v))}
        row["_step"] = int(row.pop("step"))
        rows.append(row)
    return rows


def assert_same_history(read, expected) -> None:
    assert read.loss_key == expected.loss_key
    for name in ("step", "tokens", "batch", "loss"):
        np.testing.assert_array_equal(getattr(read, name), getattr(expected, name), err_msg=name)
    if expected.lr is None:
        assert read.lr is None
    else:
        np.testing.assert_array_equal(read.lr, expected.lr)


def read_one(spec: str, **options):
    source = open_source(spec, SourceOptions(ReadOptions(**options)))
    runs = source.runs()
    assert len(runs) == 1
    return runs[0], source.read(runs[0]), source


def graphql_ops(server) -> list[str]:
    return [r.operation for r in server.requests if r.operation]


# -- reading ---------------------------------------------------------------------------------
def test_dense_history_reads_back_exactly_in_one_scan(wandb_server):
    frame = synthetic_run(2500, seed=1)
    wandb_server.add_run("ent", "proj", "dense", name="dense-run", history=wandb_rows(frame))
    info, history, _ = read_one("wandb:ent/proj/dense")
    assert (info.ref, info.name, info.state, info.progress) == (
        "wandb:ent/proj/dense",
        "dense-run",
        "finished",
        "_step 2499 rows 2500",  # the last step and the history's rows (no _timestamp logged)
    )
    assert_same_history(history, build_history(frame.rename(columns={"step": "_step"}), run="x"))
    scans = [
        json.loads(r.variables["spec"]) for r in wandb_server.requests if r.operation == "SampledHistoryPage"
    ]
    assert {tuple(sorted(set(s["keys"]))) for s in scans} == {
        ("_step", "global_batch", "lr", "tokens", "train_loss")
    }
    assert "RunSampledHistory" not in graphql_ops(wandb_server) and not wandb_server.unsupported


def test_sparse_keys_are_read_one_at_a_time_and_aligned_on_step(wandb_server):
    # train loss every step, eval loss every 50, lr every 10: W&B names, no batch key.
    frame = synthetic_run(3000, batch=262_144.0, seed=2).drop(columns="global_batch")
    frame["eval/loss"] = np.where(frame.step % 50 == 0, frame.train_loss + 0.1, np.nan)
    frame.loc[frame.step % 10 != 0, "lr"] = np.nan
    frame = frame.rename(columns=W_AND_B_KEYS)
    rows = wandb_rows(frame)
    rows[7]["train/loss"] = math.nan  # a diverged step, logged as NaN
    wandb_server.add_run(
        "ent", "proj", "sparse", history=rows, config={"trainer": {"global_batch_size": 262144}}
    )
    options = {
        "columns": Columns().with_overrides(loss="eval/loss"),
        "batch_params": ("trainer.global_batch_size",),
    }
    _, history, _ = read_one("wandb:ent/proj/sparse", **options)
    expected = build_history(
        frame.rename(columns={"step": "_step"}), run="x", columns=options["columns"], batch_size=262_144.0
    )
    assert_same_history(history, expected)
    assert history.batch_source == "config 'trainer.global_batch_size'"
    assert history.step[:3].tolist() == [0, 50, 100]
    scanned = {
        tuple(sorted(set(json.loads(r.variables["spec"])["keys"])))
        for r in wandb_server.requests
        if r.operation == "SampledHistoryPage"
    }
    assert scanned == {("_step", "eval/loss"), ("_step", "throughput/total_tokens"), ("_step", "train/lr")}
    # the train loss logged as NaN is dropped and counted, not mistaken for "not logged"
    _, train, _ = read_one("wandb:ent/proj/sparse", batch_params=("trainer.global_batch_size",))
    assert train.loss_key == "train/loss" and len(train) == 2999
    assert any("dropped 1 rows whose loss was NaN" in note for note in train.notes)


def test_integers_that_come_back_as_floats_are_integers_again(wandb_server):
    # a trainer's own step key, which a parquet export turns to floats; a float summary step
    frame = synthetic_run(400, seed=3).drop(columns="global_batch")
    rows = wandb_rows(frame)
    for row in rows:
        row["step"] = float(row["_step"] + 10)
    wandb_server.add_run(
        "ent",
        "proj",
        "floats",
        history=rows,
        summary={"_step": 399.0},
        config={"global_batch_size": 524288.0},
    )
    info, history, _ = read_one("wandb:ent/proj/floats")
    assert info.progress == "_step 399 rows 400"
    assert history.step.dtype.kind == "i" and history.step[-1] == 409
    assert history.batch_source == "config 'global_batch_size'" and history.batch[0] == 524288


def test_batch_comes_from_a_metric_then_the_config_then_the_flag(wandb_server):
    frame = synthetic_run(300, seed=4)
    wandb_server.add_run("ent", "proj", "metric", history=wandb_rows(frame), config={"global_batch_size": 1})
    wandb_server.add_run("ent", "proj", "flag", history=wandb_rows(frame.drop(columns="global_batch")))
    _, by_metric, _ = read_one("wandb:ent/proj/metric", batch_size=7.0)
    assert by_metric.batch_source == "column 'global_batch'"
    _, by_flag, _ = read_one("wandb:ent/proj/flag", batch_size=7.0)
    assert by_flag.batch_source == "batch_size" and by_flag.batch[0] == 7.0


def test_planned_lr_schedule_is_read_from_the_config(wandb_server):
    config = {
        "optimizer": {"lr": 6e-4},
        "warmup_steps": 2000,
        "max_steps": 100000.0,
        "lr_scheduler_type": "cosine",
        "min_lr": 6e-5,
    }
    wandb_server.add_run("ent", "proj", "sched", history=wandb_rows(synthetic_run(50)), config=config)
    source = open_source("wandb:ent/proj/sched", SourceOptions())
    plan = source.read(source.runs()[0]).lr_plan
    assert plan.source == "params" and plan.total_steps == 100000
    np.testing.assert_allclose(plan.at([0, 2000, 100000, 120000]), [0, 1, 0.1, 0.1], atol=1e-12)
    wandb_server.add_run("ent", "proj", "none", history=wandb_rows(synthetic_run(50)), config={"seed": 1})
    source = open_source("wandb:ent/proj/none", SourceOptions())
    assert source.read(source.runs()[0]).lr_plan is None


def test_runs_are_selected_by_state_tag_date_and_filter(wandb_server):
    history = wandb_rows(synthetic_run(50))
    for run_id, state, tags, created, lr in [
        ("a", "finished", ["base"], "2024-03-01T00:00:00", 1e-3),
        ("b", "running", ["base", "big"], "2024-04-01T00:00:00", 1e-3),
        ("c", "crashed", ["big"], "2024-05-01T00:00:00", 3e-4),
        ("d", "finished", ["base", "big"], "2024-06-01T00:00:00", 3e-4),
    ]:
        wandb_server.add_run(
            "ent",
            "sel",
            run_id,
            state=state,
            tags=tags,
            created_at=created,
            config={"lr": lr},
            history=history,
        )

    def select(**options) -> list[str]:
        return [
            r.ref.rsplit("/", 1)[1]
            for r in open_source("wandb:ent/sel", SourceOptions(wandb=WandbOptions(**options))).runs()
        ]

    assert select() == ["a", "b", "c", "d"]
    assert select(states=("finished", "crashed")) == ["a", "c", "d"]
    assert select(tags=("base", "big")) == ["b", "d"]
    assert select(created_after="2024-04-15") == ["c", "d"]
    assert select(filter='{"config.lr": 0.0003}', tags=("base",)) == ["d"]
    assert select(states=("running",), created_after="2024-05-01") == []
    states = {r.ref[-1]: r.state for r in open_source("wandb:ent/sel", SourceOptions()).runs()}
    assert states == {"a": "finished", "b": "running", "c": "crashed", "d": "finished"}


def test_each_listing_sees_new_runs_and_new_steps(wandb_server):
    run = wandb_server.add_run("ent", "live", "r1", state="running", history=wandb_rows(synthetic_run(100)))
    source = open_source("wandb:ent/live", SourceOptions())
    assert [(r.ref, r.progress) for r in source.runs()] == [("wandb:ent/live/r1", "_step 99 rows 100")]
    run.log({"train_loss": 3.0}, {"train_loss": 2.9})
    wandb_server.add_run("ent", "live", "r2", history=wandb_rows(synthetic_run(10)))
    assert [(r.ref, r.progress) for r in source.runs()] == [
        ("wandb:ent/live/r1", "_step 101 rows 102"),
        ("wandb:ent/live/r2", "_step 9 rows 10"),
    ]
    assert len(source.read(source.runs()[0])) == 102


def test_listing_pages_through_a_large_project(wandb_server):
    for k in range(120):
        wandb_server.add_run("ent", "big", f"run{k:03d}", history=[{"train_loss": 1.0}])
    refs = [r.ref for r in open_source("wandb:ent/big", SourceOptions()).runs()]
    assert refs == [f"wandb:ent/big/run{k:03d}" for k in range(120)]
    pages = [r.variables.get("cursor") for r in wandb_server.requests if r.operation == "Runs"]
    assert len(pages) == 3


def test_filters_are_merged_and_checked():
    options = WandbOptions(
        filter='{"config.lr": 1}', states=("finished",), tags=("x", "y"), created_after="2024-01-02"
    )
    assert run_filters(options) == {
        "$and": [
            {"config.lr": 1},
            {"state": {"$in": ["finished"]}},
            {"tags": {"$in": ["x"]}},
            {"tags": {"$in": ["y"]}},
            {"createdAt": {"$gt": "2024-01-02T00:00:00"}},
        ]
    }
    assert run_filters(WandbOptions(states=("crashed",))) == {"state": {"$in": ["crashed"]}}
    for bad, message in [
        ({"filter": "{oops"}, "--filter is not W&B filter JSON"),
        ({"filter": "[1]"}, "must be a JSON object"),
        ({"states": ("done",)}, "'done' is not a W&B run state"),
        ({"created_after": "last week"}, "is not a date"),
    ]:
        with pytest.raises(ConfigError, match=message):
            run_filters(WandbOptions(**bad))


def test_run_strings_take_entity_and_project_from_the_options(wandb_server):
    wandb_server.add_run("team", "proj", "r1", history=wandb_rows(synthetic_run(50)))
    wandb_server.add_run(wandb_server.viewer_entity, "mine", "r2", history=wandb_rows(synthetic_run(50)))
    assert [r.ref for r in open_source("wandb:r1", SourceOptions(wandb=WandbOptions(entity="team", project="proj"))).runs()] == [
        "wandb:team/proj/r1"
    ]
    assert [r.ref for r in open_source("wandb:", SourceOptions(wandb=WandbOptions(entity="team", project="proj"))).runs()] == [
        "wandb:team/proj/r1"
    ]
    assert [r.ref for r in open_source("wandb:team/proj/runs/r1", SourceOptions()).runs()] == [
        "wandb:team/proj/r1"
    ]
    # no entity: the API key's default entity
    assert [r.ref for r in open_source("wandb:", SourceOptions(wandb=WandbOptions(project="mine"))).runs()] == [
        f"wandb:{wandb_server.viewer_entity}/mine/r2"
    ]
    with pytest.raises(ConfigError, match="does not name runs"):
        open_source("wandb:just-one-name", SourceOptions())
    with pytest.raises(RunNotFound, match=r"^wandb:team/proj/nope: not found on W&B"):
        open_source("wandb:team/proj/nope", SourceOptions()).runs()
    with pytest.raises(RunNotFound, match=r"^wandb:team/nothing: not found on W&B"):
        open_source("wandb:team/nothing", SourceOptions()).runs()


def test_a_missing_loss_key_names_the_keys_the_run_has(wandb_server, capsys):
    wandb_server.add_run("ent", "proj", "r", history=[{"acc": 0.5}, {"acc": 0.6}])
    assert main(["analyze", "wandb:ent/proj/r", "-t", "3", "--batch-size", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: wandb:ent/proj/r: no loss column 'train_loss' or 'train/loss' or 'loss' or "
        "'train/CrossEntropyLoss'; columns are ['_step', 'acc'] (choose one with --loss-col)"
    )
    assert "SampledHistoryPage" not in graphql_ops(wandb_server)


# -- writing ---------------------------------------------------------------------------------
@pytest.fixture
def two_runs(wandb_server):
    frame = synthetic_run(3000, seed=5)
    summary = {"best/val_loss": 3.1, "notes": "keep me", "nested": {"a": 1}}
    config = {"global_batch_size": 524288, "model": {"width": 768}}
    a = wandb_server.add_run(
        "ent", "proj", "ra", name="run-a", history=wandb_rows(frame), summary=summary, config=config
    )
    b = wandb_server.add_run(
        "ent",
        "proj",
        "rb",
        name="run-b",
        history=wandb_rows(frame.iloc[:2000]),
        state="running",
        config=config,
        tags=["x"],
    )
    return a, b


def annotate(capsys, *args):
    code = main(["annotate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def _unchanged(out: str) -> set[str]:
    """The runs the summary table says are unchanged (it has a row per run and target)."""
    header, *rows = out.splitlines()
    run, action = header.split().index("run"), header.split().index("action")
    return {row.split()[run] for row in rows if row.split() and row.split()[action] == "unchanged"}


def test_annotate_writes_the_summary_in_two_updates_and_rereads_only_runs_that_moved_on(
    wandb_server, two_runs, capsys
):
    # What the contract suite (tests/test_contract.py) does not: a project's runs, how the
    # summary is sent, and a second pass that sends and reads nothing.
    _, b = two_runs
    code, out, err = annotate(capsys, "wandb:ent/proj", *TARGETS)
    assert code == 0, err
    assert "run-a" in out and "reached" in out and "forecast_beyond_plan" in out
    for run in two_runs:
        report = json.loads(run.files["loss_eta.json"])
        assert report["run"] == f"wandb:ent/proj/{run.run_id}"
        assert target_status(run.summary["when_4p5"]) == "forecast_beyond_plan"
        assert run.summary["when_4p5_Btok"] == pytest.approx(report["targets"][1]["tokens"] / 1e9, rel=1e-3)
        assert "when_1p5_Btok" not in run.summary  # unreachable: no number to sort on
        assert json.loads(run.summary["loss_eta"])["progress"].startswith(f"_step {run.history[-1]['_step']} rows ")
    # the markers go last: only the final summary update of each run carries them
    upserts = [r for r in wandb_server.mutations(run="ra") if r.operation == "UpsertBucket"]
    written = [json.loads(r.variables["summaryMetrics"]) for r in upserts]
    assert "loss_eta_marker" not in written[0] and "loss_eta_marker" in written[-1]
    assert all(set(r.variables) <= {"id", "summaryMetrics"} for r in upserts)  # never config, state or tags
    assert not any(r.operation == "file_stream" for r in wandb_server.requests)

    # a second annotate reads nothing and writes nothing
    wandb_server.requests.clear()
    code, out, _ = annotate(capsys, "wandb:ent/proj", *TARGETS)
    assert code == 0 and _unchanged(out) == {"run-a", "run-b"}, out
    assert wandb_server.mutations() == [] and "SampledHistoryPage" not in graphql_ops(wandb_server)

    # new steps on the running run: only that run is analysed again
    b.log(*wandb_rows(synthetic_run(2100, seed=5).iloc[2000:]))
    wandb_server.requests.clear()
    code, out, _ = annotate(capsys, "wandb:ent/proj", *TARGETS)
    assert code == 0 and _unchanged(out) == {"run-a"}, out  # run-b moved on
    assert json.loads(b.summary["loss_eta"])["progress"].startswith("_step 2099 ") and wandb_server.mutations(run="ra") == []


def test_a_stale_value_is_removed_when_a_target_has_no_number_any_more(wandb_server, two_runs, capsys):
    a, _ = two_runs
    a.summary["when_1p5_Btok"] = 1230.0  # from an earlier, different analysis
    a.summary["when_1p5"] = "forecast_beyond_plan · 1.23T tok"
    # and keys of the earlier layout, which an earlier version wrote
    a.summary["loss_eta/target_1p50/tokens"] = 1.23e12
    a.summary["loss_eta/target_1p50/status"] = "forecast_beyond_plan"
    a.files["loss_eta/loss_eta.json"] = b"{}"
    assert annotate(capsys, "wandb:ent/proj/ra", *TARGETS)[0] == 0
    assert "when_1p5_Btok" not in a.summary and target_status(a.summary["when_1p5"]) == "unreachable"
    assert not any(key.startswith("loss_eta/") for key in a.summary)
    assert "loss_eta/loss_eta.json" not in a.files and "loss_eta.json" in a.files
    assert a.summary["best/val_loss"] == 3.1


def test_dry_run_says_what_it_would_write(wandb_server, two_runs, capsys):
    code, out, _ = annotate(capsys, "wandb:ent/proj/ra", *TARGETS, "--dry-run")
    assert code == 0
    assert "(wandb:ent/proj/ra): would annotate: no annotation yet" in out
    assert re.search(r"^  when_6 +\(none\) → '✓ [^']+ · reached · [^']+'$", out, re.M), out
    assert "  to: summary keys and files loss_eta.json, loss_eta.png of wandb:ent/proj/ra" in out


def test_project_option_alone_names_the_runs(wandb_server, two_runs, capsys):
    code, out, _ = annotate(capsys, "-e", "ent", "-p", "proj", *TARGETS, "--state", "running")
    assert code == 0 and "run-b" in out and "run-a" not in out
    assert "loss_eta" in two_runs[1].summary and "loss_eta" not in two_runs[0].summary


def test_compare_reads_wandb_runs_without_writing(wandb_server, two_runs, capsys):
    assert main(["compare", "wandb:ent/proj", "-t", "6", "--json"]) == 0
    (table,) = json.loads(capsys.readouterr().out)
    assert {r["ref"] for r in table["rows"]} == {"wandb:ent/proj/ra", "wandb:ent/proj/rb"}
    assert wandb_server.mutations() == []


@pytest.mark.slow
def test_watch_rereads_wandb_every_pass_until_the_runs_finish(wandb_server, two_runs, capsys, monkeypatch):
    import time as time_module

    _, running = two_runs
    passes = []

    def between_passes(seconds: float) -> None:  # the run moves on, then finishes
        passes.append(seconds)
        running.log(*wandb_rows(synthetic_run(2100, seed=5).iloc[2000:]))
        running.state = "finished"

    monkeypatch.setattr(time_module, "sleep", between_passes)
    assert main(["watch", "wandb:ent/proj", *TARGETS, "--every", "0.5", "--max-cycles", "3"]) == 0
    err = capsys.readouterr().err
    assert "pass 1: 2 annotated; 1 still running" in err and "pass 2: 1 unchanged, 1 annotated; 0 still running" in err
    assert passes == [30.0] and json.loads(running.summary["loss_eta"])["progress"].startswith("_step 2099 ")


# -- errors ----------------------------------------------------------------------------------
TIMEOUT, UPLOAD_TIMEOUT = 3.0, 2.0


@pytest.fixture
def short_timeouts(monkeypatch):
    """Sources opened by the CLI wait TIMEOUT s for a request, UPLOAD_TIMEOUT s for an upload."""
    opened = WandbSource.from_options.__func__

    def short(cls, spec, options):
        wandb = replace(options.wandb, timeout=TIMEOUT, upload_timeout=UPLOAD_TIMEOUT)
        return opened(cls, spec, replace(options, wandb=wandb))

    monkeypatch.setattr(WandbSource, "from_options", classmethod(short))


def assert_one_line(text: str, server) -> None:
    assert "Traceback" not in text and server.api_key not in text


def test_refused_api_key_is_one_line_naming_the_run_and_writes_nothing(
    wandb_server, two_runs, capsys, monkeypatch
):
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    code, out, err = annotate(capsys, "wandb:ent/proj/ra", *TARGETS)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: wandb:ent/proj/ra: W&B refused the credentials (HTTP 401); check WANDB_API_KEY or run `wandb login`"
    ]
    assert "0" * 40 not in err
    assert wandb_server.mutations() == []


def test_no_api_key_at_all_is_one_line(wandb_server, two_runs, capsys, monkeypatch, tmp_path):
    from wandb.sdk import wandb_setup

    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc either
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    # wandb keeps the key it saw when it first loaded its settings in this process
    monkeypatch.setattr(wandb_setup.singleton().settings, "api_key", None)
    code, out, err = annotate(capsys, "wandb:ent/proj", *TARGETS)
    assert code == 2 and out == ""
    assert err.strip() == "error: wandb:ent/proj: no W&B API key: set WANDB_API_KEY or run `wandb login`"


def test_404_on_one_run_fails_that_run_alone(wandb_server, two_runs, capsys):
    wandb_server.fail(404, run="rb", operation="SampledHistoryPage")
    code, out, err = annotate(capsys, "wandb:ent/proj", *TARGETS)
    assert code == 1
    failed = [line for line in out.splitlines() if line.startswith("run-b")]
    assert len(failed) == 1 and "failed" in failed[0] and "not found on W&B (HTTP 404)" in failed[0]
    assert_one_line(out + err, wandb_server)
    assert wandb_server.mutations(run="rb") == [] and wandb_server.mutations(run="ra")


@pytest.mark.slow
def test_500_forever_fails_in_bounded_time_naming_the_run(wandb_server, two_runs, capsys, short_timeouts):
    wandb_server.fail(500, run="rb")
    start = time.monotonic()
    code, out, err = annotate(capsys, "wandb:ent/proj", *TARGETS, "--json")
    elapsed = time.monotonic() - start
    rows = json.loads(out)
    assert code == 1 and [(r["run"], r["status"]) for r in rows] == [
        ("run-a", "reached"),
        ("run-a", "forecast_beyond_plan"),
        ("run-a", "unreachable"),
        ("run-b", "failed"),
    ]
    assert rows[-1]["note"] == "W&B did not answer within 3 s"
    assert elapsed < 20
    assert_one_line(out + err, wandb_server)
    assert wandb_server.mutations(run="rb") == []
    attempts = len([r for r in wandb_server.requests if r.status == 500])
    time.sleep(3)  # wandb cancels the request it gave up on: no more attempts
    assert 1 <= attempts == len([r for r in wandb_server.requests if r.status == 500])


def test_500_forever_on_a_single_run_is_one_line_and_exit_2(wandb_server, two_runs, capsys, short_timeouts):
    wandb_server.fail(500, operation="Run")
    code, out, err = annotate(capsys, "wandb:ent/proj/ra", *TARGETS)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["error: wandb:ent/proj/ra: W&B did not answer within 3 s"]
    assert wandb_server.mutations() == []


@pytest.mark.slow
def test_rate_limits_are_retried_then_reported(wandb_server, two_runs, capsys, short_timeouts, monkeypatch):
    from wandb.sdk import wandb_setup

    wandb_server.fail(429, operation="SampledHistoryPage", times=1)  # wandb retries this away
    assert annotate(capsys, "wandb:ent/proj/ra", *TARGETS)[0] == 0
    wandb_server.fail(429, operation="UpsertBucket")  # forever: reported, the annotation stays incomplete
    code, out, _ = annotate(capsys, "wandb:ent/proj/rb", *TARGETS)
    assert code == 1 and "W&B did not answer within 3 s" in out
    assert "loss_eta_marker" not in two_runs[1].summary  # so the next run redoes it
    # wandb's own retry settings are the user's: with them, wandb-core's error comes back
    monkeypatch.setattr(wandb_setup.singleton().settings, "x_graphql_retry_max", 1)  # WANDB__GRAPHQL_RETRY_MAX=1
    code, out, _ = annotate(capsys, "wandb:ent/proj/rb", *TARGETS)
    assert code == 1 and "W&B kept rate-limiting the requests (HTTP 429 after 2 attempts)" in out


def test_a_failed_write_does_not_leave_a_complete_looking_annotation(
    wandb_server, two_runs, capsys, short_timeouts
):
    wandb_server.fail(500, operation="PUT", times=1)  # the file upload; wandb-core retries it later
    code, out, _ = annotate(capsys, "wandb:ent/proj/ra", *TARGETS)
    assert code == 1 and "W&B did not answer within 2 s (uploading loss_eta.json)" in out
    assert "loss_eta_marker" not in two_runs[0].summary
    deadline = time.monotonic() + 30  # the upload given up on may still land: let it
    while not any(r.method == "PUT" and r.status == 200 for r in wandb_server.requests):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    code, out, _ = annotate(capsys, "wandb:ent/proj/ra", *TARGETS)
    assert code == 0 and "unchanged" not in out and "loss_eta_marker" in two_runs[0].summary


def test_api_key_never_appears_in_exceptions(wandb_server, two_runs):
    source = WandbSource("ent/proj", wandb=WandbOptions(timeout=TIMEOUT))
    infos = source.runs()
    wandb_server.fail(503, run="ra")
    wandb_server.fail(403, run="rb")
    errors = []
    for info in infos:
        try:
            source.read(info)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    assert [type(e) for e in errors] == [TrackerUnavailable, AuthError]
    for exc in errors:
        text = str(exc) + repr(exc.args)
        assert wandb_server.api_key not in text and "\n" not in str(exc)
        assert exc.__cause__ is None and exc.__suppress_context__
