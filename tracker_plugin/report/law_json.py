"""The JSON document's blocks of the project's law: the plan's end and the provenance."""

from __future__ import annotations

import math
from typing import Any

from tracker_plugin.core.analysis import Analysis
from tracker_plugin.core.project_law import ProjectForecast, ProjectLaw

__all__ = ["plan_end_json", "project_doc", "project_law_json"]


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def plan_end_json(analysis: Analysis) -> dict[str, Any] | None:
    """The smoothed loss at the planned end: ``{step, tokens, loss, loss_interval, source}``
    (tokens null on the step axis; the interval null where the loss was logged there)."""
    end = analysis.plan_end
    if end is None:
        return None
    interval = None if end.loss_interval is None else [_num(end.loss_interval[0]), _num(end.loss_interval[1])]
    return {"step": _num(end.step), "tokens": analysis.in_tokens(end.tokens), "loss": _num(end.loss),
            "loss_interval": interval, "source": end.source}


def project_law_json(analysis: Analysis) -> dict[str, Any] | None:
    """The project's law the forecast used, or why there was none (null: none was asked)."""
    project = analysis.config.project_law
    if project is None or analysis.config.model == "power-law":
        return None
    return project_doc(project, analysis.project)


def project_doc(project: ProjectLaw, forecast: ProjectForecast | None) -> dict[str, Any]:
    """The ``project_law`` block: the law, what it was fitted on, and what it said of the run."""
    pooled = project.pooled
    doc: dict[str, Any] = {
        "shared": project.shared,
        "reason": project.reason,
        "siblings": list(project.siblings),
        "left_out": [{"run": run, "why": why} for run, why in project.left_out],
        "narrowed": project.narrowed,
        "choice": project.choice or None,
        "law": None,
    }
    if pooled is not None:
        from tracker_plugin.core.models import LAWS

        names = LAWS[pooled.law].parameter_names
        doc["law"] = {"name": pooled.law, "params": {**dict(zip(("L0", "A", "G"), pooled.coef)),
                                                      **dict(zip(names, pooled.theta)), "area_ref": pooled.area_ref},
                      "fit_status": {"converged": pooled.status.converged, "reason": pooled.status.reason,
                                     "evaluations": pooled.status.evaluations}}
    if forecast is not None:
        doc["run"] = {"share_of_plan": forecast.fraction, "errors_at_cut": forecast.cut, "level": forecast.level,
                      "own_share": [t.own_share for t in forecast.targets]}
    return doc
