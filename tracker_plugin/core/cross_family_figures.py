"""The leave-one-family-out figures: the point's misses, the intervals' coverage, the Brier
score and the reliability of the reached-by-the-end probability, per setting and family.

Pure: scored cases in, rows out (the report prints them; see :mod:`.cross_family`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tracker_plugin.core.backtest import PLANS
from tracker_plugin.core.cross_family_cases import (
    BEFORE,
    FRACTIONS,
    LEVELS,
    SETTINGS,
    TODAY,
    Replay,
    Rule,
    Scored,
    in_setting,
    lofo,
)
from tracker_plugin.core.status import Status

__all__ = ["CrossFamily", "FamilyRow", "FigureRow", "ReliabilityBin", "brier", "family_rows", "figure_rows", "figures", "held_out", "matching_rows", "reliability", "reliability_rows", "rule_sets"]


# Stands for an infinite |ln| where a percentile is taken.
_INFINITE_MISS = 1e300


def figures(scored: Sequence[Scored]) -> dict[str, float | None]:
    """Cases reached, those forecast never to be, those with no forecast (the cut's fit
    failed: left out of every other figure, and counted so the table says so), median and
    p90 |ln| (a forecast of never counted as an infinite miss), mean signed ln of the finite
    ones, and the 50/80/95% coverages."""
    errors = np.array([e for s in scored if (e := s.error) is not None])
    finite = errors[np.isfinite(errors)]
    out: dict[str, float | None] = {
        "n": float(len([s for s in scored if s.case.reached_in_run])),
        "never": float(len(errors) - len(finite)),
        "failed": float(sum(1 for s in scored if s.case.reached_in_run and s.case.status == Status.NOT_ENOUGH_DATA)),
        "median": _quantile_abs(errors, 50),
        "p90": _quantile_abs(errors, 90),
        "signed": float(np.mean(finite)) if len(finite) else None,
    }
    for level in LEVELS:
        held = [c for s in scored if (c := s.covered(level)) is not None]
        out[f"cov{level:.0%}"] = float(np.mean(held)) if held else None
    return out


def _quantile_abs(errors: np.ndarray, q: float) -> float | None:
    """A percentile of |errors|, an infinite miss ranked above every finite one: inf where
    the percentile falls past the largest finite error (numpy would interpolate inf - inf
    to nan)."""
    if not len(errors):
        return None
    size = np.abs(errors)
    finite = size[np.isfinite(size)]
    value = float(np.percentile(np.minimum(size, _INFINITE_MISS), q))
    return math.inf if not len(finite) or value > finite.max() else value


def brier(scored: Sequence[Scored], f: float) -> tuple[float | None, int]:
    """Brier score of p_reach_within_plan at one cut: the targets reached and the one past the end."""
    pairs = [(s.p_reach, 1.0 if s.case.reached_in_run else 0.0) for s in scored
             if s.case.fit_fraction == f and s.p_reach is not None]
    if not pairs:
        return None, 0
    return float(np.mean([(p - o) ** 2 for p, o in pairs])), len(pairs)


@dataclass(frozen=True)
class ReliabilityBin:
    """The cases whose ``p_reach_within_plan`` fell in ``[low, high)`` (the last bin holds
    1): how many, their mean chance, and the share whose target the run did reach."""

    low: float
    high: float
    cases: int
    mean_p: float | None
    reached: float | None


def reliability(pairs: Iterable[tuple[float, bool]], bins: int = 5) -> tuple[ReliabilityBin, ...]:
    """The reliability table of chances against outcomes, ``(p_reach, reached)`` pairs in
    ``bins`` equal bins of the chance: a calibrated chance reaches in each bin as often as
    its mean says."""
    table = np.array(list(pairs), float).reshape(-1, 2)
    p, y = table[:, 0], table[:, 1]
    where = np.minimum((p * bins).astype(np.int64), bins - 1)
    out = []
    for k in range(bins):
        inside = where == k
        n = int(inside.sum())
        out.append(ReliabilityBin(k / bins, (k + 1) / bins, n, float(p[inside].mean()) if n else None,
                                  float(y[inside].mean()) if n else None))
    return tuple(out)


def reliability_rows(replay: Replay, rules: Mapping[str, Rule]) -> list[tuple[str, tuple[ReliabilityBin, ...]]]:
    """Per plan, the :func:`reliability` of every family's forecasts under its rule in
    ``rules`` (every cut and target with a chance: a plan end to reach within)."""
    out = []
    for plan in PLANS:
        scored = lofo(replay, plan, rules)
        out.append((plan, reliability([(s.p_reach, s.case.reached_in_run) for s in scored if s.p_reach is not None])))
    return out


@dataclass(frozen=True)
class CrossFamily:
    """The leave-one-family-out validation: the replay, the rule chosen without each
    family, the rule all families choose, and the held-out families (scored with it)."""

    replay: Replay
    rules: tuple[tuple[str, Rule], ...]  # (held-out family, the rule the others chose)
    on_all: Rule
    held_out: Replay | None = None

    @property
    def families(self) -> list[str]:
        return self.replay.families

    @property
    def held_out_rules(self) -> dict[str, Rule]:
        """Each held-out family's rule: the rule of all visible families (none held out: empty)."""
        return {} if self.held_out is None else dict.fromkeys(self.held_out.families, self.on_all)


