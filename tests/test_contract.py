"""One adapter contract, run over every source.

Each case puts one run in its tracker the way a training script would: the same frame
(``step, tokens, global_batch, lr, train_loss``) and keys of the user's own (an
``accuracy`` metric; params, config, tags or summary values). Through the jobs layer
that ``annotate`` uses, each case then checks that:

- a read equals the logged frame;
- a dry run writes nothing;
- a second write of the same annotation adds nothing (no metric rows, the same bytes),
  and the run then lists as current;
- nothing but the annotation's own keys and files is touched, and nothing process-wide
  (the environment, wandb's settings) is changed;
- a write cut short after the metrics, before the completion markers, is redone by the
  next run.

The sources: a CSV file, MLflow's local sqlite store, a real ``mlflow server``, W&B
online (the real wandb client against
:class:`~tests.doubles.wandb_server.WandbServer`) and W&B offline (a run
directory the real SDK writes in offline mode). What is particular to one tracker is
tested in its own file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.doubles.wandb_offline_runs import log_offline_runs
from tracker_plugin import AnalysisConfig, build_history
from tracker_plugin.core.analysis import run_analysis
from tracker_plugin.errors import SourceError
from tracker_plugin.jobs.annotation import build_annotation, settings_of
from tracker_plugin.jobs.runner import Outcome, process_runs
from tracker_plugin.keys import (
    ARTIFACT_JSON,
    ARTIFACT_PNG,
    JSON_PATH,
    MARKER,
    PNG_PATH,
    STALE,
    content_hash,
    is_own,
    target_key,
)
from tracker_plugin.testing import synthetic_run
from tracker_plugin.trackers import (
    MlflowOptions,
    ReadOptions,
    Source,
    SourceOptions,
    WandbOptions,
    open_source,
)
from tracker_plugin.trackers.base import Annotation, previous_of

FRAME = synthetic_run(400, batch=4_194_304.0, seed=7)
ACCURACY = np.linspace(0.1, 0.9, len(FRAME))
CONFIG = AnalysisConfig(targets=(5.5, 4.0), model="power-law")
CASES = ["csv", "mlflow-sqlite", "mlflow-server", "wandb-online", "wandb-offline"]


def _own(key: str) -> bool:
    return is_own(key)


class Case:
    """One run in one source, and what can be seen of it there."""

    spec: str
    options: SourceOptions = SourceOptions()

    def open(self) -> Source:
        return open_source(self.spec, self.options)

    def user(self) -> dict[str, Any]:
        """The user's own part of the run, which annotating must not touch."""
        raise NotImplementedError

    def rows(self) -> dict[str, Any]:
        """What a second write must not grow: history lengths, file bytes."""
        raise NotImplementedError

    def keys(self) -> dict[str, Any]:
        """The annotation's keys as the tracker stores them (none for a CSV file)."""
        raise NotImplementedError

    def files(self) -> dict[str, bytes]:
        """The annotation's files as the tracker stores them."""
        raise NotImplementedError

    def all_files(self) -> dict[str, bytes]:
        """Every file of the run, ours and the user's, by its path in the run."""
        return self.files()

    def complete(self) -> bool:
        """Is the completion marker there, and do the keys match it?"""
        previous = previous_of(self.keys())
        return previous is not None and previous.complete


class CsvCase(Case):
    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "run.csv"
        FRAME.assign(accuracy=ACCURACY).to_csv(self.path, index=False)
        self.spec = str(self.path)

    def user(self) -> dict[str, Any]:
        return {"csv": self.path.read_bytes()}

    def rows(self) -> dict[str, Any]:
        return {**self.user(), **self.files()}

    def keys(self) -> dict[str, Any]:
        return {}

    def files(self) -> dict[str, bytes]:
        found = {JSON_PATH: self.path.with_name(f"run.{ARTIFACT_JSON}"), PNG_PATH: self.path.with_name(f"run.{ARTIFACT_PNG}")}
        return {name: path.read_bytes() for name, path in found.items() if path.exists()}

    def complete(self) -> bool:
        return JSON_PATH in self.files()  # the report is the marker


