"""The project's law: runs of one configuration share one loss law across lr schedules.

- :mod:`.evidence`: a finished run, compact and serialisable (:class:`RunEvidence`).
- :mod:`.pooled`: one law fitted on many runs at once (:func:`fit_pooled`).
- :mod:`.configuration`: which runs are one configuration, from what they log.
- :mod:`.loso`: each sibling forecast from the others (leave one out).
- :mod:`.project`: the law chosen, confirmed and narrowed by that evidence
  (:func:`fit_project`);
- :mod:`.forecast`: a run forecast by it (:func:`forecast_run`, :func:`forecast_plan` for a
  run not started).
- :mod:`.join`: a run joining its project's law (its log, its level, the law's curve on it).
- :mod:`.plan_end`: the smoothed loss a run's own law forecasts at its planned end.
- :mod:`.own_log`: how well a finished run alone forecast itself (its evidence's ``own``).

Pure: evidence and histories in, frozen dataclasses out.
"""

from tracker_plugin.core.project_law.configuration import (
    descriptors_from_history,
    descriptors_from_params,
    differs,
)
from tracker_plugin.core.project_law.evidence import RunEvidence, run_evidence
from tracker_plugin.core.project_law.forecast import (
    PlanEnd,
    ProjectForecast,
    TargetLaw,
    forecast_on,
    forecast_plan,
    forecast_run,
    run_curve,
)
from tracker_plugin.core.project_law.join import (
    LawCurve,
    RunLog,
    law_curve,
    log_of_evidence,
    log_of_history,
    log_of_plan,
    run_level,
)
from tracker_plugin.core.project_law.pooled import PooledLaw, Units, fit_pooled
from tracker_plugin.core.project_law.project import DEFAULT_RULES, LawRules, ProjectLaw, fit_project

__all__ = [
    "DEFAULT_RULES",
    "LawCurve",
    "LawRules",
    "PlanEnd",
    "PooledLaw",
    "ProjectForecast",
    "ProjectLaw",
    "RunEvidence",
    "RunLog",
    "TargetLaw",
    "Units",
    "descriptors_from_history",
    "descriptors_from_params",
    "differs",
    "fit_pooled",
    "fit_project",
    "forecast_on",
    "forecast_plan",
    "forecast_run",
    "law_curve",
    "log_of_evidence",
    "log_of_history",
    "log_of_plan",
    "run_curve",
    "run_evidence",
    "run_level",
]