@dataclass(frozen=True)
class FigureRow:
    """The figures of one plan, rule set, setting and group of cuts (``all``: more than
    :data:`SPARSE_ROWS` rows seen; ``sparse``: at most; ``pooled``: both)."""

    plan: str
    rules: str  # before, today, LOFO (or, held out, the rule of all: "all")
    fit_fraction: float
    target_quantile: float
    group: str
    cases: int
    never: int  # reached targets forecast never to be reached (counted in median and p90 as misses)
    failed: int  # reached targets of cuts whose fit failed (no forecast: in no other figure)
    median_abs: float | None
    p90_abs: float | None
    signed: float | None
    coverage_50: float | None
    coverage_80: float | None
    coverage_95: float | None


@dataclass(frozen=True)
class FamilyRow:
    """One family under one plan: the mean signed ln and the 80% coverage at the headline
    setting and the Brier score per cut, with today's rules and with the rule chosen without it."""

    plan: str
    family: str
    signed_today: float | None
    signed_lofo: float | None
    brier: tuple[tuple[float, float | None, float | None, int], ...]  # (cut, today, LOFO, cases)
    pooled: bool = False  # every family's cases (family is "all"; no signed figures)
    # A family's own coverage: the pooled one can hide a family covered too much beside one
    # covered too little.
    coverage_80_today: float | None = None
    coverage_80_lofo: float | None = None


def rule_sets(result: CrossFamily) -> tuple[tuple[str, dict[str, Rule]], ...]:
    """The rule sets the figures compare: before the plausible plans, today's and the
    leave-one-family-out."""
    families = result.families
    return (("before", dict.fromkeys(families, BEFORE)), ("today", dict.fromkeys(families, TODAY)),
            ("LOFO", dict(result.rules)))


def figure_rows(replay: Replay, sets: Sequence[tuple[str, Mapping[str, Rule]]]) -> list[FigureRow]:
    """Per plan, rule set and setting: the figures of non-sparse, sparse and pooled cuts."""
    rows = []
    for plan in PLANS:
        for name, chosen in sets:
            scored = lofo(replay, plan, chosen)
            for f, q in SETTINGS:
                group = in_setting(scored, f, q)
                for label, part in (("all", [s for s in group if not s.sparse]), ("sparse", [s for s in group if s.sparse]),
                                    ("pooled", group)):
                    if part:
                        rows.append(_figure_row(plan, name, f, q, label, figures(part)))
    return rows


def _figure_row(plan: str, name: str, f: float, q: float, group: str, x: dict[str, float | None]) -> FigureRow:
    return FigureRow(plan, name, f, q, group, int(x["n"] or 0), int(x["never"] or 0), int(x["failed"] or 0), x["median"], x["p90"],
                     x["signed"], x["cov50%"], x["cov80%"], x["cov95%"])


def matching_rows(result: CrossFamily, pattern: str) -> list[FigureRow]:
    """The leave-one-family-out figures of the runs whose name matches ``pattern`` (a
    regular expression, searched), every cut pooled: one kind of schedule, say, each run
    scored with the rule chosen without its family (the group is the pattern)."""
    rules, found = dict(result.rules), re.compile(pattern)
    rows = []
    for plan in PLANS:
        scored = [s for s in lofo(result.replay, plan, rules) if found.search(s.case.run)]
        for f, q in SETTINGS:
            if part := in_setting(scored, f, q):
                rows.append(_figure_row(plan, "LOFO", f, q, pattern, figures(part)))
    return rows


def family_rows(replay: Replay, today: Mapping[str, Rule], rules: Mapping[str, Rule]) -> list[FamilyRow]:
    """Per plan and family: the mean signed ln and 80% coverage at the headline setting and the Brier score
    at each cut (f=0.5, then f=0.25), under ``today`` and under ``rules``; then per plan the
    Brier score of every family's cases pooled."""
    f0, q0 = SETTINGS[0]
    out = []
    for plan in PLANS:
        now, held = lofo(replay, plan, today), lofo(replay, plan, rules)
        for fam in replay.families:
            a = figures([s for s in in_setting(now, f0, q0) if s.family == fam])
            b = figures([s for s in in_setting(held, f0, q0) if s.family == fam])
            scores = []
            for f in sorted(FRACTIONS, reverse=True):
                (x, n), (y, _) = brier([s for s in now if s.family == fam], f), brier([s for s in held if s.family == fam], f)
                scores.append((f, x, y, n))
            out.append(FamilyRow(plan, fam, a["signed"], b["signed"], tuple(scores),
                                 coverage_80_today=a["cov80%"], coverage_80_lofo=b["cov80%"]))
        pooled = [(f, brier(now, f)[0], brier(held, f)[0], brier(now, f)[1]) for f in sorted(FRACTIONS, reverse=True)]
        out.append(FamilyRow(plan, "all", None, None, tuple(pooled), pooled=True))
    return out


def held_out(result: CrossFamily) -> tuple[list[FigureRow], list[FamilyRow]]:
    """The held-out families scored with today's rules and with the rule of all families."""
    other = result.held_out
    if other is None:
        return [], []
    today, chosen = dict.fromkeys(other.families, TODAY), result.held_out_rules
    return figure_rows(other, (("today", today), ("all", chosen))), family_rows(other, today, chosen)
