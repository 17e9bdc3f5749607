"""Log the bundled example runs into MLflow, annotate them, and print the summary table.

    python examples/mlflow_quickstart.py

The runs (``examples/runs/*.csv``) go into the experiment ``loss-eta-examples`` of the
tracking URI in ``MLFLOW_TRACKING_URI``, else MLflow's own default: the local store
``mlflow.db`` in the current directory (artifacts under ``./mlruns``). Runs already logged
there (by name) are not logged again, so the script can be run twice; the second time
``annotate`` finds every annotation current and says ``unchanged``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

RUNS = Path(__file__).resolve().parent / "runs"
EXPERIMENT = "loss-eta-examples"
TARGETS = ["3.6", "3.3", "3.1"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tracking-uri", help="MLflow tracking URI [default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db]"
    )
    args = parser.parse_args(argv)

    import mlflow
    from mlflow.tracking import MlflowClient

    sys.path.insert(0, str(RUNS.parents[1]))  # this checkout, for the tests' logger (tests/doubles)
    from tests.doubles.mlflow_runs import log_csv
    from tracker_plugin.cli import main as tracker_plugin

    uri = args.tracking_uri or mlflow.get_tracking_uri()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(EXPERIMENT)
    logged = {run.info.run_name for run in client.search_runs([experiment_id], max_results=1000)}
    for path in sorted(RUNS.glob("*.csv")):
        if path.stem not in logged:
            log_csv(client, experiment_id, path)
            print(f"logged {path.name} as run {path.stem}", file=sys.stderr)

    command = ["annotate", f"mlflow:experiment/{EXPERIMENT}", "--tracking-uri", uri,
               "--loss-col", "val_loss", "--target", *TARGETS]  # fmt: skip
    print(f"$ tracker-plugin {' '.join(command)}")
    code = tracker_plugin(command)
    print(f"\nThe runs table of '{EXPERIMENT}' as MLflow serves it (sorted on a forecast column):")
    print(mlflow_table(client, experiment_id, "when_3p3"))
    print(
        f"\nIn the MLflow UI ({_ui_hint(uri)}), open the experiment\n"
        f"'{EXPERIMENT}'; under Columns, add the Tag when_3p3 (what happened, in words)\n"
        "and the Metrics when_3p3_Btok, when_3p3_step and when_3p3_hours (sortable). Each\n"
        "run's Artifacts tab shows loss_eta.png and loss_eta.json."
    )
    return code


def _ui_hint(uri: str) -> str:
    """How to open the UI: a server already serves it; a local store needs ``mlflow ui``."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    return f"mlflow ui --backend-store-uri {uri}"


def mlflow_table(client, experiment_id: str, key: str) -> str:
    """The experiment's runs with a target's columns, sorted on its billions of tokens."""
    runs = client.search_runs([experiment_id], order_by=[f"metrics.`{key}_Btok` ASC"], max_results=1000)
    header = ("run", f"{key}_Btok", f"{key}_step", key)
    rows = [header]
    for run in runs:
        metrics, tags = run.data.metrics, run.data.tags
        rows.append((
            run.info.run_name,
            _number(metrics.get(f"{key}_Btok")),
            _number(metrics.get(f"{key}_step")),
            tags.get(key, ""),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def _number(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.6g}"


if __name__ == "__main__":
    sys.exit(main())
