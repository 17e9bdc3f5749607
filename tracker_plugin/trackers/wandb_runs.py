"""Weights & Biases runs, read and annotated through the ``wandb`` public API.

Run strings: ``wandb:ENTITY/PROJECT/RUN_ID`` (one run), ``wandb:ENTITY/PROJECT`` (the
project's runs, narrowed by ``--state``, ``--tag``, ``--created-after`` and ``--filter``),
and ``wandb:RUN_ID`` or ``wandb:`` with ``-e/--entity`` and ``-p/--project``. Without
an entity, the API key's default entity is used.

Reading takes the full history of the keys the analysis needs with ``scan_history``
(never the sampled ``history()``): all keys in one scan when every row holds them, else
one key at a time, aligned on ``_step``. Annotating writes the keys of
:mod:`tracker_plugin.jobs.annotation` into the run's summary and attaches ``loss_eta.json``
and ``loss_eta.png``; the run's state, config and other summary keys are left as they were.

Everything goes through ``wandb.Api(api_key=..., overrides=..., timeout=...)``, made from
:class:`~.options.WandbOptions`; nothing process-wide (wandb's settings singleton, the
environment) is changed. ``timeout`` bounds each request, wandb-core's own retries
included (wandb then cancels it); wandb waits for a file upload without a timeout, so each
upload is given up on after ``upload_timeout`` (wandb-core may still finish it; the
annotation is then not marked complete, and the next pass redoes it). wandb 0.31 has no
per-``Api`` setting for wandb-core's retries: they follow wandb's own settings
(``WANDB__GRAPHQL_RETRY_MAX``, ``WANDB__FILE_TRANSFER_RETRY_MAX``, ...).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from tracker_plugin.errors import (
    AuthError,
    ConfigError,
    MissingDependency,
    RunNotFound,
    SourceError,
    TrackerPluginError,
    TrackerUnavailable,
)
from tracker_plugin.frame.history import History
from tracker_plugin.keys import ARTIFACT_JSON, ARTIFACT_PNG, LEGACY_ARTIFACTS, MARKER, is_own
from tracker_plugin.plan.params import flat_params
from tracker_plugin.redact import redact
from tracker_plugin.trackers.base import Annotation, RunInfo, Source, previous_of
from tracker_plugin.trackers.options import ReadOptions, SourceOptions, WandbOptions
from tracker_plugin.trackers.wandb_data import (
    ROW_KEY,
    KeyColumn,
    build_wandb_history,
    decode,
    wandb_progress,
    wandb_reading,
    whole,
)

__all__ = ["WandbSource", "normalise_state", "run_filters"]

# W&B run states and the normalised states of RunInfo.
_STATES = {
    "running": "running",
    "pending": "unknown",
    "preempting": "running",
    "finished": "finished",
    "failed": "failed",
    "crashed": "crashed",
    "killed": "killed",
    "preempted": "killed",
}

_PAGE_SIZE = 1000


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise MissingDependency("wandb", "wandb") from None
    return wandb


def normalise_state(state: str | None) -> str:
    """A W&B run state as a :class:`RunInfo` state (running, finished, failed, ...)."""
    return _STATES.get((state or "").lower(), "unknown")


def run_filters(options: WandbOptions) -> dict[str, Any]:
    """The W&B run filter for ``--filter``, ``--state``, ``--tag`` and ``--created-after``
    (all must hold; every ``--tag`` must be on the run).

    Raises
    ------
    ConfigError
        ``--filter`` is not a JSON object, a state is not a W&B state, or the date is
        not a date.
    """
    parts: list[dict[str, Any]] = []
    if options.filter:
        try:
            given = json.loads(options.filter)
        except ValueError as exc:
            raise ConfigError(f"--filter is not W&B filter JSON ({exc})") from None
        if not isinstance(given, dict):
            raise ConfigError("--filter must be a JSON object, e.g. '{\"config.lr\": 0.001}'")
        if given:
            parts.append(given)
    if options.states:
        unknown = sorted(set(options.states) - set(_STATES))
        if unknown:
            raise ConfigError(f"--state {unknown[0]!r} is not a W&B run state ({', '.join(_STATES)})")
        parts.append({"state": {"$in": list(options.states)}})
    parts += [{"tags": {"$in": [tag]}} for tag in options.tags]
    if options.created_after:
        try:
            when = datetime.fromisoformat(options.created_after)
        except ValueError:
            raise ConfigError(
                f"--created-after {options.created_after!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)"
            ) from None
        parts.append({"createdAt": {"$gt": when.strftime("%Y-%m-%dT%H:%M:%S")}})
    if not parts:
        return {}
    return parts[0] if len(parts) == 1 else {"$and": parts}


def _parse_spec(spec: str, options: WandbOptions) -> tuple[str | None, str, str | None]:
    """(entity, project, run id) from ``ENTITY/PROJECT[/runs]/RUN_ID``, ``ENTITY/PROJECT``,
    ``RUN_ID`` or nothing, with -e/-p filling what the string leaves out."""
    parts = [p for p in spec.strip("/").split("/") if p]
    if len(parts) == 4 and parts[2] == "runs":
        parts = [parts[0], parts[1], parts[3]]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], parts[1], None
    if options.project and len(parts) <= 1:
        return options.entity, options.project, parts[0] if parts else None
    raise ConfigError(
        f"wandb:{spec} does not name runs; use wandb:ENTITY/PROJECT, wandb:ENTITY/PROJECT/RUN_ID, "
        "or give -p/--project (and -e/--entity)"
    )


class WandbSource(Source):
    """Runs in a W&B project, read with ``wandb.Api``.

    Each call of :meth:`runs` uses a fresh ``wandb.Api`` (it caches runs), so a
    scheduled job that lists runs every cycle sees new runs and new steps.
    """

    scheme = "wandb"

    def __init__(self, spec: str, options: ReadOptions | None = None, wandb: WandbOptions | None = None) -> None:
        super().__init__(spec, options)
        self.wandb = wandb or WandbOptions()
        self._entity, self._project, self._run_id = _parse_spec(spec, self.wandb)
        self._filters = run_filters(self.wandb)
        self._api: Any = None
        self._found: dict[str, Any] = {}  # ref -> wandb run, from the last runs()
        self._key: str | None = None

    def portable_options(self) -> SourceOptions:
        return SourceOptions(read=self.options, wandb=self.wandb)

    @classmethod
    def from_options(cls, spec: str, options: SourceOptions) -> WandbSource:
        wandb = replace(options.wandb, states=options.states) if options.states else options.wandb
        return cls(spec, options.read, wandb)

    # -- listing -------------------------------------------------------------------------
    def runs(self) -> list[RunInfo]:
        where = f"wandb:{self.spec}"
        with self._errors(where):
            self._api = self._new_api()
            entity = self._entity or self._api.default_entity
            if not entity:
                raise ConfigError("no W&B entity: give wandb:ENTITY/PROJECT or -e/--entity")
            path = f"{entity}/{self._project}"
            if self._run_id is not None:
                found = [self._api.run(f"{path}/{self._run_id}")]
            else:
                found = list(self._api.runs(path, filters=self._filters, order="+created_at", lazy=False))
        self._found = {_ref(run): run for run in found}
        return [self._info(run) for run in found]

    def _info(self, run: Any) -> RunInfo:
        summary = run.summary_metrics
        step = summary.get(ROW_KEY)
        if step is None:
            step = _history_keys(run).get("lastStep")
        return RunInfo(
            ref=_ref(run),
            name=run.name or run.id,
            state=normalise_state(run.state),
            progress=wandb_progress(step, _rows(run), summary.get("_timestamp")),
            previous=previous_of(_own(summary)),
        )

    # -- reading -------------------------------------------------------------------------
    def read(self, run: RunInfo) -> History:
        with self._errors(run.ref):
            wb_run = self._run(run)
            history_keys = _history_keys(wb_run)
            available = set(history_keys.get("keys") or {}) | {ROW_KEY}
            config = flat_params(wb_run.config)
            reading = wandb_reading(available, config, self.options)
            keys = [ROW_KEY, *(k for k in reading.keys() if k in available)]
            has_loss = any(c in available for c in reading.columns.loss)
            # Without a loss key there is nothing to scan: build_wandb_history names the keys.
            rows = int(getattr(wb_run, "history_line_count", 0) or 0)
            data = self._scan(wb_run, keys, history_keys, rows) if has_loss else {}
        return build_wandb_history(
            data,
            run=run.ref,
            config=config,
            all_keys=available,
            reading=reading,
            finished=run.state == "finished",
        )


    def _scan(
        self, wb_run: Any, keys: list[str], history_keys: Mapping[str, Any], rows: int
    ) -> dict[str, KeyColumn]:
        """Each key's full history: one scan when every row holds every key, else one
        scan per key (a scan returns only the rows holding all the keys it asks for)."""
        wanted = [k for k in keys if k != ROW_KEY]
        if rows and all(_count(history_keys, k) == rows for k in wanted):
            scanned = list(wb_run.scan_history(keys=keys, page_size=_PAGE_SIZE))
            return {k: _column(scanned, k) for k in wanted}

        def one(key: str) -> tuple[str, KeyColumn]:
            return key, _column(list(wb_run.scan_history(keys=[ROW_KEY, key], page_size=_PAGE_SIZE)), key)

        workers = max(1, min(len(wanted), self.options.workers))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return dict(pool.map(one, wanted))

    # -- writing -------------------------------------------------------------------------
    def held(self, run: RunInfo) -> dict[str, Any]:
        with self._errors(run.ref):
            return _own(self._fresh(run).summary_metrics)

    reads_plot = True

    def stored_artifact(self, run: RunInfo, name: str) -> bytes | None:
        with self._errors(run.ref), tempfile.TemporaryDirectory(prefix="loss_eta_") as tmp:
            found = list(self._fresh(run).files(names=[name]))
            if not found or getattr(found[0], "size", 1) == 0:
                return None
            download = partial(found[0].download, root=tmp, replace=True)
            _within(self.wandb.upload_timeout, f"downloading {name}", download)
            path = Path(tmp, name)
            return path.read_bytes() if path.is_file() else None

    def write_content(self, run: RunInfo, annotation: Annotation, held: Mapping[str, Any]) -> None:
        values = {**annotation.metrics, **annotation.labels}
        with self._errors(run.ref):
            self._update_summary(run, {k: v for k, v in values.items() if k != MARKER})
            with tempfile.TemporaryDirectory(prefix="loss_eta_") as tmp:
                files = {ARTIFACT_JSON: annotation.report_bytes(), ARTIFACT_PNG: annotation.plot_bytes()}
                wb_run = self._fresh(run)
                for name, data in files.items():
                    path = Path(tmp, name)
                    path.write_bytes(data)
                    # root: the file's name in the run is its path relative to root.
                    upload = partial(wb_run.upload_file, str(path), root=tmp)
                    _within(self.wandb.upload_timeout, f"uploading {name}", upload)
                if annotation.replaces_legacy:
                    for old in wb_run.files(names=list(LEGACY_ARTIFACTS)):
                        old.delete()

    def write_markers(self, run: RunInfo, annotation: Annotation) -> None:
        with self._errors(run.ref):
            self._update_summary(run, {MARKER: annotation.marker()})

    def describe_write(self, run: RunInfo, annotation: Annotation) -> list[str]:
        return [f"to: summary keys and files {ARTIFACT_JSON}, {ARTIFACT_PNG} of {run.ref}"]

    def _update_summary(self, run: RunInfo, values: Mapping[str, Any]) -> None:
        """Set ``values`` in the run's summary (None: remove the key).

        W&B's public API replaces the whole summary with what the client sends, so the
        summary is read again right before the one write, and only our keys are changed
        in that freshest copy: a key another client writes between that read and the
        write is lost. No client can close that window; this keeps it to one round trip.
        """
        summary = self._fresh(run).summary
        for key, value in values.items():
            if value is None and key in summary:
                del summary[key]
        summary.update({k: v for k, v in values.items() if v is not None})

    def close(self) -> None:
        self._api = None
        self._found = {}

    # -- plumbing ------------------------------------------------------------------------
    def _new_api(self) -> Any:
        """A fresh ``wandb.Api`` made from this source's options alone."""
        wandb = _wandb()
        overrides = {"base_url": self.wandb.base_url} if self.wandb.base_url else None
        api = wandb.Api(
            api_key=self.wandb.api_key,
            overrides=overrides,
            timeout=max(1, math.ceil(self.wandb.timeout)),
        )
        self._key = getattr(api, "api_key", None)
        return api

    def _run(self, run: RunInfo) -> Any:
        found = self._found.get(run.ref)
        if found is None:
            if self._api is None:
                self._api = self._new_api()
            found = self._found[run.ref] = self._api.run(run.ref.removeprefix("wandb:"))
        return found

    def _fresh(self, run: RunInfo) -> Any:
        """The run as the server has it now (the Api caches runs it has read)."""
        if self._api is None:
            self._api = self._new_api()
        self._api.flush()
        return self._api.run(run.ref.removeprefix("wandb:"))

    @contextmanager
    def _errors(self, run: str) -> Iterator[None]:
        """Turn the client's exceptions into this package's, one line, naming the run."""
        try:
            yield
        except TrackerPluginError:
            raise
        except Exception as exc:  # noqa: BLE001 - every client failure becomes one line
            raise _translate(exc, run, self._secrets(), self.wandb.timeout) from None

    def _secrets(self) -> list[str]:
        return [k for k in (self._key, self.wandb.api_key, os.environ.get("WANDB_API_KEY")) if k]


