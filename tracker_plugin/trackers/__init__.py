"""Adapters that move run histories between a tracker and the common frame.

:func:`open_source` picks the adapter from the run string's prefix and gives it the parts
of the :class:`SourceOptions` it reads; each adapter's module imports its tracker's client
only when used.
"""

from __future__ import annotations

import importlib

from tracker_plugin.trackers.base import FINISHED_STATES, RunInfo, Source
from tracker_plugin.trackers.options import MlflowOptions, ReadOptions, SourceOptions, WandbOptions
from tracker_plugin.trackers.sources import default_source, resolve_source

__all__ = [
    "FINISHED_STATES",
    "SCHEMES",
    "MlflowOptions",
    "ReadOptions",
    "RunInfo",
    "Source",
    "SourceOptions",
    "WandbOptions",
    "default_source",
    "open_source",
    "resolve_source",
]

# prefix -> (module, class)
SCHEMES = {
    "mlflow:": ("mlflow_runs", "MlflowSource"),
    "wandb:": ("wandb_runs", "WandbSource"),
    "wandb-offline:": ("wandb_offline", "WandbOfflineSource"),
}


def open_source(spec: str, options: SourceOptions | None = None) -> Source:
    """The source a run string names: ``mlflow:...``, ``wandb:...``, ``wandb-offline:...``
    or a CSV path (a file, or a directory of ``*.csv`` files); URLs and ``runs:/`` URIs
    as :func:`~.sources.resolve_source` reads them."""
    spec, options = resolve_source(spec, options or SourceOptions())
    for prefix, (module, name) in SCHEMES.items():
        if spec.startswith(prefix):
            cls: type[Source] = getattr(importlib.import_module(f"{__name__}.{module}"), name)
            return cls.from_options(spec[len(prefix) :], options)
    from tracker_plugin.trackers.csvfile import CsvSource

    return CsvSource.from_options(spec, options)
