"""The quickstart's closing hint opens the UI the way the tracking URI allows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "mlflow_quickstart.py"


def _quickstart():
    spec = importlib.util.spec_from_file_location("mlflow_quickstart", QUICKSTART)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_server_is_opened_in_the_browser_not_given_to_mlflow_ui():
    # `mlflow ui --backend-store-uri http://...` fails: a server already serves its UI.
    hint = _quickstart()._ui_hint("http://127.0.0.1:5000")
    assert hint == "open http://127.0.0.1:5000 in a browser"


def test_a_local_store_is_served_by_mlflow_ui():
    assert _quickstart()._ui_hint("sqlite:///mlflow.db") == "mlflow ui --backend-store-uri sqlite:///mlflow.db"
