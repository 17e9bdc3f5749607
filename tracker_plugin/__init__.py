"""tracker_plugin: when does a training run reach a target loss?

The public API, re-exported here and loaded on first use, so that importing one layer
(a tracker adapter, say) does not load the others. Tracker adapters live in
:mod:`tracker_plugin.trackers` and import their tracker's client only when used.

>>> import tracker_plugin as tp
>>> result = tp.analyze(df, targets=[3.3])          # doctest: +SKIP
>>> result.targets[0].status, result.targets[0].tokens  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tracker_plugin._version import __version__

# name -> the module that defines it
_EXPORTS = {
    "Analysis": "tracker_plugin.core.analysis",
    "AnalysisConfig": "tracker_plugin.core.analysis",
    "Sweep": "tracker_plugin.core.analysis",
    "SweepRow": "tracker_plugin.core.analysis",
    "TargetResult": "tracker_plugin.core.analysis",
    "analyze": "tracker_plugin.core.analysis",
    "Status": "tracker_plugin.core.status",
    "Verdict": "tracker_plugin.core.status",
    "FitFailure": "tracker_plugin.core.models",
    "PowerLaw": "tracker_plugin.core.models",
    "AuthError": "tracker_plugin.errors",
    "ConfigError": "tracker_plugin.errors",
    "DataError": "tracker_plugin.errors",
    "MissingDependency": "tracker_plugin.errors",
    "RunNotFound": "tracker_plugin.errors",
    "SourceError": "tracker_plugin.errors",
    "TrackerPluginError": "tracker_plugin.errors",
    "TrackerUnavailable": "tracker_plugin.errors",
    "BatchStage": "tracker_plugin.frame.history",
    "Columns": "tracker_plugin.frame.history",
    "History": "tracker_plugin.frame.history",
    "build_history": "tracker_plugin.frame.history",
    "BatchSchedule": "tracker_plugin.plan.schedule",
    "LrSchedule": "tracker_plugin.plan.schedule",
    "NoSharedLaw": "tracker_plugin.core.planned",
    "PlannedRun": "tracker_plugin.core.planned",
    "PlannedTarget": "tracker_plugin.core.planned",
    "plan_run": "tracker_plugin.jobs.plan",
    "to_json": "tracker_plugin.report.render",
    "to_text": "tracker_plugin.report.render",
    "load_csv": "tracker_plugin.trackers.csvfile",
}
_RENAMED = {"load_csv": "read_csv"}

# Every name of _EXPORTS, written out so that tools see what the package exports.
__all__ = [
    "Analysis",
    "AnalysisConfig",
    "AuthError",
    "BatchSchedule",
    "BatchStage",
    "Columns",
    "ConfigError",
    "DataError",
    "FitFailure",
    "History",
    "LrSchedule",
    "MissingDependency",
    "NoSharedLaw",
    "PlannedRun",
    "PlannedTarget",
    "PowerLaw",
    "RunNotFound",
    "SourceError",
    "Status",
    "Sweep",
    "SweepRow",
    "TargetResult",
    "TrackerPluginError",
    "TrackerUnavailable",
    "Verdict",
    "__version__",
    "analyze",
    "build_history",
    "load_csv",
    "plan_run",
    "to_json",
    "to_text",
]

if TYPE_CHECKING:
    from tracker_plugin.core.analysis import Analysis, AnalysisConfig, Sweep, SweepRow, TargetResult, analyze
    from tracker_plugin.core.models import FitFailure, PowerLaw
    from tracker_plugin.core.planned import NoSharedLaw, PlannedRun, PlannedTarget
    from tracker_plugin.core.status import Status, Verdict
    from tracker_plugin.errors import (
        AuthError,
        ConfigError,
        DataError,
        MissingDependency,
        RunNotFound,
        SourceError,
        TrackerPluginError,
        TrackerUnavailable,
    )
    from tracker_plugin.frame.history import BatchStage, Columns, History, build_history
    from tracker_plugin.jobs.plan import plan_run
    from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule
    from tracker_plugin.report.render import to_json, to_text
    from tracker_plugin.trackers.csvfile import read_csv as load_csv


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tracker_plugin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
