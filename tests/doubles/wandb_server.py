"""A local stand-in for the W&B server, for testing code that uses the real ``wandb`` client.

No W&B server can run outside its Docker image, and ``wandb`` 0.31 sends every request
through its ``wandb-core`` process, so patching Python HTTP libraries catches nothing.
:class:`WandbServer` instead answers, over real HTTP, the GraphQL operations that
``wandb.Api`` and ``wandb-core`` send for reading runs and annotating them; the client is
pointed at it with ``WANDB_BASE_URL`` and ``WANDB_API_KEY``::

    with WandbServer() as server:
        run = server.add_run("team", "proj", "abc123", history=[{"loss": 3.0}, {"loss": 2.5}],
                             config={"lr": 3e-4}, summary={"loss": 2.5}, state="finished")
        os.environ.update(WANDB_BASE_URL=server.url, WANDB_API_KEY=server.api_key)
        ...  # use wandb.Api()
        run.summary, run.files, server.mutations()   # what the client wrote

What it answers (GraphQL operations matched by the names ``wandb`` gives them):

- ``Viewer`` and ``GetDefaultEntity``: the login check and the default entity;
- ``ServerFeaturesQuery``; ``Runs`` (listing, with MongoDB-style ``filters``, ``order``
  and cursor pages); ``Run`` (one run); ``RunHistoryKeys``;
- ``RunParquetHistory``, always with no parquet URLs, so that ``wandb-core`` takes the
  path for history not yet exported, and pages through it with ``HistoryPage`` (a full
  ``scan_history()``, steps ``minStep <= _step < maxStep``) or ``SampledHistoryPage``
  (``scan_history(keys=...)``: the rows holding every key, ``minStep..maxStep`` both
  included, as wandb-core asks for them);
- ``UpsertBucket`` (summary, config, tags, state, display name; a new run by name),
  ``CreateRunFiles`` with the ``PUT`` of the file, ``RunFiles``, ``MarkRunFilesUploaded``;
- the ``file_stream`` of ``wandb sync`` (history, summary, completion).

Anything else, including the sampled ``history()``, is answered with a GraphQL error and
recorded in :attr:`WandbServer.unsupported`, so a test can tell that the client used
something this server does not model.

Writes replace the stored value the way W&B does: ``UpsertBucket`` with
``summaryMetrics`` replaces the whole summary, so a client that sends a stale copy loses
keys here as it would on W&B. Non-finite floats in history and summaries go out as the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, as W&B's API returns them.

:meth:`WandbServer.fail` makes requests answer an HTTP error (401, 404, 429, 500, ...):
all of them, one operation (a GraphQL name, ``"PUT"`` for uploads, ``"file_stream"``),
and/or those about one run id; a number of times or forever. :attr:`WandbServer.requests`
records every request, :meth:`WandbServer.mutations` the writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Failure", "FakeRun", "Request", "WandbServer"]

_OPERATION = re.compile(r"^\s*(?:#graphql\s*)?(query|mutation)\s+(\w+)", re.MULTILINE)
_EPOCH = datetime(2024, 1, 1)


@dataclass
class FakeRun:
    """A run on the fake server; tests read and change its fields directly."""

    entity: str
    project: str
    run_id: str
    display_name: str
    state: str = "finished"
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    created_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    storage_id: str = ""

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}/{self.run_id}"

    def log(self, *rows: Mapping[str, Any]) -> None:
        """Append history rows, numbering ``_step`` on from the last row where not given."""
        for row in rows:
            row = dict(row)
            row.setdefault("_step", self.history[-1]["_step"] + 1 if self.history else 0)
            self.history.append(row)
            self.summary.update({k: v for k, v in row.items() if not k.startswith("_") or k == "_step"})

    def history_keys(self) -> dict[str, Any]:
        """``historyKeys`` as W&B reports it: the last step and, per key, its value types."""
        counts: dict[str, dict[str, int]] = {}
        for row in self.history:
            for key, value in row.items():
                kind = _type_name(value)
                counts.setdefault(key, {}).setdefault(kind, 0)
                counts[key][kind] += 1
        keys = {
            key: {"typeCounts": [{"type": kind, "count": n} for kind, n in kinds.items()]}
            for key, kinds in counts.items()
        }
        last = self.history[-1]["_step"] if self.history else -1
        return {"lastStep": last, "keys": keys}

    def node(self) -> dict[str, Any]:
        """The run as GraphQL ``RunFragment`` (a superset of ``LightweightRunFragment``)."""
        config = {k: {"value": v, "desc": None} for k, v in self.config.items()}
        return {
            "id": self.storage_id,
            "projectId": "1",
            "tags": list(self.tags),
            "name": self.run_id,
            "displayName": self.display_name,
            "sweepName": None,
            "state": self.state,
            "config": _dumps(config),
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": self.created_at,
            "heartbeatAt": self.created_at,
            "description": None,
            "notes": None,
            "systemMetrics": "{}",
            "summaryMetrics": _dumps(self.summary),
            "historyLineCount": len(self.history),
            "user": {"name": "fake", "username": "fake"},
            "historyKeys": self.history_keys(),
        }


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    method: str
    path: str
    operation: str | None  # the GraphQL operation name
    variables: dict[str, Any]
    status: int
    time: float = 0.0


@dataclass
class Failure:
    """Requests that answer an HTTP error instead (see :meth:`WandbServer.fail`)."""

    status: int
    operation: str | None = None
    run: str | None = None
    times: int | None = None  # None: forever
    body: str = "fake W&B server: injected failure"
    echo: bool = False  # the body also echoes the request's headers, Authorization included

    def matches(self, operation: str | None, run: str | None) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.operation is not None and self.operation != operation:
            return False
        return self.run is None or self.run == run


class WandbServer:
    """A fake W&B server on ``127.0.0.1``; see the module docstring.

    Parameters
    ----------
    api_key:
        The key the server accepts (HTTP Basic ``api:KEY``, as ``wandb`` sends it); any
        other key is answered with 401. A random 40-character key by default.
    viewer_entity:
        The entity of the logged-in user (``Api().default_entity``).
    """

    def __init__(self, *, api_key: str | None = None, viewer_entity: str = "tester") -> None:
        self.api_key = api_key or secrets.token_hex(20)
        self.viewer_entity = viewer_entity
        self.runs: dict[tuple[str, str, str], FakeRun] = {}
        self.requests: list[Request] = []
        self.unsupported: list[str] = []
        self.failures: list[Failure] = []
        self.features = {"MARK_RUN_FILES_UPLOADED": True}
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-wandb", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        host, port = self._httpd.server_address[:2]
        # An AF_INET server's host is text; the type allows bytes only for other families.
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"

    def env(self) -> dict[str, str]:
        """The environment variables that point ``wandb`` at this server."""
        return {"WANDB_BASE_URL": self.url, "WANDB_API_KEY": self.api_key}

    # -- content -------------------------------------------------------------------------
    def add_run(
        self,
        entity: str,
        project: str,
        run_id: str | None = None,
        *,
        name: str | None = None,
        state: str = "finished",
        config: Mapping[str, Any] | None = None,
        summary: Mapping[str, Any] | None = None,
        tags: Iterable[str] = (),
        created_at: str | datetime | None = None,
        history: Iterable[Mapping[str, Any]] = (),
    ) -> FakeRun:
        """Create a run. History rows without ``_step`` are numbered on from the last row.

        The summary starts as the last logged value of each key (as a run's does), then
        ``summary`` is applied on top.
        """
        with self._lock:
            run_id = run_id or secrets.token_hex(4)
            if isinstance(created_at, datetime):
                created_at = created_at.strftime("%Y-%m-%dT%H:%M:%S")
            if created_at is None:
                created_at = (_EPOCH + timedelta(minutes=len(self.runs))).strftime("%Y-%m-%dT%H:%M:%S")
            run = FakeRun(
                entity=entity,
                project=project,
                run_id=run_id,
                display_name=name or run_id,
                state=state,
                config=dict(config or {}),
                tags=list(tags),
                created_at=created_at,
                storage_id=base64.b64encode(f"Run:v1:{run_id}:{project}:{entity}".encode()).decode(),
            )
            run.log(*history)
            run.summary.update(summary or {})
            self.runs[(entity, project, run_id)] = run
            return run

    def run(self, entity: str, project: str, run_id: str) -> FakeRun:
        return self.runs[(entity, project, run_id)]

    def mutations(self, *, run: str | None = None) -> list[Request]:
        """The write requests received: GraphQL mutations and file uploads."""
        with self._lock:
            writes = [r for r in self.requests if r.method == "PUT" or _is_mutation(r.operation)]
        return [
            r for r in writes if run is None or _run_of(r.variables) == run or _run_of_path(r.path) == run
        ]

    def fail(
        self,
        status: int,
        *,
        operation: str | None = None,
        run: str | None = None,
        times: int | None = None,
        body: str = "fake W&B server: injected failure",
        echo: bool = False,
    ) -> Failure:
        """Answer matching requests with HTTP ``status``: every request, one GraphQL
        ``operation``, and/or the requests about one run id; ``times`` times or forever.
        With ``echo``, the error's message echoes the request's headers, as some proxies
        and servers do (``Authorization`` included)."""
        failure = Failure(status, operation, run, times, body, echo)
        with self._lock:
            self.failures.append(failure)
        return failure

    def reset(self) -> None:
        """Forget all runs, requests and failures."""
        with self._lock:
            self.runs.clear()
            self.requests.clear()
            self.unsupported.clear()
            self.failures.clear()

    # -- request handling ----------------------------------------------------------------
    def _record(
        self, method: str, path: str, operation: str | None, variables: dict[str, Any], status: int
    ) -> None:
        with self._lock:
            self.requests.append(Request(method, path, operation, variables, status, time.monotonic()))

    def _failure(self, operation: str | None, run: str | None) -> Failure | None:
        with self._lock:
            for failure in self.failures:
                if failure.matches(operation, run):
                    if failure.times is not None:
                        failure.times -= 1
                    return failure
        return None

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            _, _, key = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return key == self.api_key

    def _graphql(self, operation: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, f"_op_{operation}", None)
        if handler is None:
            self.unsupported.append(operation)
            raise _GraphQLError(f"fake W&B server: unsupported operation {operation!r}")
        with self._lock:
            return handler(variables, query)

    def _project_runs(self, variables: dict[str, Any]) -> list[FakeRun] | None:
        entity, project = variables.get("entity"), variables.get("project")
        runs = [r for (e, p, _), r in self.runs.items() if e == entity and p == project]
        return runs or None

    def _find(self, variables: dict[str, Any], name_key: str) -> tuple[bool, FakeRun | None]:
        """(does the project exist, the run)."""
        entity = variables.get("entity")
        project = variables.get("project")
        exists = any(e == entity and p == project for (e, p, _) in self.runs)
        return exists, self._run_at(entity, project, variables.get(name_key))

    def _run_at(self, entity: Any, project: Any, name: Any) -> FakeRun | None:
        """The run a request names by entity, project and name; None when one is missing."""
        key = (entity, project, name)
        return self.runs.get(key) if all(isinstance(part, str) for part in key) else None

    def _run_field(self, variables: dict[str, Any], name_key: str, value: Any) -> dict[str, Any]:
        exists, run = self._find(variables, name_key)
        if not exists:
            return {"project": None}
        return {"project": {"internalId": "1", "run": None if run is None else value(run)}}

    def _op_Viewer(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        viewer = {
            "id": "VXNlcjox",
            "entity": self.viewer_entity,
            "username": self.viewer_entity,
            "email": f"{self.viewer_entity}@example.com",
            "flags": "{}",
            "admin": False,
            "teams": {"edges": []},
        }
        return {"viewer": viewer}

    def _op_GetDefaultEntity(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        return {"viewer": {"id": "VXNlcjox", "entity": self.viewer_entity}}

    def _op_ServerFeaturesQuery(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        features = [{"name": name, "isEnabled": on} for name, on in self.features.items()]
        return {"serverInfo": {"features": features}}

    def _op_Runs(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        runs = self._project_runs(variables)
        if runs is None:
            return {"project": None}
        filters = json.loads(variables.get("filters") or "{}")
        selected = [r for r in runs if _matches(r, filters)]
        order = variables.get("order") or "+created_at"
        selected.sort(key=lambda r: _order_key(r, order.lstrip("+-")), reverse=order.startswith("-"))
        start = int(variables.get("cursor") or 0)
        per_page = int(variables.get("perPage") or 50)
        page = selected[start : start + per_page]
        edges = [{"node": r.node(), "cursor": str(start + k + 1)} for k, r in enumerate(page)]
        end = start + len(page)
        return {
            "project": {
                "internalId": "1",
                "runCount": len(selected),
                "readOnly": False,
                "runs": {
                    "edges": edges,
                    "pageInfo": {"endCursor": str(end), "hasNextPage": end < len(selected)},
                },
            }
        }

    def _op_Run(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        return self._run_field(variables, "name", FakeRun.node)

    def _op_RunHistoryKeys(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        return self._run_field(variables, "name", lambda r: {"historyKeys": r.history_keys()})

    def _op_RunParquetHistory(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        # No exported parquet files: wandb-core reads every step through HistoryPage.
        return self._run_field(
            variables, "runName", lambda r: {"parquetHistory": {"parquetUrls": [], "liveData": []}}
        )

    def _op_HistoryPage(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        low, high = int(variables["minStep"]), int(variables["maxStep"])
        size = int(variables.get("pageSize") or 1000)

        def page(run: FakeRun) -> dict[str, Any]:
            rows = [row for row in run.history if low <= row["_step"] < high][:size]
            return {"history": [_dumps(row) for row in rows]}

        return self._run_field(variables, "run", page)

    def _op_SampledHistoryPage(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        # scan_history(keys=...) pages: the rows holding every key, steps minStep..maxStep
        # (both ends included, as wandb-core asks for them), only the keys asked for.
        spec = json.loads(variables["spec"])
        keys = list(dict.fromkeys(spec.get("keys") or []))
        low, high = int(spec.get("minStep", 0)), int(spec.get("maxStep", 2**62))
        size = int(spec.get("samples") or 500)

        def page(run: FakeRun) -> dict[str, Any]:
            rows = [
                {k: row[k] for k in keys}
                for row in run.history
                if low <= row["_step"] <= high and all(k in row for k in keys)
            ]
            return {"sampledHistory": [rows[:size]]}

        return self._run_field(variables, "run", page)

    def _op_RunFiles(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        def files(run: FakeRun) -> dict[str, Any]:
            names = variables.get("fileNames") or list(run.files)
            found = [n for n in names if n in run.files]
            edges = [{"node": self._file_node(run, n), "cursor": n} for n in found]
            return {
                "fileCount": len(run.files),
                "files": {"edges": edges, "pageInfo": {"endCursor": None, "hasNextPage": False}},
            }

        return self._run_field(variables, "name", files)

    def _file_node(self, run: FakeRun, name: str) -> dict[str, Any]:
        url = self._file_url(run, name)
        return {
            "id": base64.b64encode(f"File:{run.run_id}:{name}".encode()).decode(),
            "name": name,
            "url": url,
            "directUrl": url,
            "sizeBytes": len(run.files[name]),
            "mimetype": "application/octet-stream",
            "updatedAt": _EPOCH.strftime("%Y-%m-%dT%H:%M:%S"),
            "md5": base64.b64encode(hashlib.md5(run.files[name]).digest()).decode(),
        }

    def _file_url(self, run: FakeRun, name: str) -> str:
        return f"{self.url}/files/{quote(run.entity)}/{quote(run.project)}/{quote(run.run_id)}/{quote(name)}"

    def _op_CreateRunFiles(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        run = self._run_at(variables.get("entity"), variables.get("project"), variables.get("run"))
        if run is None:
            return {"createRunFiles": {"runID": None, "uploadHeaders": [], "files": []}}
        files = [{"name": n, "uploadUrl": self._file_url(run, n)} for n in variables.get("files", [])]
        return {"createRunFiles": {"runID": run.storage_id, "uploadHeaders": [], "files": files}}

    def _op_deleteFiles(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        """``File.delete()``: the files by the ids ``RunFiles`` gave them."""
        for file_id in variables.get("files") or []:
            _, run_id, name = base64.b64decode(file_id).decode().split(":", 2)
            for run in self.runs.values():
                if run.run_id == run_id:
                    run.files.pop(name, None)
        return {"deleteFiles": {"success": True}}

    def _op_MarkRunFilesUploaded(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        return {"markRunFilesUploaded": {"success": True}}

    def _op_UpsertBucket(self, variables: dict[str, Any], query: str) -> dict[str, Any]:
        run = self._by_storage_id(variables.get("id"))
        if run is None and variables.get("name"):
            run = self._run_at(variables.get("entity"), variables.get("project"), variables["name"])
            if run is None:
                run = self.add_run(
                    variables.get("entity") or self.viewer_entity,
                    variables.get("project") or "uncategorized",
                    variables["name"],
                    state=variables.get("state") or "running",
                )
        if run is None:
            raise _GraphQLError("run not found", status=404)
        if variables.get("summaryMetrics") is not None:
            run.summary = json.loads(variables["summaryMetrics"])
        if variables.get("config") is not None:
            raw = json.loads(variables["config"])
            run.config = {
                k: v.get("value") if isinstance(v, dict) else v for k, v in raw.items() if k != "_wandb"
            }
        if variables.get("tags") is not None:
            run.tags = list(variables["tags"])
        if variables.get("state"):
            run.state = variables["state"]
        if variables.get("displayName"):
            run.display_name = variables["displayName"]
        node = run.node()
        bucket = dict(node, project={"name": run.project, "entity": {"name": run.entity}})
        return {"upsertBucket": {"bucket": bucket, "inserted": False}}

    def _by_storage_id(self, storage_id: str | None) -> FakeRun | None:
        return next((r for r in self.runs.values() if storage_id and r.storage_id == storage_id), None)

    def _put_file(self, path: str, data: bytes) -> bool:
        parts = [unquote(p) for p in path.split("/")[2:]]
        if len(parts) < 4:
            return False
        entity, project, run_id, name = parts[0], parts[1], parts[2], "/".join(parts[3:])
        with self._lock:
            run = self.runs.get((entity, project, run_id))
            if run is None:
                return False
            run.files[name] = data
        return True

    def _stream(self, entity: str, project: str, run_id: str, payload: dict[str, Any]) -> bool:
        """A file_stream post (how a run, or ``wandb sync``, sends history and summary)."""
        with self._lock:
            run = self.runs.get((entity, project, run_id))
            if run is None:
                return False
            files = payload.get("files") or {}
            history = files.get("wandb-history.jsonl")
            if history:
                offset = int(history.get("offset", 0))
                rows = [json.loads(line) for line in history.get("content", [])]
                run.history[offset : offset + len(rows)] = rows
            summary = files.get("wandb-summary.json")
            if summary and summary.get("content"):
                run.summary = json.loads(summary["content"][-1])
            if payload.get("complete"):
                run.state = "finished" if not payload.get("exitcode") else "failed"
            return True

    def _get_file(self, path: str) -> bytes | None:
        parts = [unquote(p) for p in path.split("/")[2:]]
        if len(parts) < 4:
            return None
        run = self.runs.get((parts[0], parts[1], parts[2]))
        return None if run is None else run.files.get("/".join(parts[3:]))


class _GraphQLError(Exception):
    def __init__(self, message: str, status: int = 200) -> None:
        super().__init__(message)
        self.status = status


class _Handler(BaseHTTPRequestHandler):
    fake: WandbServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:
        body = self._body()
        if self.path.startswith("/files/") and self.path.endswith("/file_stream"):
            self._file_stream(body)
            return
        if not self.path.startswith("/graphql"):
            self._send(200, b"")  # wandb-core's telemetry export: accepted and ignored
            return
        try:
            request = json.loads(body)
        except ValueError:
            self._send(400, b'{"errors":[{"message":"bad JSON"}]}')
            return
        query = request.get("query", "")
        match = _OPERATION.search(query)
        operation = request.get("operationName") or (match.group(2) if match else None)
        variables = request.get("variables") or {}
        fake = self.fake
        if not fake._authorized(self.headers.get("Authorization")):
            fake._record("POST", self.path, operation, variables, 401)
            self._send(401, b'{"errors":[{"message":"invalid API key"}]}')
            return
        failure = fake._failure(operation, _run_of(variables))
        if failure is not None:
            fake._record("POST", self.path, operation, variables, failure.status)
            message = failure.body
            if failure.echo:
                message += f" (request headers: {json.dumps(dict(self.headers.items()))})"
            self._send(failure.status, json.dumps({"errors": [{"message": message}]}).encode())
            return
        try:
            data = fake._graphql(operation or "", query, variables)
        except _GraphQLError as exc:
            fake._record("POST", self.path, operation, variables, exc.status)
            self._send(exc.status, json.dumps({"errors": [{"message": str(exc)}], "data": None}).encode())
            return
        fake._record("POST", self.path, operation, variables, 200)
        self._send(200, _dumps({"data": data}).encode())

    def _file_stream(self, body: bytes) -> None:
        fake = self.fake
        parts = [unquote(p) for p in self.path.split("/")]
        entity, project, run_id = parts[2], parts[3], parts[4]
        variables = {"entity": entity, "project": project, "run": run_id}
        if not fake._authorized(self.headers.get("Authorization")):
            fake._record("POST", self.path, "file_stream", variables, 401)
            self._send(401, b"")
            return
        failure = fake._failure("file_stream", run_id)
        if failure is not None:
            fake._record("POST", self.path, "file_stream", variables, failure.status)
            self._send(failure.status, failure.body.encode(), "text/plain")
            return
        ok = fake._stream(entity, project, run_id, json.loads(body))
        fake._record("POST", self.path, "file_stream", variables, 200 if ok else 404)
        self._send(200 if ok else 404, b'{"exitcode": null, "limits": {}}')

    def do_PUT(self) -> None:
        body = self._body()
        fake = self.fake
        failure = fake._failure("PUT", _run_of_path(self.path))
        if failure is not None:
            fake._record("PUT", self.path, None, {}, failure.status)
            self._send(failure.status, failure.body.encode(), "text/plain")
            return
        ok = self.path.startswith("/files/") and fake._put_file(self.path, body)
        fake._record("PUT", self.path, None, {}, 200 if ok else 404)
        self._send(200 if ok else 404, b"")

    def do_GET(self) -> None:
        data = self.fake._get_file(self.path) if self.path.startswith("/files/") else None
        self.fake._record("GET", self.path, None, {}, 200 if data is not None else 404)
        self._send(200 if data is not None else 404, data or b"", "application/octet-stream")


def _dumps(value: Any) -> str:
    """JSON as W&B's API sends it: non-finite floats as the strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"`` (strict JSON has no such numbers, and wandb-core
    parses responses strictly; W&B's own tools meet them as strings in run histories)."""
    return json.dumps(_finite_json(value), allow_nan=False)


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"


def _is_mutation(operation: str | None) -> bool:
    return operation in {
        "UpsertBucket",
        "CreateRunFiles",
        "MarkRunFilesUploaded",
        "DeleteRun",
        "UpdateRunState",
        "file_stream",
    }


def _run_of(variables: Mapping[str, Any]) -> str | None:
    for key in ("name", "run", "runName"):
        if isinstance(variables.get(key), str):
            return variables[key]
    storage_id = variables.get("id")
    if isinstance(storage_id, str):
        try:
            return base64.b64decode(storage_id).decode().split(":")[2]
        except (ValueError, IndexError):
            return None
    return None


def _run_of_path(path: str) -> str | None:
    """The run id in ``/files/ENTITY/PROJECT/RUN/...`` (uploads, file_stream)."""
    parts = path.split("/")
    return unquote(parts[4]) if len(parts) > 4 and parts[1] == "files" else None


# -- the subset of W&B's MongoDB-style run filters that selecting runs needs ----------------
def _field(run: FakeRun, name: str) -> Any:
    if name in ("state",):
        return run.state
    if name in ("tags",):
        return run.tags
    if name in ("createdAt", "created_at"):
        return run.created_at
    if name in ("name", "id"):
        return run.run_id
    if name in ("displayName", "display_name"):
        return run.display_name
    for prefix, values in (("config.", run.config), ("summary_metrics.", run.summary)):
        if name.startswith(prefix):
            key = name[len(prefix) :]
            if prefix == "config." and key.endswith(".value") and key not in values:
                key = key[: -len(".value")]
            return values.get(key, _MISSING)
    return _MISSING


_MISSING = object()


def _matches(run: FakeRun, query: Mapping[str, Any]) -> bool:
    for key, condition in query.items():
        if key == "$and":
            ok = all(_matches(run, q) for q in condition)
        elif key == "$or":
            ok = any(_matches(run, q) for q in condition)
        elif key == "$nor":
            ok = not any(_matches(run, q) for q in condition)
        else:
            ok = _test(_field(run, key), condition)
        if not ok:
            return False
    return True


def _test(value: Any, condition: Any) -> bool:
    if not isinstance(condition, Mapping) or not any(k.startswith("$") for k in condition):
        return _eq(value, condition)
    return all(_operator(op, value, arg) for op, arg in condition.items())


def _eq(value: Any, arg: Any) -> bool:
    if isinstance(value, list) and not isinstance(arg, list):
        return arg in value
    return value is not _MISSING and value == arg


def _operator(op: str, value: Any, arg: Any) -> bool:
    if op == "$eq":
        return _eq(value, arg)
    if op == "$ne":
        return not _eq(value, arg)
    if op == "$in":
        return any(_eq(value, a) for a in arg)
    if op == "$nin":
        return not any(_eq(value, a) for a in arg)
    if op == "$exists":
        return (value is not _MISSING) == bool(arg)
    if op == "$regex":
        return isinstance(value, str) and re.search(arg, value) is not None
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if value is _MISSING or value is None:
            return False
        try:
            return {"$gt": value > arg, "$gte": value >= arg, "$lt": value < arg, "$lte": value <= arg}[op]
        except TypeError:
            return False
    raise _GraphQLError(f"fake W&B server: unsupported filter operator {op!r}", status=400)


def _order_key(run: FakeRun, order: str) -> Any:
    if order in ("created_at", "createdAt"):
        return run.created_at
    value = _field(run, order)
    return (
        value is _MISSING,
        str(value) if not isinstance(value, (int, float)) or math.isnan(value) else value,
    )