class MlflowCase(Case):
    def __init__(self, uri: str, tmp: Path, *, local: bool) -> None:
        from mlflow.tracking import MlflowClient

        from tests.doubles.mlflow_runs import log_run

        self.client, self.tmp = MlflowClient(uri), tmp
        location = (tmp / "artifacts").as_uri() if local else None
        experiment = self.client.create_experiment(f"contract-{uuid.uuid4().hex[:10]}", artifact_location=location)
        self.run_id = log_run(
            self.client, experiment, FRAME.assign(accuracy=ACCURACY), name="contract",
            params={"seed": 1, "optimizer": "adamw"}, tags={"team": "lm"},
        )  # fmt: skip
        self.spec = f"mlflow:{self.run_id}"
        self.options = SourceOptions(ReadOptions(cache_dir=str(tmp / "cache")), MlflowOptions(tracking_uri=uri))

    def _run(self) -> Any:
        return self.client.get_run(self.run_id)

    def user(self) -> dict[str, Any]:
        run = self._run()
        metrics = {k: v for k, v in run.data.metrics.items() if not _own(k)}
        return {
            "status": run.info.status,
            "end_time": run.info.end_time,
            "params": dict(run.data.params),
            "tags": {k: v for k, v in run.data.tags.items() if not _own(k)},
            "metrics": metrics,
            "rows": {k: len(self.client.get_metric_history(self.run_id, k)) for k in metrics},
        }

    def rows(self) -> dict[str, Any]:
        keys = self._run().data.metrics
        return {
            "rows": {k: len(self.client.get_metric_history(self.run_id, k)) for k in keys},
            "files": self.files(),
        }

    def keys(self) -> dict[str, Any]:
        data = self._run().data
        return {k: v for k, v in {**data.metrics, **data.tags}.items() if _own(k)}

    def files(self, folder: str | None = None) -> dict[str, bytes]:
        out = {}
        for info in self.client.list_artifacts(self.run_id, folder):
            if info.is_dir:
                out.update(self.files(info.path))
                continue
            target = self.tmp / "downloads" / uuid.uuid4().hex
            out[info.path] = Path(self.client.download_artifacts(self.run_id, info.path, str(target))).read_bytes()
        return out


class WandbCase(Case):
    def __init__(self, server: Any) -> None:
        rows = []
        for record in FRAME.assign(accuracy=ACCURACY).to_dict("records"):
            record["_step"] = int(record.pop("step"))
            rows.append(record)
        self.run = server.add_run(
            "ent", "contract", "run1", name="contract", history=rows,
            config={"seed": 1, "optimizer": {"name": "adamw"}}, summary={"notes": "keep me"}, tags=["x"],
        )  # fmt: skip
        self.spec = "wandb:ent/contract/run1"

    def user(self) -> dict[str, Any]:
        run = self.run
        summary = {k: v for k, v in run.summary.items() if not _own(k)}
        return {"config": run.config, "state": run.state, "tags": run.tags, "summary": summary, "history": run.history}

    def rows(self) -> dict[str, Any]:
        return {"history": len(self.run.history), "summary": dict(self.run.summary), "files": self.files()}

    def keys(self) -> dict[str, Any]:
        return {k: v for k, v in self.run.summary.items() if _own(k)}

    def files(self) -> dict[str, bytes]:
        return dict(self.run.files)


class WandbOfflineCase(Case):
    def __init__(self, logged: Path, tmp: Path) -> None:
        from tracker_plugin.trackers.wandb_log import read_log

        self.run_dir = tmp / "wandb" / logged.name
        shutil.copytree(logged, self.run_dir)
        self.file = next(self.run_dir.glob("run-*.wandb"))
        self.exit_at = list(read_log(self.file.read_bytes()))[-1].offset  # the SDK's exit record
        self.spec = f"wandb-offline:{self.run_dir}"

    def _read(self) -> Any:
        from tracker_plugin.trackers.wandb_offline import read_offline_run

        return read_offline_run(self.file, ["accuracy", "train_loss"], ref=self.spec)

    def user(self) -> dict[str, Any]:
        run = self._read()
        summary = {k: v for k, v in run.summary.items() if not _own(k)}
        return {"config": run.config, "summary": summary, "history": run.data, "bytes": self.file.read_bytes()[: self.exit_at]}

    def rows(self) -> dict[str, Any]:
        return {"wandb": self.file.read_bytes(), "files": self.files()}

    def keys(self) -> dict[str, Any]:
        return {k: v for k, v in self._read().summary.items() if _own(k)}

    def files(self) -> dict[str, bytes]:
        folder = self.run_dir / "files"
        return {name: (folder / name).read_bytes() for name in (JSON_PATH, PNG_PATH) if (folder / name).exists()}

    def all_files(self) -> dict[str, bytes]:
        folder = self.run_dir / "files"
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="session")
def offline_run(tmp_path_factory) -> Path:
    """One offline run written by the real SDK: the frame, a config and a summary of the user's."""
    rows = [
        {k: (int(v) if k == "step" else v) for k, v in record.items()}
        for record in FRAME.assign(accuracy=ACCURACY).to_dict("records")
    ]
    spec = {"name": "contract", "rows": rows, "config": {"seed": 1}, "summary": {"keep_me": 42}}
    (run_dir,) = log_offline_runs(tmp_path_factory.mktemp("contract-offline"), [spec]).values()
    return run_dir


