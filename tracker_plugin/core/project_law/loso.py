"""Leave one sibling out: how well the pooled law forecasts each finished run from the others.

For each sibling the law is fitted again without it and forecasts it from its own log cut
at each share of :data:`CUTS` (0: before its first row), as a running run is forecast: its
targets (where its smoothed loss stood at :data:`QUANTILES` of its tokens) and its
smoothed loss at its end. Those errors are the project's own evidence of how far to trust
its law at each stage of a run: they decide whether the runs share a law at all
(:mod:`.configuration`), how much a running run's own law weighs beside it, and how wide
the interval is (:mod:`.project`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.project_law.evidence import RunEvidence
from tracker_plugin.core.project_law.join import CONTROL, LEVEL_FLOOR, law_curve, log_of_evidence
from tracker_plugin.core.project_law.pooled import (
    Member,
    PooledLaw,
    Units,
    common_timeline,
    fit_pooled,
    member,
)

__all__ = ["CUTS", "QUANTILES", "SiblingError", "evidence_member", "leave_one_out", "sibling_errors"]

# The shares of a sibling's tokens it is cut at, and the targets it is scored on (the
# shares of its tokens at which its smoothed loss reached them).
CUTS = (0.0, 0.1, 0.25, 0.5, 0.75)
QUANTILES = (0.6, 0.8)
# An error past this is scored as this (a forecast of never, or of a thousandfold).
_MISS = 3.0


@dataclass(frozen=True)
class SiblingError:
    """The pooled law (fitted without ``run``) forecasting ``run`` from its log cut at
    ``cut``: ``ln(predicted / true tokens)`` of the target at ``quantile`` (``_MISS`` for a
    forecast of never), and the smoothed loss at its last row less the law's there."""

    run: str
    cut: float
    quantile: float
    error: float
    end_error: float


def evidence_member(evidence: RunEvidence, units: Units) -> Member:
    """A finished run as a member of a pooled fit, from its evidence."""
    timeline = common_timeline(evidence.timeline(), units, evidence.peak_lr)
    bins = np.array(evidence.bins, float).reshape(-1, 3)
    return member(evidence.run, timeline, bins[:, 0], bins[:, 1], bins[:, 2], evidence.fit_start)


def sibling_errors(law: PooledLaw, evidence: RunEvidence, cuts: Sequence[float] = CUTS,
                   floor: float = LEVEL_FLOOR, control: bool = CONTROL) -> list[SiblingError]:
    """``law`` (fitted without ``evidence``'s run) forecasting that run at each cut."""
    final = float(evidence.tokens_at(evidence.last_step)[0])
    steps = np.array([p[0] for p in evidence.curve], float)
    targets = [(q, float(evidence.smoothed_at(np.interp(q * final, evidence.tokens_at(steps), steps))))
               for q in QUANTILES]
    out = []
    for cut in cuts:
        log = log_of_evidence(evidence, cut)
        curve = law_curve(law, log, floor=floor, control=control)
        end_error = float(evidence.smoothed_at(evidence.last_step)) - curve.loss_at(evidence.last_step)
        for q, target in targets:
            truth = evidence.crossing(target)
            if truth is None or truth <= log.last_tokens:
                continue
            found = curve.crossing(target)
            error = _MISS if found is None else min(max(math.log(found / truth), -_MISS), _MISS)
            out.append(SiblingError(evidence.run, cut, q, error, end_error))
    return out


def leave_one_out(
    evidences: Sequence[RunEvidence],
    law_name: str,
    units: Units,
    *,
    full: PooledLaw | None = None,
    cuts: Sequence[float] = CUTS,
    shift: bool = False,
    floor: float = LEVEL_FLOOR,
    control: bool = CONTROL,
    memo: dict[Any, Any] | None = None,
) -> tuple[list[SiblingError], list[tuple[str, str]]]:
    """Every sibling forecast by the law fitted on the others (started from ``full``, the
    fit on them all, when given); and the siblings no law could be fitted without, each
    with why. ``memo`` keeps the fits for another call on the same runs (other cuts)."""
    members = [evidence_member(e, units) for e in evidences]
    area_ref = full.area_ref if full is not None else float(np.median([m.obs.area[-1] for m in members]))
    errors: list[SiblingError] = []
    failed: list[tuple[str, str]] = []
    for i, evidence in enumerate(evidences):
        others = members[:i] + members[i + 1:]
        key = (tuple(e.run for e in evidences), evidence.run, law_name, shift, units, area_ref)
        law = None if memo is None else memo.get(key)
        if law is None:
            law = fit_pooled(others, law_name, units, area_ref=area_ref, shift=shift,
                             start=None if full is None else full.theta)
            if memo is not None:
                memo[key] = law
        if isinstance(law, FitFailure):
            failed.append((evidence.run, law.reason))
            continue
        errors += sibling_errors(law, evidence, cuts, floor, control)
    return errors, failed
