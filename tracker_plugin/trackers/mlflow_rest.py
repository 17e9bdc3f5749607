"""The MLflow REST calls the plugin makes itself, over plain HTTP with ``requests``.

- **Reachability:** one ``GET /api/2.0/mlflow/experiments/get`` before anything else, so
  that a server that is not there is reported in seconds (``MlflowClient`` retries a
  refused connection for minutes by default). Any HTTP answer, even an error, counts.
- **Metric history:** ``GET /api/2.0/mlflow/metrics/get-history`` (documented in MLflow's
  REST API), paged with ``max_results``/``page_token`` and parsed straight from JSON into
  arrays: going through ``MlflowClient`` and its protobuf objects costs more than the
  server does.
- **Our artifacts, read back:** ``GET`` of the file under a run's proxied artifact URI
  (MLflow's artifacts service, ``/api/2.0/mlflow-artifacts/artifacts/...``): MLflow's
  own download draws a progress bar on stderr for every file, one per run per night.

Every request has an explicit timeout and a bounded number of retries (a refused
connection, a timeout, HTTP 429 or 5xx; waits of 1, 2, 4 ... s, or what the answer's
``Retry-After`` asks when that is longer, up to 2 minutes; a busy server's 429 and 503 at
least 6 times), set per call; nothing in
the process's environment or in MLflow's settings is changed. Credentials are read the
way MLflow documents them, never set: ``MLFLOW_TRACKING_USERNAME`` and
``MLFLOW_TRACKING_PASSWORD`` (else ``~/.mlflow/credentials``) for basic auth, else
``MLFLOW_TRACKING_TOKEN`` for a bearer token; ``MLFLOW_TRACKING_INSECURE_TLS``,
``MLFLOW_TRACKING_SERVER_CERT_PATH`` and ``MLFLOW_TRACKING_CLIENT_CERT_PATH`` for TLS. A
tracking URI this cannot speak to as MLflow would (not http(s); an auth plugin in
``MLFLOW_TRACKING_AUTH``; AWS SigV4; a workspace in ``MLFLOW_WORKSPACE``) gets no
:class:`RestTarget`, and the source reads through ``MlflowClient`` instead.
"""

from __future__ import annotations

import base64
import configparser
import datetime
import email.utils
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracker_plugin.redact import redact, redact_uri

__all__ = [
    "HISTORY_ENDPOINT",
    "MAX_RETRY_AFTER",
    "RestError",
    "RestTarget",
    "Unreachable",
    "metric_history",
    "rest_target",
    "retry_after",
]

HISTORY_ENDPOINT = "/api/2.0/mlflow/metrics/get-history"
_PROBE_ENDPOINT = "/api/2.0/mlflow/experiments/get"
_TRANSIENT = frozenset({429, 500, 502, 503, 504})
# A busy server's answers: tried again at least this many times (waits 1, 2, 4, ... 32 s, or
# what Retry-After asks), as MLflow's own client does (7 by default); a refused connection
# or a 500 keeps to ``retries``, so a server that is not there is still said in seconds.
_BUSY = frozenset({429, 503})
_BUSY_RETRIES = 6
_BACKOFF = 1.0  # seconds before the first retry; doubled for each one after
# The longest a Retry-After header is waited for: a job must not stall for a header's hour.
MAX_RETRY_AFTER = 120.0
# Auth and routing that only MLflow's own client knows how to do.
_CLIENT_ONLY = ("MLFLOW_TRACKING_AUTH", "MLFLOW_WORKSPACE")
_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "ENDPOINT_NOT_FOUND",
    429: "REQUEST_LIMIT_EXCEEDED",
}
# A multi-worker server (uvicorn, gunicorn) balances connections, not requests: one worker
# often accepts all of a burst of new connections and serves every page sent on them
# while the others idle. A connection per page lets whichever worker is free take it.
_ONE_REQUEST_PER_CONNECTION = {"Connection": "close"}


