"""MLflow runs: ``mlflow:RUN_ID``, ``mlflow:experiment/NAME_OR_ID``, or ``--experiment-id``.

Reading
    A run's metric histories are read in full: from a server with MLflow's documented
    ``GET /api/2.0/mlflow/metrics/get-history`` REST call, paged with
    ``max_results``/``page_token``, over plain HTTP with an explicit timeout and bounded
    retries (:mod:`.mlflow_rest`), keys (and, through the runner, runs) fetched
    concurrently (``--workers``); from a local store, or a server only MLflow's own client
    can authenticate with, through ``MlflowClient.get_metric_history``. The sampled
    ``get-history-bulk-interval`` and the capped ``get-history-bulk`` (25,000 points) are
    never used. Everything else goes through ``MlflowClient``. A server is checked to
    answer at all before the first ``MlflowClient`` call, so a server that is not there
    fails in seconds, not after MLflow's own retries. Keys are aligned on
    MLflow's own step; where a resumed run logged a step again, the value with the latest
    timestamp wins. MLflow stores a logged infinity as the largest float; it is read
    back as infinity, so the frame drops and counts it like a NaN.

    Finished runs are cached locally (:mod:`tracker_plugin.trackers.cache`), keyed by the tracking
    URI with its credentials cut (the host and path), run id, keys read and each key's last
    step and time.

Writing
    Through :class:`mlflow.MlflowClient` by run id, never ``mlflow.start_run`` (which would
    set a finished run back to RUNNING). Metrics are logged at the run's last analysed
    step in one ``log_batch``; labels become tags; ``loss_eta.json`` and ``loss_eta.png``
    go to the top of the run's artifacts (where MLflow's compare view lists them); the tag
    ``loss_eta_marker`` is written last. A metric whose latest value at that
    step is already the value to write is not logged again, so annotating twice adds no
    metric rows.

    Two jobs writing one run at once: each metric row's timestamp is worked out from the
    run as read (one past the latest timestamp of any of its metrics), not from the
    clock, so two jobs that read the same run and write the same values write identical
    rows, which MLflow's SQL store keeps once (a metric row's identity is its key, value,
    timestamp and step). Jobs with different values converge: the run is read back after
    the marker and written again until its keys match its marker (see
    :meth:`~tracker_plugin.trackers.base.Source.write`).

Unchanged
    A run's progress is a fingerprint of the latest point (step, timestamp, value) of each
    analysed key, which MLflow keeps per run (``latest metrics``, returned by
    ``search_runs`` with no history read). MLflow's latest point is the greatest (step,
    timestamp, value), so a resumed run that logs its last step again (a later
    timestamp) changes it; re-logged steps before the last one are seen once the run
    logs its last step again.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tracker_plugin.errors import (
    ConfigError,
    DataError,
    RunNotFound,
    SourceError,
)
from tracker_plugin.frame.conventions import Reading, build_read_history, finish_reading
from tracker_plugin.frame.from_params import with_config_batch, with_planned_lr
from tracker_plugin.frame.history import Columns, History, batch_from_name
from tracker_plugin.keys import (
    ARTIFACT_JSON,
    ARTIFACT_PNG,
    LEGACY_ARTIFACTS,
    MARKER,
    PROVENANCE,
    is_own,
)
from tracker_plugin.plan.params import flat_params
from tracker_plugin.redact import redact_uri
from tracker_plugin.trackers.base import Annotation, RunInfo, Source, previous_of
from tracker_plugin.trackers.cache import HistoryCache
from tracker_plugin.trackers.mlflow_client import MlflowConnection, _first_line, _network_failure
from tracker_plugin.trackers.mlflow_points import (
    MLFLOW_STEP,
    _aligned,
    _cached_histories,
    _first_present,
    _latest,
    _metric_step,
    _own,
    _run_id,
    _same,
    _short,
    _write_point,
)
from tracker_plugin.trackers.mlflow_rest import (
    RestTarget,
    rest_target,
)
from tracker_plugin.trackers.options import MlflowOptions, ReadOptions, SourceOptions

__all__ = ["MlflowSource"]

_SEARCH_PAGE = 1_000
_FROM_NAME = "run name"  # the batch source when the run name gave it (`_1Mbs`)
_STATES = {
    "RUNNING": "running",
    "SCHEDULED": "running",
    "FINISHED": "finished",
    "FAILED": "failed",
    "KILLED": "killed",
}
# The clock: each loss point's own timestamp, unless --time-col names a logged metric.
_TIMESTAMP = "mlflow_timestamp"


class MlflowSource(MlflowConnection, Source):
    """Runs in an MLflow tracking server or local store."""

    scheme = "mlflow"

    def __init__(self, spec: str, options: ReadOptions | None = None, mlflow: MlflowOptions | None = None) -> None:
        super().__init__(spec, options)
        self.mlflow = mlflow or MlflowOptions()
        self._client_obj: Any = None
        self._rest_target: RestTarget | None = None
        self._rest_known = False  # _rest_target was worked out (None: a local store)
        self._reachable = False
        self._records: dict[str, Any] = {}  # run id -> mlflow Run, from runs()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._cache = HistoryCache(self.options.cache_dir) if self.options.use_cache else None

    @classmethod
    def from_options(cls, spec: str, options: SourceOptions) -> MlflowSource:
        return cls(spec, options.read, options.mlflow)

    def portable_options(self) -> SourceOptions:
        # MLflow's default tracking URI comes from this process (its environment, set_tracking_uri).
        pinned = replace(self.mlflow, tracking_uri=self._client().tracking_uri)
        return SourceOptions(read=self.options, mlflow=pinned)

    # -- listing ---------------------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        spec = self.spec.strip()
        where = f"mlflow:{spec}" if spec else f"mlflow:experiment/{','.join(self.mlflow.experiment_ids)}"
        # First: a missing mlflow, store or server is said before anything else.
        self._connect(where.rstrip("/"))
        if spec.startswith("experiment/"):
            experiment_ids = [self._experiment_id(spec[len("experiment/") :])]
        elif spec:
            return [self._info(self._get_run(spec, f"mlflow:{spec}"))]
        elif self.mlflow.experiment_ids:
            experiment_ids = [self._experiment_id(e) for e in self.mlflow.experiment_ids]
        else:
            raise ConfigError(
                "mlflow: needs a run id (mlflow:RUN_ID), mlflow:experiment/NAME_OR_ID or --experiment-id"
            )
        return [self._info(record) for record in self._search(experiment_ids)]

    def _experiment_id(self, name_or_id: str) -> str:
        client = self._client()
        where = f"mlflow:experiment/{name_or_id}"
        with self._errors(where):
            experiment = client.get_experiment_by_name(name_or_id)
        if experiment is None and name_or_id.isdigit():
            experiment = self._get_experiment(name_or_id, where)
        if experiment is None:
            raise RunNotFound(f"no experiment named '{name_or_id}' at {client.tracking_uri}", run=where)
        if experiment.lifecycle_stage != "active":
            raise RunNotFound("the experiment is deleted", run=where)
        return str(experiment.experiment_id)

    def _get_experiment(self, experiment_id: str, where: str) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            return self._client().get_experiment(experiment_id)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise self._translate(exc, where) from None

    def _search(self, experiment_ids: list[str]) -> list[Any]:
        from mlflow.entities import ViewType
        from mlflow.exceptions import MlflowException

        client = self._client()
        records: list[Any] = []
        token = None
        where = f"mlflow:experiment/{','.join(experiment_ids)}"
        while True:
            try:
                page = client.search_runs(
                    experiment_ids,
                    filter_string=self.mlflow.filter or "",
                    run_view_type=ViewType.ACTIVE_ONLY,
                    max_results=_SEARCH_PAGE,
                    page_token=token,
                )
            except MlflowException as exc:
                if exc.error_code == "INVALID_PARAMETER_VALUE" and self.mlflow.filter:
                    raise ConfigError(
                        f"--filter {self.mlflow.filter!r}: {_first_line(exc.message)}"
                    ) from None
                raise self._translate(exc, where) from None
            records += list(page)
            token = page.token
            if not token:
                break
        records.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
        with self._lock:
            self._records.update((r.info.run_id, r) for r in records)
        return records

    def _info(self, record: Any) -> RunInfo:
        return RunInfo(
            ref=f"mlflow:{record.info.run_id}",
            name=record.info.run_name or record.info.run_id,
            state=_STATES.get(str(record.info.status), "unknown"),
            progress=self._progress(_latest(record)),
            previous=previous_of(_own(record)),
        )

    def _progress(self, latest: Mapping[str, tuple[int, int, float]]) -> str | None:
        """Every logged key's latest (step, timestamp, value), as one short fingerprint.

        All the run's own keys, not only the ones read: which keys the trainer's conventions
        pick is decided when the run is read, and a key that changes says the run moved on.
        """
        loss_key = _first_present(self.options.columns.loss, latest)
        if loss_key is None:
            return None
        chosen = sorted(k for k in latest if not is_own(k))
        marks = ";".join(f"{k}:{latest[k][0]}:{latest[k][1]}:{latest[k][2]!r}" for k in chosen)
        return f"step {latest[loss_key][0]} latest {hashlib.sha256(marks.encode()).hexdigest()[:12]}"

    # -- reading ---------------------------------------------------------------------------

    def read(self, run: RunInfo) -> History:
        record = self._record(run)
        latest = _latest(record)
        params = flat_params(record.data.params, text_numbers=True)
        logged = {k for k in latest if not is_own(k)}
        reading = self._reading(run, logged, params)
        loss_key = reading.columns.loss[0]
        if loss_key not in logged:
            wanted = " or ".join(f"'{k}'" for k in self.options.columns.loss)
            raise DataError(
                f"no loss metric {wanted}; the run logs {sorted(logged)[:20]}{' ...' if len(logged) > 20 else ''} "
                "(choose one with --loss-col)",
                run=run.ref,
            )
        # The clock is each loss point's timestamp, unless --time-col names a metric.
        keys = {name: name for name in reading.keys() if name in logged and name not in reading.columns.time}
        time_key = self._time_key(logged)
        if time_key is not None:
            keys[time_key] = time_key
        histories = self._histories(run, record, keys, latest)
        loss_steps, _, loss_stamps = histories[loss_key]
        histories[_TIMESTAMP] = (loss_steps, np.asarray(loss_stamps, float) / 1000.0, loss_stamps)
        frame, nan_loss = _aligned(histories, loss_key)
        time = (time_key,) if time_key is not None else (_TIMESTAMP,)
        reading = replace(reading, columns=replace(reading.columns, time=time))
        history = build_read_history(frame, reading, run=run.ref, logged=logged, logged_nan_loss=nan_loss)
        if reading.batch_source == _FROM_NAME:
            history = replace(history, batch_source=_FROM_NAME)
        elif reading.batch_source is not None and reading.batch_source.startswith("param '"):
            history = with_config_batch(history, reading.batch_source)
        return with_planned_lr(finish_reading(history, reading, finished=run.state == "finished"), params)

    def _time_key(self, logged: set[str]) -> str | None:
        """A time metric named with ``--time-col``; else each loss point's own timestamp."""
        if self.options.columns.time == Columns().time:
            return None
        return next((key for key in self.options.columns.time if key in logged), None)

    def _reading(self, run: RunInfo, logged: set[str], params: Mapping[str, Any]) -> Reading:
        """Which metric is what. MLflow's own step is the trainer's ``step=``; a logged
        optimizer-step key (litgpt's ``step``, its metric step counting micro-batches)
        takes its place, and a batch in the run name (``_1Mbs``) is the last resort."""
        found = self.options.reading(logged, params, native_step=MLFLOW_STEP)
        from_name = batch_from_name(run.name)
        if found.on_steps and from_name is not None:
            found = replace(
                self.options.reading(logged, params, native_step=MLFLOW_STEP, batch_size=from_name),
                batch_source=_FROM_NAME,
            )
        return found

    def _histories(
        self, run: RunInfo, record: Any, keys: Mapping[str, str], latest: Mapping[str, Any]
    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each key's full history as (step, value, timestamp), from the cache when it can."""
        names = sorted(set(keys.values()))
        cache_key = None
        if self._cache is not None and run.state == "finished":
            marks = [f"{name}@{latest[name][0]}:{latest[name][1]}" for name in names]
            cache_key = ("mlflow", redact_uri(self._client().tracking_uri), record.info.run_id, *marks)
            cached = _cached_histories(self._cache.load(cache_key), names)
            if cached is not None:
                return cached
            self._cache.discard(cache_key)  # damaged or of another layout: fetched again
        histories = self._fetch(run, record.info.run_id, names)
        short = _short(histories, latest)
        if short:  # a page that lost its next-page token ends a read early: read those again
            histories.update(self._fetch(run, record.info.run_id, short))
            short = _short(histories, latest)
        if short:
            name = short[0]
            raise SourceError(
                f"the history of '{name}' the tracking server returned ends at step "
                f"{int(histories[name][0].max(initial=-1))}, but the run's latest '{name}' is at step {latest[name][0]} "
                "(twice: its pages were cut short, a page without its next-page token); try again later",
                run=run.ref,
            )
        if cache_key is not None and self._cache is not None:
            arrays = {}
            for i, name in enumerate(names):
                arrays[f"{i}.step"], arrays[f"{i}.value"], arrays[f"{i}.timestamp"] = histories[name]
            self._cache.store(cache_key, arrays)
        return histories

    # -- writing ---------------------------------------------------------------------------

    def held(self, run: RunInfo) -> dict[str, Any]:
        with self._errors(run.ref):
            return _Held(self._client().get_run(_run_id(run)))

    reads_plot = True

    def stored_artifact(self, run: RunInfo, artifact: str) -> bytes | None:
        """Read without MLflow's download, which draws a progress bar on stderr for each
        file: a local store's file where it lies, a server's proxied artifact over HTTP
        (:meth:`RestTarget.file`); only another store (S3, say) goes through MLflow's download."""
        from mlflow.exceptions import MlflowException
        from mlflow.store.artifact.http_artifact_repo import HttpArtifactRepository
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        with self._errors(run.ref), tempfile.TemporaryDirectory(prefix="loss_eta-") as tmp:
            with self._artifacts(self._record(run).info.artifact_uri) as repository:
                http = isinstance(repository, HttpArtifactRepository)
                target = rest_target(repository.artifact_uri, timeout=self.mlflow.timeout,
                                     retries=self.mlflow.retries) if http else None  # fmt: skip
                if target is not None:
                    return target.file(artifact)
                try:
                    if isinstance(repository, LocalArtifactRepository):
                        path = repository.download_artifacts(artifact)  # no copy, no bar: where it lies
                    else:
                        path = repository.download_artifacts(artifact, tmp)
                    return Path(path).read_bytes()
                except (MlflowException, OSError) as exc:
                    if _network_failure(exc):
                        raise
                    return None  # not there (or not readable): the annotation is redone

    @contextmanager
    def _artifacts(self, artifact_uri: str) -> Iterator[Any]:
        """The artifact repository of a run's artifact URI (its record holds it).

        ``MlflowClient.download_artifacts`` asks the server for the run (and, in MLflow 3,
        searches logged models) on every download: 6 requests for one small file, where the
        repository's own download is 2 (is it a folder, then the file).
        """
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        repository = get_artifact_repository(artifact_uri, tracking_uri=self._client().tracking_uri)
        try:
            yield repository
        finally:
            # Each repository has a thread pool of its own: none left behind per run.
            pool = getattr(repository, "thread_pool", None)
            if pool is not None:
                pool.shutdown(wait=False)

    def write_content(self, run: RunInfo, annotation: Annotation, held: Mapping[str, Any]) -> None:
        client = self._client()
        from mlflow.entities import Metric, RunTag

        run_id = _run_id(run)
        with self._errors(run.ref):
            # Fresh: what an earlier annotation left, as held read it just now.
            current = held.record if isinstance(held, _Held) else client.get_run(run_id)
            latest = _latest(current)
            step, stamp = _write_point(latest, _metric_step(run, annotation))
            # No value where the run holds none is left unwritten (the table shows "-"); a
            # value the run holds and this annotation has none of is cleared to NaN; a value
            # the run holds already is not logged again (its chart changes only where it does).
            metrics = [
                Metric(key, math.nan if value is None else float(value), stamp, step)
                for key, value in sorted(annotation.metrics.items())
                if (value is not None or key in latest) and not _same(latest.get(key), value)
            ]
            metrics += self._series_rows(run, annotation, stamp, latest)
            # The run page lists tags in the order they were first set: the answers, then
            # the provenance (a long JSON text).
            tags = [
                RunTag(key, value)
                for key, value in sorted(annotation.labels.items(), key=lambda item: (item[0] == PROVENANCE, item[0]))
                if key != MARKER and value is not None and current.data.tags.get(key) != value
            ]
            # One request where MLflow's limits allow (the client splits larger batches).
            client.log_batch(run_id, metrics=metrics, tags=tags)
            for key, value in sorted(annotation.labels.items()):
                if value is None and key in current.data.tags:
                    client.delete_tag(run_id, key)
            with tempfile.TemporaryDirectory(prefix="loss_eta-") as tmp:
                for name, data in (
                    (ARTIFACT_JSON, annotation.report_bytes()),
                    (ARTIFACT_PNG, annotation.plot_bytes()),
                ):
                    path = Path(tmp) / name
                    path.write_bytes(data)
                    # The top of the run's artifacts: MLflow's compare view lists no folders.
                    client.log_artifact(run_id, str(path))
            if annotation.replaces_legacy:
                self._remove_legacy_artifacts(current)

    def _series_rows(
        self, run: RunInfo, annotation: Annotation, stamp: int, latest: Mapping[str, Any]
    ) -> list[Any]:
        """The series' points the run does not hold yet (its latest value at that step is
        another, or there is none): a pass over a run that grew writes its new steps only.
        A key the run has never logged (not in its ``latest`` values) holds no points, and
        its history is not read."""
        from mlflow.entities import Metric

        series = annotation.series
        if series is None:
            return []
        rows = []
        for key, values in sorted(series.values.items()):
            holds = self._held_points(run, key) if key in latest else {}
            rows += [
                Metric(key, value, stamp, step)
                for step, value in zip(series.steps, values)
                if holds.get(step) != value
            ]
        return rows

    def _held_points(self, run: RunInfo, key: str) -> dict[int, float]:
        """The run's latest value of ``key`` at each step, as MLflow ranks its rows: by
        timestamp, then value (two jobs that read a run at once log at one timestamp)."""
        steps, values, stamps = self._history(run, _run_id(run), key)
        order = np.lexsort((values, stamps, steps))
        return dict(zip(steps[order].tolist(), values[order].tolist()))

    def _remove_legacy_artifacts(self, record: Any) -> None:
        """Remove the earlier layout's ``loss_eta/`` files, where the artifact store can."""
        with self._artifacts(record.info.artifact_uri) as repository:
            names = {a.path for a in repository.list_artifacts("loss_eta")}
            for name in LEGACY_ARTIFACTS:
                if name in names:
                    try:
                        repository.delete_artifacts(name)
                    except NotImplementedError:
                        return  # an artifact store that cannot delete: the old files stay, unread

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        from mlflow.entities import RunTag

        with self._errors(run.ref):
            self._client().log_batch(_run_id(run), tags=[RunTag(MARKER, annotation.marker())])

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        with self._errors(run.ref):
            latest = _latest(self._client().get_run(_run_id(run)))
            step, _ = _write_point(latest, _metric_step(run, annotation))
            points = self._series_rows(run, annotation, 0, latest)
        lines = [f"to: metrics at step {step}, tags and artifacts {ARTIFACT_JSON}, {ARTIFACT_PNG} of {run.ref}"]
        if annotation.series is not None:
            keys = ", ".join(sorted(annotation.series.values))
            lines.append(f"series: {len(points):,} new points of {keys}, at the run's own steps")
        return lines

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class _Held(dict[str, Any]):
    """:meth:`MlflowSource.held`'s keys of ours, with the run record they were read from:
    the write that follows measures itself against the same read instead of another."""

    def __init__(self, record: Any) -> None:
        super().__init__(_own(record))
        self.record = record