def _ref(run: Any) -> str:
    return f"wandb:{run.entity}/{run.project}/{run.id}"


def _own(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's keys of ours."""
    return {k: v for k, v in summary.items() if is_own(k)}


def _rows(run: Any) -> int | None:
    rows = getattr(run, "history_line_count", None)
    return int(rows) if isinstance(rows, (int, float)) else None


def _history_keys(run: Any) -> dict[str, Any]:
    value = getattr(run, "history_keys", None)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _count(history_keys: Mapping[str, Any], key: str) -> int:
    info = (history_keys.get("keys") or {}).get(key) or {}
    return sum(int(t.get("count", 0)) for t in info.get("typeCounts") or [])


def _column(rows: list[dict[str, Any]], key: str) -> KeyColumn:
    rows = [r for r in rows if key in r and ROW_KEY in r]
    return [whole(decode(r[ROW_KEY])) for r in rows], [r[key] for r in rows]


class _GaveUp(Exception):
    """A call given up on after its deadline (see :func:`_within`)."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what}: no answer within {seconds:g} s")
        self.what = what
        self.seconds = seconds


def _within(seconds: float, what: str, call: Callable[[], Any]) -> Any:
    """``call()``, given up on after ``seconds`` (it goes on in a thread of its own).

    For the wandb calls that wait without a timeout (a file upload).
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="wandb-upload", daemon=True).start()
    if not done.wait(seconds):
        raise _GaveUp(what, seconds)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


