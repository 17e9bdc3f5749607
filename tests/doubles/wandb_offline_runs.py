"""Offline W&B runs written by the real ``wandb`` SDK, as a training script writes them.

:func:`log_offline_runs` runs a fresh Python process with ``WANDB_MODE=offline`` that calls
``wandb.init``, ``run.log(row, step=...)`` for each row, ``run.summary.update`` and
``run.finish`` for each run, then returns each run's offline directory. The environment
of the calling process is not changed: the child gets a copy pointed at ``home``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["offline_env", "log_offline_runs"]

_LOGGER = """
import json, sys, time, wandb
def media(value):
    if isinstance(value, dict) and "__histogram__" in value:
        return wandb.Histogram(value["__histogram__"])
    return value
for spec in json.load(open(sys.argv[1])):
    settings = wandb.Settings(x_history_value_encoding=spec.get("encoding", "json"))
    run = wandb.init(project=spec.get("project", "offline-tests"), mode="offline", name=spec["name"],
                     config=spec.get("config", {}), settings=settings)
    for row in spec["rows"]:
        row = {k: media(v) for k, v in row.items()}
        step = row.pop("step")
        run.log(row, step=step)
        time.sleep(spec.get("seconds_per_row", 0))
    run.summary.update(spec.get("summary", {}))
    run.finish()
"""


def log_offline_runs(home: str | os.PathLike[str], specs: Sequence[Mapping[str, Any]]) -> dict[str, Path]:
    """Log each run of ``specs`` offline under ``home``; return run name -> run directory.

    Each spec has a ``name``, ``rows`` (dicts with a ``step`` and the keys logged at it; a
    value ``{"__histogram__": [...]}`` is logged as a ``wandb.Histogram`` of those values)
    and optionally ``config``, ``summary``, ``project``, ``encoding`` (the SDK's
    ``x_history_value_encoding``: ``json``, ``typed`` or ``json,typed``) and
    ``seconds_per_row`` (a pause after each row, so the SDK's own clock runs like a
    training loop's rather than a bulk log's).
    """
    root = Path(home)
    root.mkdir(parents=True, exist_ok=True)
    listing = root / "runs.json"
    listing.write_text(json.dumps(list(specs)))
    subprocess.run([sys.executable, "-c", _LOGGER, str(listing)], env=offline_env(root), check=True, timeout=300)
    found: dict[str, Path] = {}
    for run_dir in sorted((root / "wandb").glob("offline-run-*")):
        if run_dir.is_dir() and not run_dir.is_symlink():
            found[_run_name(run_dir)] = run_dir
    return found


def offline_env(root: str | os.PathLike[str]) -> dict[str, str]:
    """This process's environment for a child that logs offline runs under ``root``: every
    ``WANDB_*`` of ours dropped, the SDK's directories in ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_DIR=str(root), WANDB_CONFIG_DIR=str(Path(root) / "config"), WANDB_CACHE_DIR=str(Path(root) / "cache"),
               WANDB_MODE="offline", WANDB_SILENT="true")
    return env


def _run_name(run_dir: Path) -> str:
    """The run's name, from the SDK's metadata (``files/wandb-metadata.json`` has no name
    in every version, so the run's ``.wandb`` file is asked through the plugin's reader)."""
    from tracker_plugin.trackers.wandb_offline import read_offline_run

    wandb_file = max(run_dir.glob("run-*.wandb"))
    return read_offline_run(wandb_file, (), ref=str(run_dir)).name or run_dir.name