@pytest.fixture(params=CASES)
def case(request, tmp_path) -> Case:
    kind = request.param
    if kind == "csv":
        return CsvCase(tmp_path)
    if kind == "mlflow-sqlite":
        return MlflowCase(request.getfixturevalue("sqlite_store"), tmp_path, local=True)
    if kind == "mlflow-server":
        return MlflowCase(request.getfixturevalue("mlflow_server").uri, tmp_path, local=False)
    if kind == "wandb-online":
        return WandbCase(request.getfixturevalue("wandb_server"))
    return WandbOfflineCase(request.getfixturevalue("offline_run"), tmp_path)


def annotate(
    case: Case, *, dry_run: bool = False, source: Source | None = None, config: AnalysisConfig = CONFIG
) -> Outcome:
    """One annotate pass over the case's run, as the command runs it."""
    source = source or case.open()
    try:
        (outcome,) = process_runs(source, source.runs(), config, write=True, dry_run=dry_run, progress=False)
    finally:
        source.close()
    return outcome


def expected_annotation(case: Case) -> tuple[Source, Any, Annotation]:
    """The source, its run as listed now, and the annotation the jobs layer builds for it."""
    source = case.open()
    (run,) = source.runs()
    settings = settings_of(CONFIG, source.options.columns, source.options.batch_size)
    return source, run, build_annotation(
        run_analysis(source.read(run), CONFIG), settings, progress=run.progress, run_name=run.name
    )


def process_wide() -> dict[str, Any]:
    """What no source may change in the process: the environment and wandb's settings."""
    state: dict[str, Any] = {"environ": dict(os.environ)}
    try:
        from wandb.sdk import wandb_setup
    except ImportError:
        return state
    state["wandb"] = wandb_setup.singleton().settings.model_dump()
    return state


# -- the contract ------------------------------------------------------------------------------


def test_a_read_equals_the_logged_frame(case):
    source = case.open()
    (run,) = source.runs()
    history = source.read(run)
    expected = build_history(FRAME, run="expected")
    assert history.loss_key == "train_loss" and len(history) == len(FRAME)
    for name in ("step", "tokens", "batch", "loss", "lr"):
        np.testing.assert_array_equal(getattr(history, name), getattr(expected, name), err_msg=name)
    assert history.step.dtype.kind == "i"


def test_a_dry_run_writes_nothing(case):
    before = (case.user(), case.rows(), case.keys(), case.files())
    outcome = annotate(case, dry_run=True)
    assert outcome.action == "dry run" and outcome.planned, outcome.error
    assert (case.user(), case.rows(), case.keys(), case.files()) == before


def test_a_second_write_adds_nothing_and_the_run_is_then_current(case):
    assert annotate(case).action == "annotated"
    first = case.rows()
    source, run, annotation = expected_annotation(case)
    assert annotation.is_current(run.previous)  # listed again, the run says it is annotated
    source.write(run, annotation)  # the same annotation once more, as --force would
    source.close()
    assert case.rows() == first
    assert annotate(case).action == "unchanged"


def test_only_the_annotation_is_written_and_the_users_own_keys_are_untouched(case):
    # The wandb SDK records its wandb-core service in WANDB_SERVICE the first time anything
    # in the process uses it (wandb/sdk/lib/service/service_connection.py); a dry run first
    # makes the test's outcome not hang on which test used it first in this worker.
    assert annotate(case, dry_run=True).action == "dry run"
    before, untouched = case.user(), process_wide()
    assert annotate(case).action == "annotated"
    assert case.user() == before
    assert process_wide() == untouched
    _, _, annotation = expected_annotation(case)
    files = case.files()
    assert files[JSON_PATH] == annotation.report_bytes() and files[PNG_PATH].startswith(b"\x89PNG")
    stored = case.keys()
    if isinstance(case, CsvCase):
        assert stored == {}  # a CSV run's annotation is its report
        return
    assert set(stored) <= {*annotation.keys(), MARKER}
    assert {k: stored[k] for k in annotation.labels} == annotation.labels
    assert stored[MARKER] == annotation.marker()
    for key, value in annotation.metrics.items():
        if value is None:  # no number: no key, or a NaN (MLflow) where one was cleared
            assert key not in stored or math.isnan(stored[key]), key
        else:
            assert stored[key] == pytest.approx(value, rel=1e-12), key


