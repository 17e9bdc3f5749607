"""The trainer fixtures in ``tests/data/frameworks/``, read by the tests and benchmarks alike.

A fixture is named as the tests name it: ``mlflow:RUN_NAME`` (a run in an MLflow store,
found by its name), ``wandb-offline:PATH`` or a file path, both under the fixtures folder.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from tracker_plugin.frame.history import History
from tracker_plugin.trackers import ReadOptions
from tracker_plugin.trackers.csvfile import CsvSource
from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

FRAMEWORKS = Path(__file__).parent / "data" / "frameworks"


def unpacked_store(relative: str, folder: Path) -> str:
    """An MLflow store of the fixtures as a sqlite URI (a gzipped one unpacked into ``folder``)."""
    path = FRAMEWORKS / relative
    if relative.endswith(".gz"):
        target = folder / relative.removesuffix(".gz")
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(path, "rb") as raw, target.open("wb") as out:
                shutil.copyfileobj(raw, out)
        path = target
    return f"sqlite:///{path}"


def read_fixture(spec: str, options: ReadOptions, tracking_uri: str | None = None) -> History:
    """The one run ``spec`` names, read with ``options`` (MLflow runs from ``tracking_uri``)."""
    source: CsvSource | WandbOfflineSource | object
    if spec.startswith("mlflow:"):
        from mlflow import MlflowClient

        from tracker_plugin.trackers.mlflow_runs import MlflowSource
        from tracker_plugin.trackers.options import MlflowOptions

        assert tracking_uri is not None, f"{spec} needs the store it is in"
        client = MlflowClient(tracking_uri)
        name = spec.removeprefix("mlflow:")
        (run_id,) = [run.info.run_id for experiment in client.search_experiments()
                     for run in client.search_runs([experiment.experiment_id]) if run.info.run_name == name]
        source = MlflowSource(run_id, options, MlflowOptions(tracking_uri=tracking_uri))
    elif spec.startswith("wandb-offline:"):
        source = WandbOfflineSource(str(FRAMEWORKS / spec.removeprefix("wandb-offline:")), options)
    else:
        source = CsvSource(str(FRAMEWORKS / spec), options)
    (run,) = source.runs()  # type: ignore[attr-defined]
    return source.read(run)  # type: ignore[attr-defined]