# wandb-core words an HTTP failure as "returned error 404: ...", "HTTP 500: ...",
# "status: 401 Unauthorized" or "unexpected HTTP status 502 Bad Gateway".
_STATUS = re.compile(r"(?:\bHTTP(?: status)?|\breturned error|\bstatus:?)\s+(\d{3})\b")
_ATTEMPTS = re.compile(r"giving up after (\d+) attempt")


def _translate(exc: Exception, run: str, secrets: list[str], timeout: float) -> TrackerPluginError:
    """The package's exception for a failure of the wandb client, as one line."""
    if isinstance(exc, _GaveUp):
        return TrackerUnavailable(f"W&B did not answer within {exc.seconds:g} s ({exc.what})", run=run)
    text = _one_line(_message(exc), secrets)
    status = _status(exc, text)
    attempts = _ATTEMPTS.search(text)
    tries = f" after {attempts.group(1)} attempts" if attempts else ""
    lowered = text.lower()
    if status is None and "did not respond in time" in lowered:  # wandb cancelled it after `timeout`
        return TrackerUnavailable(f"W&B did not answer within {timeout:g} s", run=run)
    if status is None and ("no api key" in lowered or "no authentication" in lowered):
        return AuthError("no W&B API key: set WANDB_API_KEY or run `wandb login`", run=run)
    if status in (401, 403) or (status is None and "api key" in lowered):
        why = f"HTTP {status}" if status else text
        return AuthError(
            f"W&B refused the credentials ({why}); check WANDB_API_KEY or run `wandb login`", run=run
        )
    if status == 404 or (status is None and ("could not find" in lowered or "not found" in lowered)):
        return RunNotFound(f"not found on W&B ({f'HTTP {status}' if status else text})", run=run)
    if status == 429:
        return TrackerUnavailable(
            f"W&B kept rate-limiting the requests (HTTP 429{tries}); try again later", run=run
        )
    if status is None or status >= 500:
        return TrackerUnavailable(
            f"W&B did not answer ({f'HTTP {status}' if status else text}{tries})", run=run
        )
    return SourceError(f"W&B refused the request (HTTP {status}: {text})", run=run)


def _message(exc: BaseException) -> str:
    """The most specific message in the exception chain wandb raised."""
    parts = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(str(current))
        inner = getattr(current, "exc", None) or current.__cause__ or current.__context__
        current = inner if isinstance(inner, BaseException) else None
    return " | ".join(p for p in parts if p) or type(exc).__name__


def _status(exc: BaseException, text: str) -> int | None:
    current: BaseException | None = exc
    while current is not None:
        response = getattr(current, "response", None)
        status = getattr(response, "http_status", None)
        if isinstance(status, int) and status:
            return status
        inner = getattr(current, "exc", None) or current.__cause__
        current = inner if isinstance(inner, BaseException) and inner is not current else None
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def _one_line(text: str, secrets: list[str]) -> str:
    """The message on one line, every credential cut: the API key however it is encoded, and
    the ``Authorization`` header a server may echo back with the request."""
    return " ".join(redact(text, *secrets).split())[:300]