def test_a_write_cut_short_before_the_markers_is_redone_by_the_next_run(case, monkeypatch):
    source = case.open()

    def cut_short(self: Source, run: Any, annotation: Annotation) -> None:
        raise SourceError("cut short before the markers", run=run.ref)

    with monkeypatch.context() as patch:
        patch.setattr(type(source), "write_markers", cut_short)
        outcome = annotate(case, source=source)
    assert outcome.action == "failed" and outcome.error == "cut short before the markers"
    assert not case.complete()
    assert case.files()  # what went before the markers is there
    outcome = annotate(case)
    assert outcome.action == "annotated" and case.complete()
    assert annotate(case).action == "unchanged"


def test_a_dropped_target_is_cleared_and_the_marker_commits_to_what_is_there(case):
    assert annotate(case).action == "annotated"
    fewer = AnalysisConfig(targets=(5.5,), model="power-law")
    outcome = annotate(case, config=fewer)
    assert outcome.action == "annotated", outcome.error
    assert case.complete()
    report = json.loads(case.files()[JSON_PATH])
    assert [t["target"] for t in report["targets"]] == [5.5]
    stored = case.keys()
    if isinstance(case, CsvCase):
        return  # the report is the whole annotation
    dropped = {k: v for k, v in stored.items() if k.startswith(target_key(4.0))}
    assert dropped[target_key(4.0)] == STALE
    numbers = {k: v for k, v in dropped.items() if k != target_key(4.0)}
    assert all(isinstance(v, float) and math.isnan(v) for v in numbers.values()), numbers  # NaN, or removed (W&B)
    assert stored[MARKER] == content_hash(stored)
    assert annotate(case, config=fewer).action == "unchanged"


def test_artifacts_go_to_the_top_where_compare_views_list_them_and_the_users_own_files_are_untouched(case):
    user_file = b'{"mine": true}\n'
    if isinstance(case, MlflowCase):
        for folder in ("mine", None):
            path = case.tmp / (folder or "top") / "notes.json"
            path.parent.mkdir()
            path.write_bytes(user_file)
            case.client.log_artifact(case.run_id, str(path), artifact_path=folder)
    elif isinstance(case, WandbCase):
        case.run.files["notes.json"] = case.run.files["mine/notes.json"] = user_file
    elif isinstance(case, WandbOfflineCase):
        (case.run_dir / "files" / "mine").mkdir(parents=True)
        for name in ("notes.json", "mine/notes.json"):
            (case.run_dir / "files" / name).write_bytes(user_file)
    assert annotate(case).action == "annotated"
    files = case.all_files()
    assert set(files) >= {JSON_PATH, PNG_PATH} and "/" not in JSON_PATH + PNG_PATH
    if not isinstance(case, CsvCase):
        assert files["notes.json"] == files["mine/notes.json"] == user_file


# -- options -----------------------------------------------------------------------------------


def test_each_adapter_is_given_the_shared_options_and_its_own_trackers_only(tmp_path):
    from tracker_plugin.cli.options import make_source_options

    flags = {
        "step_col": (), "loss_col": ("val_loss",), "tokens_col": (), "batch_col": (), "lr_col": (),
        "batch_size": 1024.0, "tracking_uri": "sqlite:///x.db", "experiment_ids": ("3",), "entity": "team",
        "project": "proj", "filter_": '{"config.lr": 1}', "states": ("finished",), "tags": ("base",),
        "created_after": None, "batch_params": ("tokens_per_step",), "workers": 2, "cache_dir": None,
        "no_cache": True,
    }  # fmt: skip
    options = make_source_options(dict(flags))
    assert (options.read.columns.loss, options.read.batch_size, options.read.batch_params) == (
        ("val_loss",), 1024.0, ("tokens_per_step",),
    )  # fmt: skip
    assert (options.read.workers, options.read.use_cache) == (2, False)
    assert options.mlflow == MlflowOptions(tracking_uri="sqlite:///x.db", experiment_ids=("3",), filter=flags["filter_"])
    assert options.wandb == WandbOptions(entity="team", project="proj", tags=("base",), filter=flags["filter_"])
    assert options.states == ("finished",)
    mlflow = open_source("mlflow:abc", options)
    assert mlflow.options is options.read and mlflow.mlflow is options.mlflow
    wandb = open_source("wandb:team/proj", options)
    assert wandb.options is options.read and wandb.wandb.states == ("finished",)  # asked of the server too
    csv = open_source(str(tmp_path / "run.csv"), options)
    assert csv.options is options.read and not hasattr(csv, "mlflow") and not hasattr(csv, "wandb")
    assert open_source(f"wandb-offline:{tmp_path}", options).options is options.read
