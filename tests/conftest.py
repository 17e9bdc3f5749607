from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

# Fixtures mlflow_server and stoppable_mlflow_server: real `mlflow server` processes.
pytest_plugins = ["tracker_plugin.testing.mlflow_server"]

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session", autouse=True)
def _isolated_environment():
    """Tests never read or write the user's caches or trackers: both point into a temp dir."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="tracker-plugin-tests-") as home:
        os.environ["XDG_CACHE_HOME"] = os.path.join(home, "cache")
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        for name in ("TRACKER_PLUGIN_CACHE_DIR", "MLFLOW_TRACKING_URI"):
            os.environ.pop(name, None)
        yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((DATA / "parity_golden.json").read_text())
