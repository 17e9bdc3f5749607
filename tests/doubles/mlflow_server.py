"""A real ``mlflow server`` process for tests and benchmarks.

The server runs on 127.0.0.1 on a free port with a sqlite backend and proxied artifacts
in a directory of its own, with the job runner off. It is its own process group, so
stopping it stops its workers too. Its access log (uvicorn's) is kept, so a test can
count the requests a piece of code made::

    with MlflowServer(tmp_path) as server:
        mark = server.mark()
        ...                                   # talk to server.uri
        assert server.requests_since(mark, "/metrics/get-history") == 0

With pytest, load this module as a plugin in a ``conftest.py``::

    pytest_plugins = ["tests.doubles.mlflow_server"]

and use the session fixture ``mlflow_server`` (one server for the whole session), or
``stoppable_mlflow_server`` (the same server) in a test that stops it: the fixture starts
it again after the test. The server starts in the background when collection ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["MlflowServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """An ``mlflow server`` on 127.0.0.1 with its store under ``root``.

    ``start`` and ``stop`` may be called again: a restarted server keeps its port and
    its data, as a real server restarted by its operator does.
    """

    def __init__(self, root: str | os.PathLike[str], *, workers: int = 1, port: int | None = None) -> None:
        self.root = Path(root)
        self.workers = workers
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.store_uri = f"sqlite:///{self.root / 'mlflow.db'}"
        self.log_path = self.root / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0, *, wait: bool = True) -> Self:
        """Start the server and wait until ``/health`` answers (``wait=False``: see :meth:`wait_ready`)."""
        if self._process is not None and self._process.poll() is None:
            return self.wait_ready(timeout) if wait else self
        self.root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1"
        )
        env.pop("MLFLOW_TRACKING_URI", None)
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", self.store_uri,
            "--artifacts-destination", str(self.root / "artifacts"),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", str(self.workers),
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self.wait_ready(timeout) if wait else self

    def wait_ready(self, timeout: float = 90.0) -> Self:
        """Wait until a started server answers ``/health``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise RuntimeError(f"mlflow server exited during start-up:\n{self.log_tail()}")
            try:
                if self._get("/health", 1.0) == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer /health within {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server and its workers (its whole process group)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Workers that outlived the parent belong to the same group.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @property
    def pid(self) -> int | None:
        """The server's process id, also its process group's id (None when stopped)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def access_log(self) -> list[str]:
        """The request lines the server has logged so far (``"GET /path?query HTTP/1.1" 200``)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if ' - "' in line and "HTTP/1" in line]

    def mark(self, timeout: float = 10.0) -> int:
        """A point in the access log: every request answered before this call is logged before it.

        Sends a request with a unique query and waits until the server has logged it.
        """
        token = uuid.uuid4().hex
        self._get(f"/health?mark={token}", 5.0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.access_log()
            for i, line in enumerate(lines):
                if token in line:
                    return i + 1
            time.sleep(0.02)
        raise RuntimeError(f"the server did not log the mark request within {timeout} s")

    def requests_since(self, mark: int, fragment: str) -> int:
        """How many logged requests after ``mark`` have ``fragment`` in their request line."""
        end = self.mark()
        return sum(fragment in line for line in self.access_log()[mark : end - 1])

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def _get(self, path: str, timeout: float) -> int:
        with urllib.request.urlopen(f"{self.uri}{path}", timeout=timeout) as response:
            return int(response.status)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# -- pytest: session fixtures, started while the first tests run ---------------------------

# A server takes seconds to start (two processes import mlflow): the session's server
# starts in the background when collection ends, if a selected test uses it, and comes
# up while the first tests run.
_SESSION: dict[str, Any] = {}  # "server": MlflowServer, "root": its TemporaryDirectory
FIXTURES = ("mlflow_server", "stoppable_mlflow_server")


def _server(*, wait: bool = True) -> MlflowServer:
    if "server" not in _SESSION:
        _SESSION["root"] = tempfile.TemporaryDirectory(prefix="mlflow-server-")
        _SESSION["server"] = MlflowServer(_SESSION["root"].name).start(wait=False)
    server: MlflowServer = _SESSION["server"]
    return server.wait_ready() if wait else server


def pytest_collection_finish(session: Any) -> None:
    """Start the session's server if a selected test uses it."""
    if any(name in FIXTURES for item in session.items for name in getattr(item, "fixturenames", ())):
        _server(wait=False)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if "server" in _SESSION:
        _SESSION.pop("server").stop()
        _SESSION.pop("root").cleanup()


try:
    import pytest
except ImportError:  # the class works without pytest; only the fixtures need it
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def mlflow_server() -> MlflowServer:
        """One ``mlflow server`` (1 worker, sqlite) shared by the whole test session."""
        return _server()

    @pytest.fixture
    def stoppable_mlflow_server() -> Iterator[MlflowServer]:
        """The session's server, for a test that stops it: started again after the test.

        A restarted server keeps its port and data, so the tests after it see no change.
        """
        server = _server()
        yield server
        if not server.running:
            server.start()
