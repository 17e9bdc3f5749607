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
import logging
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

    # MLflow says at INFO when it creates a new local store's tables: this script's own
    # lines are the ones to read on stderr.
    logging.getLogger("mlflow").setLevel(logging.WARNING)
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

    # Each run is read on the loss every command reads by default (analyze, compare and
    # annotate agree): nanoGPT's train_loss, the OLMo runs' val_loss, the only one they log.
    command = ["annotate", f"mlflow:experiment/{EXPERIMENT}", "--tracking-uri", uri, "--target", *TARGETS]
    print(f"$ tracker-plugin {' '.join(command)}")
    code = tracker_plugin(command)
    print(f"\nThe runs table of '{EXPERIMENT}' as MLflow serves it (sorted on a forecast column):")
    print(mlflow_table(client, experiment_id, "when_3p3"))
    print(f"\n{_columns_hint(client, experiment_id, uri, 'when_3p3')}")
    return code


def _columns_hint(client, experiment_id: str, uri: str, key: str) -> str:
    """Where to look in the UI, naming only the columns the runs have."""
    runs = client.search_runs([experiment_id], max_results=1000)
    have = [f"{key}_{unit}" for unit in ("Btok", "step", "hours") if any(f"{key}_{unit}" in r.data.metrics for r in runs)]
    metrics = ", ".join(have[:-1]) + f" and {have[-1]}" if len(have) > 1 else "".join(have)
    return (
        f"In the MLflow UI ({_ui_hint(uri)}), open the experiment\n"
        f"'{EXPERIMENT}'; under Columns, add the Tag {key} (the answer: a mark and the number\n"
        f"first) and the Metrics {metrics} (click a header twice to sort\n"
        "ascending, soonest first). Each run's Artifacts tab shows loss_eta.png and loss_eta.json;\n"
        "the Chart view with the x-axis set to the metric loss_eta_tokens draws every run's\n"
        "loss_eta_smoothed against tokens."
    )


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