class RestError(Exception):
    """The server answered with an MLflow error (its ``error_code`` and ``message``)."""

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class Unreachable(Exception):
    """No answer after the retries: ``reason`` is ``connection refused``, ``timed out``,
    ``server errors`` (HTTP 5xx on every try), ..."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RestTarget:
    """A tracking server and how to talk to it: per-request timeout, retries, credentials."""

    url: str
    timeout: float
    retries: int
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    verify: bool | str = True
    cert: str | None = None

    def get(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON answer of ``GET endpoint``; raises :class:`RestError` or :class:`Unreachable`."""
        return _answer(self._response(self.url + endpoint, params))

    def file(self, path: str) -> bytes | None:
        """The bytes of the file at ``path`` under :attr:`url` (an artifact repository's
        URL); None when there is none (HTTP 404). Raises as :meth:`get` does."""
        response = self._response(f"{self.url}/{path.lstrip('/')}", {})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            _answer(response)  # raises: the server's error, said as MLflow says it
        return bytes(response.content)

    def _response(self, url: str, params: dict[str, Any]) -> Any:
        """The answer to ``GET url``, retried as the module docstring says."""
        import requests

        headers = {**self.headers, **_ONE_REQUEST_PER_CONNECTION}
        busy_retries = max(self.retries, _BUSY_RETRIES)
        for attempt in range(busy_retries + 1):
            last = attempt >= self.retries
            try:
                response = requests.get(
                    url, params=params, headers=headers, timeout=self.timeout, verify=self.verify, cert=self.cert
                )
            except requests.RequestException as exc:
                if last:
                    raise Unreachable(network_reason(exc)) from None
            else:
                status = response.status_code
                # A server that says it is busy (429, 503) is there: it gets more patience.
                if status not in _TRANSIENT or (last and status not in _BUSY) or attempt == busy_retries:
                    return response
                # A server that says when to come back is taken at its word.
                wait = retry_after(response.headers.get("Retry-After"))
                if wait is not None:
                    time.sleep(max(wait, _BACKOFF * 2**attempt))
                    continue
            time.sleep(_BACKOFF * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def check_reachable(self) -> None:
        """Raise :class:`Unreachable` unless the server answers at all (any HTTP status)."""
        try:
            self.get(_PROBE_ENDPOINT, {"experiment_id": "0"})
        except RestError:
            pass


def rest_target(uri: str, *, timeout: float, retries: int) -> RestTarget | None:
    """How to reach the tracking server at ``uri`` with plain HTTP, or None when only
    ``MlflowClient`` can (see the module docstring)."""
    if not uri.lower().startswith(("http://", "https://")):
        return None
    if any(os.environ.get(name) for name in _CLIENT_ONLY) or _true(os.environ.get("MLFLOW_TRACKING_AWS_SIGV4")):
        return None
    headers: dict[str, str] = {}
    username, password = _credentials()
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if username and password:
        headers["Authorization"] = "Basic " + base64.standard_b64encode(f"{username}:{password}".encode()).decode()
    elif token:
        headers["Authorization"] = f"Bearer {token}"
    server_cert = os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH")
    verify: bool | str = server_cert or not _true(os.environ.get("MLFLOW_TRACKING_INSECURE_TLS"))
    return RestTarget(
        url=uri.rstrip("/"),
        timeout=timeout,
        retries=max(0, retries),
        headers=headers,
        verify=verify,
        cert=os.environ.get("MLFLOW_TRACKING_CLIENT_CERT_PATH") or None,
    )


def metric_history(
    target: RestTarget, run_id: str, key: str, page_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All of one metric's points as (step, value, timestamp) arrays, page by page."""
    steps: list[Any] = []
    values: list[Any] = []
    stamps: list[Any] = []
    token = None
    seen: set[str] = set()
    while True:
        params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": page_size}
        if token:
            params["page_token"] = token
        page = target.get(HISTORY_ENDPOINT, params)
        metrics = page.get("metrics", [])
        # Fields at their default (0) may be left out of protobuf JSON.
        steps += [m.get("step", 0) for m in metrics]
        values += [m.get("value", 0.0) for m in metrics]
        stamps += [m.get("timestamp", 0) for m in metrics]
        token = page.get("next_page_token") or None
        if token is None:
            break
        if token in seen or not metrics:
            raise RestError("INTERNAL_ERROR", f"the server's history pages do not advance (page token {token!r})")
        seen.add(token)
    return (
        np.asarray(steps, dtype=np.int64),
        np.asarray(values, dtype=float),  # "NaN", "Infinity" parse as such
        np.asarray(stamps, dtype=np.int64),
    )


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (a number of seconds or an HTTP date),
    at most :data:`MAX_RETRY_AFTER`; None when there is none or it cannot be read."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP dates are GMT
            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def network_reason(exc: BaseException) -> str:
    """A refused, reset or timed-out request as a few words."""
    text = redact(str(exc))  # before it is cut short: a cut credential would survive
    for needle, reason in (
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
        ("Read timed out", "timed out"),
        ("too many 5", "server errors"),
        ("Name or service not known", "unknown host"),
        ("Connection reset", "connection reset"),
        ("RemoteDisconnected", "connection closed"),
    ):
        if needle in text:
            return reason
    text = text.strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:120]


def _answer(response: Any) -> dict[str, Any]:
    status = int(response.status_code)
    try:
        body = response.json()
    except ValueError:
        body = None
    if status == 200 and isinstance(body, dict):
        return body
    if status >= 500:
        raise Unreachable("server errors")
    if isinstance(body, dict) and body.get("error_code"):
        raise RestError(str(body["error_code"]), str(body.get("message", "")))
    text = " ".join(redact(str(getattr(response, "text", ""))).split())[:200]  # echoed credentials cut first
    code = _STATUS_CODES.get(status, "BAD_REQUEST" if status >= 400 else "INTERNAL_ERROR")
    where = redact_uri(str(response.url).split("?", 1)[0])
    raise RestError(code, f"HTTP {status} from {where}" + (f": {text}" if text else ""))


def _credentials() -> tuple[str | None, str | None]:
    """Basic-auth credentials as MLflow finds them: the environment, else ``~/.mlflow/credentials``."""
    username = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if username and password:
        return username, password
    parser = configparser.ConfigParser()
    try:
        parser.read(os.path.join(os.path.expanduser("~"), ".mlflow", "credentials"))
    except configparser.Error:
        return username, password
    section = parser["mlflow"] if parser.has_section("mlflow") else {}
    return (
        username or section.get("mlflow_tracking_username"),
        password or section.get("mlflow_tracking_password"),
    )


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")
