"""The project's law: which finished runs share one, fitted and confirmed, and what it says
of a run.

:func:`fit_project` takes the finished runs' evidence and the forecast run's descriptors:

1. the runs of the run's configuration (:mod:`.configuration`; the run itself is never
   its own sibling);
2. the law: each law and origin-shift rule of :class:`LawRules` fitted on them all and
   scored leave-one-sibling-out (:mod:`.loso`); the lowest error wins;
3. narrowed by evidence: a sibling the pooled law (fitted without it) forecasts worse from
   its log cut at :attr:`LawRules.gate_cuts` than its own log forecast itself there is
   left out, and the law fitted again, until every sibling left passes; where most of
   them fail, or fewer than :attr:`LawRules.min_siblings` are left, the runs share no law
   (the report says which did not pass and by how much). Where the runs' peak lrs differ, the law has
   the peak lr in it (:class:`~.pooled.Units`); siblings at other peak lrs that do not
   pass are the ones left out, and the report says the law was narrowed to the run's
   peak lr.

:mod:`.forecast` then forecasts a run by it.

Every rule's default is the one leave-one-family-out validation chooses
(``benchmarks/bench_law.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.project_law.configuration import PEAK_LR, differs, same_peak
from tracker_plugin.core.project_law.evidence import RunEvidence
from tracker_plugin.core.project_law.loso import CUTS, SiblingError, evidence_member, leave_one_out
from tracker_plugin.core.project_law.pooled import PooledLaw, Units, fit_pooled

__all__ = ["DEFAULT_RULES", "LawRules", "ProjectLaw", "fit_project"]


@dataclass(frozen=True)
class LawRules:
    """The project law's rules, each chosen by leave-one-family-out validation
    (``benchmarks/bench_law.py``; the defaults are the rule every visible family chose).

    - ``laws`` and ``shifts``: the candidates a project's own leave-one-out picks among;
    - ``level_floor``: the prior spread of a run's level (0: the configuration's level);
    - ``join_weight``: the run's weight in the pooled fit per share of its plan logged;
    - ``error_prior``, ``error_weight``: the prior spread of a forecast's ln error and its
      worth in sibling cases; ``loss_prior``: the same for the smoothed loss at the end;
    - ``min_siblings``, ``gate_cuts``, ``gate_margin``: how many siblings confirm a law,
      the cuts they are scored at, and by how much the law may trail their own logs;
    - ``own``: how the run's own law counts beside the pooled one (see the field).
    """

    laws: tuple[str, ...] = ("multi-power", "lr-annealing")
    shifts: tuple[bool, ...] = (False, True)
    level_floor: float = 0.0
    control: bool = False
    join_weight: float = 6.0
    error_prior: float = 0.1
    error_weight: float = 4.0
    loss_prior: float = 0.01
    min_siblings: int = 2
    gate_cuts: tuple[float, ...] = (0.1, 0.25, 0.5)
    gate_margin: float = 0.1
    # The run's own law beside the pooled one: "off", "blend" (weighed by the inverse of
    # each one's error variance on the siblings at this stage) or "switch" (the run's own
    # forecast wholly where its own log forecast the siblings better at this stage).
    own: str = "switch"


DEFAULT_RULES = LawRules()
# An own-log error at or past this is a forecast of never (the backtest's miss).
_MISS = 3.0


@dataclass(frozen=True)
class ProjectLaw:
    """A project's law for one configuration, or why there is none.

    ``pooled`` is the law fitted on ``siblings`` (None: no shared law, ``reason`` says
    why); ``left_out`` the runs not counted, each with why; ``errors`` the leave-one-out
    errors of the siblings; ``choice`` how the law was chosen; ``narrowed`` how the peak
    lr narrowed the siblings, where it did.
    """

    pooled: PooledLaw | None
    siblings: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    reason: str | None = None
    choice: str = ""
    narrowed: str | None = None
    errors: tuple[SiblingError, ...] = field(default=(), repr=False)
    evidence: tuple[RunEvidence, ...] = field(default=(), repr=False)
    rules: LawRules = DEFAULT_RULES
    shift: bool = False

    @property
    def shared(self) -> bool:
        return self.pooled is not None

    def own_errors(self, fraction: float) -> dict[tuple[str, float], float]:
        """The siblings' own-log errors at the cut nearest ``fraction``, by ``(run, target
        quantile)`` (a forecast of never scores the backtest's miss)."""
        out = {}
        for e in self.evidence:
            if not e.own:
                continue
            cut = min({c for c, _, _ in e.own}, key=lambda c: (abs(c - fraction), c))
            out.update({(e.run, q): max(min(err, _MISS), -_MISS) for c, q, err in e.own if c == cut})
        return out

    def errors_at(self, fraction: float) -> tuple[float, list[SiblingError]]:
        """The leave-one-out errors at the cut of :data:`~.loso.CUTS` nearest ``fraction``."""
        cut = min(CUTS, key=lambda c: (abs(c - fraction), c))
        return cut, [e for e in self.errors if e.cut == cut]

    def seconds_per_token(self) -> float | None:
        """The siblings' median pace where they logged a clock (None: none did)."""
        paces = [p for e in self.evidence if (p := e.seconds_per_token()) is not None]
        return float(np.median(paces)) if paces else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form (the siblings' evidence included): a project's fit, cached."""
        return {
            "pooled": None if self.pooled is None else self.pooled.to_dict(), "siblings": list(self.siblings),
            "left_out": [list(x) for x in self.left_out], "reason": self.reason, "choice": self.choice,
            "narrowed": self.narrowed, "shift": self.shift, "rules": asdict(self.rules),
            "errors": [[e.run, e.cut, e.quantile, e.error, e.end_error] for e in self.errors],
            "evidence": [e.to_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProjectLaw:
        """The project :meth:`to_dict` wrote."""
        rules = dict(data["rules"])
        rules = {k: tuple(v) if isinstance(v, list) else v for k, v in rules.items()}
        return cls(
            None if data["pooled"] is None else PooledLaw.from_dict(data["pooled"]), tuple(data["siblings"]),
            tuple((str(r), str(w)) for r, w in data["left_out"]), data["reason"], str(data["choice"]),
            data["narrowed"], tuple(SiblingError(str(r), float(c), float(q), float(e), float(x))
                                    for r, c, q, e, x in data["errors"]),
            tuple(RunEvidence.from_dict(e) for e in data["evidence"]), LawRules(**rules), bool(data["shift"]),
        )

    def describe(self) -> str:
        """One line: the law, what it was fitted on, or why there is none."""
        left = "; ".join(f"{run} left out: {why}" for run, why in self.left_out[:5])
        more = f"; {len(self.left_out) - 5} more left out" if len(self.left_out) > 5 else ""
        if self.pooled is None:
            return f"no shared law: {self.reason}" + (f" ({left}{more})" if left else "")
        text = (f"the project's law: {self.pooled.law}{' with an origin shift' if self.shift else ''} fitted on "
                f"{len(self.siblings)} finished run(s) of this configuration ({self.choice})")
        if self.narrowed:
            text += f"; {self.narrowed}"
        return text + (f"; {left}{more}" if left else "")


def fit_project(
    evidences: Sequence[RunEvidence],
    *,
    run: str | None = None,
    descriptors: Mapping[str, str | float] | None = None,
    peak_lr: float | None = None,
    rules: LawRules = DEFAULT_RULES,
    memo: dict[Any, Any] | None = None,
) -> ProjectLaw:
    """The law of ``run``'s configuration from the finished runs' ``evidences`` (see the
    module's docstring). ``descriptors`` and ``peak_lr`` are the run's (None: unknown,
    every run a candidate). ``memo`` keeps the leave-one-out fits for another call on the
    same runs (other rules)."""
    own = dict(descriptors or {})
    if peak_lr is None and isinstance(own.get(PEAK_LR), float):
        peak_lr = float(own[PEAK_LR])
    left: list[tuple[str, str]] = []
    kept: list[RunEvidence] = []
    for e in evidences:
        why = _not_a_sibling(e, run, own)
        if why:
            left.append((e.run, why))
        else:
            kept.append(e)
    if len(kept) < rules.min_siblings:
        return ProjectLaw(None, left_out=tuple(left), rules=rules,
                          reason=f"{len(kept)} finished run(s) of this configuration; a shared law is confirmed on "
                                 f"at least {rules.min_siblings} (each forecast from the others)")
    units = _units(kept)
    memo = {} if memo is None else memo
    law, shift, choice = _choose(kept, units, rules, memo)
    return _narrowed(kept, units, law, shift, choice, left, peak_lr, rules, memo)


def _not_a_sibling(e: RunEvidence, run: str | None, own: Mapping[str, str | float]) -> str | None:
    if run is not None and e.run == run:
        return "the forecast run itself"
    if not e.finished:
        return "it has not finished its plan"
    if e.lr_assumed:
        return "it logged no lr and no plan says what it was"
    return differs(own, e.described)


def _units(evidences: Sequence[RunEvidence]) -> Units:
    """The common clock: the median reference batch; the peak lr in it where every run's
    absolute peak is known and they differ."""
    batches = [float(np.array(e.batch)[0, 2]) for e in evidences]
    peaks = [e.peak_lr for e in evidences]
    known = [p for p in peaks if p is not None]
    lr_aware = len(known) == len(peaks) and not all(same_peak(known[0], p) for p in known)
    return Units(float(np.median(batches)), float(np.median(known)) if lr_aware else None)


def _score(errors: Sequence[SiblingError]) -> float:
    return float(np.mean([abs(e.error) for e in errors])) if errors else math.inf


def _choose(evidences: Sequence[RunEvidence], units: Units, rules: LawRules,
            memo: dict[Any, Any]) -> tuple[str, bool, str]:
    """The law and shift rule whose leave-one-out forecasts (before each sibling's first
    row and at the gate's cut) erred least."""
    scored = []
    members = [evidence_member(e, units) for e in evidences]
    for law in rules.laws:
        for shift in rules.shifts:
            # Each sibling's fit without it starts from the fit on them all (one start, not the law's several).
            full = fit_pooled(members, law, units, shift=shift)
            if isinstance(full, FitFailure):
                scored.append((math.inf, law, shift))
                continue
            errors, failed = leave_one_out(evidences, law, units, full=full, cuts=(0.0,), shift=shift,
                                           floor=rules.level_floor, control=rules.control, memo=memo)
            scored.append((_score(errors) + (math.inf if failed else 0.0), law, shift))
    score, law, shift = min(scored, key=lambda x: x[0])
    others = ", ".join(f"{name}{' shifted' if s else ''} {v:.3f}" for v, name, s in scored if (name, s) != (law, shift))
    return law, shift, f"leave-one-out mean |ln| before each run {score:.3f}; {others}"


def _narrowed(
    kept: list[RunEvidence], units: Units, law: str, shift: bool, choice: str, left: list[tuple[str, str]],
    peak_lr: float | None, rules: LawRules, memo: dict[Any, Any],
) -> ProjectLaw:
    """Fit, score leave-one-out, and leave out the worst sibling that trails its own log,
    until every sibling passes (see the module's docstring)."""
    narrowed_peak = False
    while True:
        members = [evidence_member(e, units) for e in kept]
        pooled = fit_pooled(members, law, units, shift=shift)
        if isinstance(pooled, FitFailure):
            return ProjectLaw(None, left_out=tuple(left), rules=rules, reason=f"the pooled fit failed: {pooled.reason}")
        errors, failed = leave_one_out(kept, law, units, full=pooled, cuts=CUTS, shift=shift,
                                       floor=rules.level_floor, control=rules.control, memo=memo)
        margins = _gate(kept, errors, rules)
        margins.update({run: (math.inf, math.inf, None) for run, _ in failed})
        failing = {r: m for r, m in margins.items() if m[0] > 0}
        if not failing:
            narrowed = None
            if narrowed_peak:
                narrowed = (f"narrowed to the run's peak lr ({peak_lr:g}): the law with the peak lr in it did not carry "
                            "to the runs at other peak lrs")
            return ProjectLaw(pooled, tuple(e.run for e in kept), tuple(left), None, choice, narrowed, tuple(errors),
                              tuple(kept), rules, shift)
        if 2 * len(failing) > len(kept):
            left += [(r, _why(failing[r], rules)) for r in sorted(failing)]
            return ProjectLaw(None, left_out=tuple(left), rules=rules,
                              reason=f"the runs of this configuration do not share a law: forecast from the others, "
                                     f"{len(failing)} of {len(kept)} erred more than their own logs did")
        # The siblings at another peak lr that fail go first (the law did not carry across
        # peak lrs); else every sibling that fails, at once.
        other_peak = [r for r in failing if not same_peak(peak_lr, _peak(kept, r))]
        drop = sorted(other_peak or failing)
        narrowed_peak = narrowed_peak or bool(other_peak)
        left += [(r, _why(failing[r], rules)) for r in drop]
        kept = [e for e in kept if e.run not in drop]
        if len(kept) < rules.min_siblings:
            return ProjectLaw(None, left_out=tuple(left), rules=rules,
                              reason=f"the runs of this configuration do not share a law: {len(kept)} left when those "
                                     f"the others' law forecast worse than their own logs did are left out")
        if units.peak_lr is not None:
            units = _units(kept)


def _why(margin: tuple[float, float, float | None], rules: LawRules) -> str:
    _, mine, theirs = margin
    if math.isinf(mine):
        return "no law could be fitted without it"
    at = ", ".join(f"{c:.0%}" for c in rules.gate_cuts)
    return (f"the law of the others forecast it from {at} of its tokens with mean |ln| {mine:.3f}, "
            + (f"its own log {theirs:.3f}" if theirs is not None else "past the bound of 0.1"))


def _peak(evidences: Sequence[RunEvidence], run: str) -> float | None:
    return next((e.peak_lr for e in evidences if e.run == run), None)


def _gate(kept: Sequence[RunEvidence], errors: Sequence[SiblingError], rules: LawRules) -> dict[str, tuple[float, float, float | None]]:
    """Per sibling: by how much the law trails its own log at the gate's cuts (> 0: fails),
    the law's mean |ln| there and the own log's (None: not known; a bound of 0.1 then)."""
    out = {}
    for e in kept:
        mine = [abs(x.error) for x in errors if x.run == e.run and x.cut in rules.gate_cuts]
        if not mine:
            continue
        cuts = {c for c, _, _ in e.own}
        theirs = None
        if cuts:
            near = {min(cuts, key=lambda c: (abs(c - g), c)) for g in rules.gate_cuts}
            theirs = float(np.mean([min(abs(err), _MISS) for c, _, err in e.own if c in near]))
        law = float(np.mean(mine))
        bound = (theirs if theirs is not None else 0.1) + rules.gate_margin
        out[e.run] = (law - bound, law, theirs)
    return out
