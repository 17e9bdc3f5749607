"""The MLflow client a source opens once and shares, what it fetches through it, and
MLflow's errors as the package's.

The client is made on first use (a store MLflow cannot open fails with a one-line
reason, naming what to install or where the store is); a server is read over plain HTTP
where it can be (:mod:`.mlflow_rest`), checked once to answer at all, each key's history
fetched in full and the keys concurrently; MLflow's and the network's exceptions become
:class:`~tracker_plugin.errors.SourceError` subclasses naming the run (and key).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from tracker_plugin.errors import (
    AuthError,
    ConfigError,
    MissingDependency,
    RunNotFound,
    SourceError,
    TrackerUnavailable,
)
from tracker_plugin.trackers.base import RunInfo
from tracker_plugin.trackers.mlflow_points import _run_id
from tracker_plugin.trackers.mlflow_rest import (
    RestError,
    RestTarget,
    Unreachable,
    metric_history,
    network_reason,
    rest_target,
)
from tracker_plugin.trackers.options import MlflowOptions, ReadOptions

__all__ = ["MlflowConnection"]

_PAGE = 25_000  # points per get-history page, MLflow's own page size
# The keys' first requests go out this many seconds apart: requests arriving together
# tend to be taken by one worker, which then serves them all while the others idle.
_STAGGER = 0.05


class MlflowConnection:
    """The client, the REST target, the pool of readers and the run records a source keeps
    (guarded by its lock), the runs and metric histories it fetches, and the translation of
    the errors its calls raise."""

    mlflow: MlflowOptions
    options: ReadOptions
    _client_obj: Any
    _rest_target: RestTarget | None
    _rest_known: bool
    _reachable: bool
    _lock: threading.Lock
    _pool: ThreadPoolExecutor | None
    _records: dict[str, Any]  # run id -> mlflow Run, as listed or fetched

    def _client(self) -> Any:
        with self._lock:
            if self._client_obj is None:
                self._client_obj = _make_client(self.mlflow.tracking_uri)
            return self._client_obj

    def _rest(self) -> RestTarget | None:
        """How to read the server over plain HTTP; None for a local store (or auth only
        MLflow's own client can do)."""
        client = self._client()
        with self._lock:
            if not self._rest_known:
                self._rest_target = rest_target(
                    client.tracking_uri, timeout=self.mlflow.timeout, retries=self.mlflow.retries
                )
                self._rest_known = True
            return self._rest_target

    def _connect(self, where: str) -> None:
        """Make the client, and check once that a server answers at all (in seconds, where
        ``MlflowClient`` would retry a refused connection for minutes)."""
        target = self._rest()
        if target is None or self._reachable:
            return
        try:
            target.check_reachable()
        except Unreachable as exc:
            raise TrackerUnavailable(self._unreachable(exc.reason), run=where) from None
        self._reachable = True

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=max(1, self.options.workers), thread_name_prefix="mlflow-read"
                )
            return self._pool

    @contextmanager
    def _errors(self, ref: str, key: str | None = None) -> Iterator[None]:
        """MLflow's and the network's exceptions as the package's, naming the run (and key)."""
        import requests
        from mlflow.exceptions import MlflowException

        try:
            yield
        except (MlflowException, RestError) as exc:
            raise self._translate(exc, ref, key) from None
        except Unreachable as exc:
            raise TrackerUnavailable(self._unreachable(exc.reason), run=ref) from None
        except requests.RequestException as exc:
            raise TrackerUnavailable(self._unreachable(network_reason(exc)), run=ref) from None

    def _translate(self, exc: Any, ref: str, key: str | None = None) -> SourceError:
        code = getattr(exc, "error_code", "")
        message = _first_line(getattr(exc, "message", str(exc)))
        about = f"metric '{key}': " if key else ""
        if _network_failure(exc):
            return TrackerUnavailable(self._unreachable(network_reason(exc)), run=ref)
        if code in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND", "ENDPOINT_NOT_FOUND"):
            return RunNotFound(f"{about}{message}", run=ref)
        if code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "CUSTOMER_UNAUTHORIZED"):
            return AuthError(f"{about}the MLflow server refused the request: {message}", run=ref)
        if code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "INTERNAL_ERROR"):
            return TrackerUnavailable(f"{about}the MLflow server failed: {message}", run=ref)
        return SourceError(f"{about}{message}", run=ref)

    def _unreachable(self, reason: str) -> str:
        uri = self._client_obj.tracking_uri if self._client_obj is not None else self.mlflow.tracking_uri
        if reason == "server errors":
            return (
                f"the MLflow tracking server {uri} kept answering with server errors (HTTP 5xx) after retries"
            )
        return f"the MLflow tracking server {uri} is not answering ({reason})"

    def _fetch(
        self, run: RunInfo, run_id: str, names: Sequence[str]
    ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The keys' histories, fetched concurrently from a server; the first failure stops the rest."""
        if self._rest() is None:
            # A local store is read in this thread: its reads hold the GIL, threads only slow them.
            return {name: self._history(run, run_id, name) for name in names}
        failed = threading.Event()

        def fetch(name: str, delay: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if failed.wait(delay):
                raise CancelledError
            try:
                return self._history(run, run_id, name)
            except BaseException:
                failed.set()
                raise

        futures = {name: self._executor().submit(fetch, name, k * _STAGGER) for k, name in enumerate(names)}
        try:
            return {name: future.result() for name, future in futures.items()}
        except BaseException:
            failed.set()
            for future in futures.values():
                future.cancel()
            # Report the failure itself, not a cancellation it caused.
            errors = [f.exception() for f in futures.values() if not f.cancelled()]
            real = [e for e in errors if e is not None and not isinstance(e, CancelledError)]
            if real:
                raise real[0] from None
            raise

    def _history(self, run: RunInfo, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        target = self._rest()
        with self._errors(run.ref, key):
            if target is not None:
                return metric_history(target, run_id, key, _PAGE)
            metrics = self._client().get_metric_history(run_id, key)
            return (
                np.array([m.step for m in metrics], dtype=np.int64),
                np.array([m.value for m in metrics], dtype=float),
                np.array([m.timestamp for m in metrics], dtype=np.int64),
            )

    def _record(self, run: RunInfo) -> Any:
        run_id = _run_id(run)
        with self._lock:
            record = self._records.get(run_id)
        return record if record is not None else self._get_run(run_id, run.ref)

    def _get_run(self, run_id: str, ref: str) -> Any:
        client = self._client()
        from mlflow.exceptions import MlflowException

        try:
            record = client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise RunNotFound(f"no such run at {client.tracking_uri}", run=ref) from None
            raise self._translate(exc, ref) from None
        with self._lock:
            self._records[run_id] = record
        return record


# Store URI schemes of MLflow's SQL stores, which need sqlalchemy (not in mlflow-skinny).
_SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def _make_client(tracking_uri: str | None) -> Any:
    try:
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise MissingDependency("mlflow", "mlflow") from None
    uri = tracking_uri or mlflow.get_tracking_uri()
    _check_file_store(uri)
    _check_local_store(uri)
    _check_store_backend(uri)
    try:
        return MlflowClient(tracking_uri=uri)
    except MlflowException as exc:
        schemes = getattr(exc, "supported_uri_schemes", None)
        if schemes is not None:  # no store for the URI's scheme
            known = ", ".join(s for s in schemes if s)
            raise ConfigError(
                f"mlflow ({uri}): no MLflow tracking store for this URI (MLflow knows {known}); "
                "set --tracking-uri or MLFLOW_TRACKING_URI"
            ) from None
        raise SourceError(_first_line(exc.message), run=f"mlflow ({uri})") from None


def _check_store_backend(uri: str) -> None:
    """A SQL store needs MLflow's SQL backend, which the client-only mlflow-skinny leaves out."""
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if scheme in _SQL_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
        raise MissingDependency(
            "mlflow",
            "mlflow",
            reason=f"the {scheme} store needs the full mlflow package, with its SQL stores "
            "(mlflow-skinny, the client-only install, has none)",
            run=f"mlflow ({uri})",
        )


def _check_file_store(uri: str) -> None:
    """MLflow's file store (``file://`` or a plain path, ``./mlruns``) is in maintenance
    mode, and MLflow refuses it unless told otherwise: said in one line, with the way out."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file") and not uri.lower().startswith(("databricks", "uc:")):
        raise ConfigError(
            f"mlflow ({uri}): not a tracking server or database store; MLflow's file store is in "
            "maintenance mode and not supported: migrate it with `mlflow migrate-filestore` to "
            "sqlite:///mlflow.db, or give the server's http(s):// URL"
        )


def _check_local_store(uri: str) -> None:
    """A sqlite store that does not exist is a typo, not a new store to create."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :].split("?", 1)[0]
        if path and path != ":memory:" and not os.path.exists(path):
            raise RunNotFound(
                f"no MLflow store at {os.path.abspath(path)} (set --tracking-uri or MLFLOW_TRACKING_URI)",
                run=f"mlflow ({uri})",
            )


def _first_line(text: str) -> str:
    text = str(text).strip()
    return text.splitlines()[0] if text else "unknown error"


def _network_failure(exc: BaseException) -> bool:
    """Did the request fail for want of an answer (refused, reset, timed out, 5xx after retries)?"""
    import requests

    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, (requests.ConnectionError, requests.Timeout, requests.exceptions.RetryError)):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False
