"""tracker_plugin: when does a training run reach a target loss?

The public API. Tracker adapters live in :mod:`tracker_plugin.sources` and import their
tracker's client only when used.

>>> import tracker_plugin as tp
>>> result = tp.analyze(df, targets=[3.3])          # doctest: +SKIP
>>> result.targets[0].status, result.targets[0].tokens  # doctest: +SKIP
"""

from .analysis import Analysis, AnalysisConfig, Sweep, SweepRow, TargetResult, analyze
from .errors import (
    AuthError,
    ConfigError,
    DataError,
    MissingDependency,
    RunNotFound,
    SourceError,
    TrackerPluginError,
    TrackerUnavailable,
)
from .history import BatchStage, Columns, History, build_history
from .models import FitFailure, PowerLaw
from .report import to_json, to_text
from .schedule import BatchSchedule, LrSchedule
from .sources.csvfile import read_csv as load_csv

__version__ = "0.1.0"

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
    "PowerLaw",
    "RunNotFound",
    "SourceError",
    "Sweep",
    "SweepRow",
    "TargetResult",
    "TrackerPluginError",
    "TrackerUnavailable",
    "__version__",
    "analyze",
    "build_history",
    "load_csv",
    "to_json",
    "to_text",
]
