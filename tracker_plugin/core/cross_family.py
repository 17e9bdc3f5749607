"""Leave-one-family-out validation of the forecast's rules.

The forecast rests on rules read off runs: the annealing-gain prior (``anneal_gain``), the
margin by which ``auto`` prefers the multi-power law over the lr-annealing law
(``forecast.SELECTION_MARGIN``), the share of the peak lr a log must have shed before the
multi-power law is a candidate (``forecast.MIN_SEEN_DECAY``), the share of the log's decay an
inner cut must have shed to compare the laws (``forecast.COMPARED_SHARE``), the interval's inflations
the error prior, and the uncertainty rules: the share of an inferred or assumed plan's
draws taken from the plausible plans (``plan_spread.PLAN_SHARE``), the share of the point
forecast's crossings from those plans, for a plan inferred and for one whose shape is
unknown (``plan_spread.INFERRED_POINT_SHARE``, ``UNKNOWN_SHAPE_POINT_SHARE``), the t's degrees of freedom
(``forecast.ERROR_DOF``), the interval's share of the loss horizon (``forecast.LOSS_HORIZON_SHARE``) and an evidence-weighted mixture of the two laws' draws in place of
``auto``'s hard pick (a candidate only when asked for). Tuned on the runs they are scored on, their figures flatter them, so
each family of runs is held out in turn:

1. every run is backtested (:func:`tracker_plugin.core.backtest.backtest_run`) with each
   law of :data:`LAWS` and each gain of :data:`GAINS`, with the plan given (``log``) and
   inferred (``infer``): :func:`run_cases`;
2. ``auto`` under any rule is replayed from those cases (:class:`Replay`): the law it would
   choose from each law's own inner-cut score, which every case carries, and any inflation
   or error prior from the bootstrap's raw draws, which every case carries, and the draws
   over the plausible plans from those draws, which every case with an unknown plan carries;
3. for each held-out family the rule is chosen on the *other* families alone
   (:func:`choose`): gain, margin, gate and the inner cuts compared by the mean over families of the median and
   p90 ``|ln(predicted/true)|`` (each family weighs the same; :func:`point_loss`) jointly with the point's shares
   from the plausible plans, then by the same loss the laws' mixture, then the error prior and the inflations
   jointly, the t's degrees of freedom, the loss horizon's share and the plausible plans' share, each by the squared
   miss of the 50/80/95% coverages of their cases pooled (cuts with no inner forecast apart);
4. the held-out family is scored with that rule; all families' held-out scores pooled are
   the leave-one-family-out figures (:func:`cross_family`, :func:`figure_rows`).

Cuts whose forecast saw at most :data:`SPARSE_ROWS` logged rows are reported on their own.
The Brier score of ``p_reach_within_plan`` is over the targets the runs reached and, per
cut, one they did not (``backtest_run(beyond=True)``).

Pure: histories and settings in, frozen dataclasses out.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from tracker_plugin.core import forecast, plan_spread
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import PLANS, BacktestCase, backtest_run
from tracker_plugin.core.models import ANNEAL_GAIN
from tracker_plugin.core.status import Status
from tracker_plugin.defaults import DEFAULT_FAMILY_RULE
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

__all__ = [
    "BEFORE", "DEFAULT_FAMILY_RULE", "DOFS", "GAINS", "LAWS", "MISS_SCORE", "MIXES", "PLAN_SHARES", "POINT_SHARES", "SETTINGS", "TODAY", "UNDER_COVERAGE_WEIGHT",
    "CrossFamily", "Cut", "FamilyRow", "FigureRow", "ReliabilityBin", "Replay", "Rule", "Scored", "brier", "choose", "choose_mix",
    "coverage_misses", "cross_family", "family_of", "family_rows", "figure_rows", "figures", "held_out", "mixed", "plan_point",
    "matching_rows", "reliability", "replay_raw", "replay_reach", "reliability_rows", "run_cases",
]

LAWS = ("lr-annealing", "multi-power")
FRACTIONS = (0.25, 0.5)
QUANTILES = (0.6, 0.8)
# (fit fraction, target quantile) of the figures; the first is the headline setting.
SETTINGS = ((0.5, 0.8), (0.25, 0.6), (0.25, 0.8))
LEVELS = (0.5, 0.8, 0.95)
SPARSE_ROWS = 40
# Candidate rules.
GAINS = (0.025, 0.05, 0.1)
MARGINS = (0.0, 0.01, 0.03, 0.1, math.inf)
GATES = (0.1, 0.25, 0.5)
INFLATIONS = (0.8, 1.0, 1.25, 1.5, 2.0)
ERROR_SCALES = (0.05, 0.1, 0.2, 0.3)
ERROR_WEIGHTS = (1.0, 3.0, 10.0)
PLAN_SHARES = (0.0, 0.5, 1.0)
POINT_SHARES = (0.0, 0.5, 1.0)
DOFS = (0.0, 2.0, 3.0, 5.0)
LOSS_HORIZON_SHARES = (0.0, 0.5, 1.0)
COMPARED_SHARES = (0.0, 0.25, 0.5, 0.75)
# How much more an interval that covers less than it says costs than one that covers more,
# in the calibration loss: rules fitted to the pooled coverage of some families cover less
# on a family they have not seen (its runs differ from theirs by more than their runs
# differ among themselves), and a user trusting an 80% interval that holds 70% is misled
# where one that holds 90% is only told too little. A stated preference, not chosen by the
# validation it serves: with 1 (symmetric), 2, 3 or 4 the held-out 80% intervals (plan
# given, f=0.5 q=0.8) cover 74%, 77%, 81% or 85%, and at f=0.25 q=0.8 66%, 74%, 74%, 80%.
UNDER_COVERAGE_WEIGHT = 3.0
# A reached target forecast never to be reached counts as this |ln| in the point loss, as
# auto scores a failed inner forecast (an infinite miss would make every median it lands on,
# and so every rule, tie).
MISS_SCORE = forecast.FAILED_SCORE
# The point loss reads these percentiles of |ln| (their mean), as the figures are read: the
# median alone let rules through that forecast the hard cases never to be (a miss past the
# median moves nothing), where the p90 counts them. A stated objective, the median and the
# p90 the figures are held to, not chosen by the validation it serves; with the median
# alone the LOFO figures (plan inferred, f=0.25 q=0.8) had 10 such misses and 70% cover.
POINT_PERCENTILES = (50.0, 90.0)
# At most this many rounds of the interval rules' coordinate descent (see choose).
_DESCENT_ROUNDS = 4
# Stands for an infinite |ln| where a percentile is taken.
_INFINITE_MISS = 1e300
# The laws' mixture widths tried by default: the hard pick alone (with 0.03, 0.1 and 0.3 the
# other families chose a mixture that forecast the held-out OLMo runs later).
MIXES: tuple[float, ...] = (0.0,)

Results = Mapping[tuple[str, float], tuple[Sequence[BacktestCase], Sequence["Cut"]]]


@dataclass(frozen=True)
class Rule:
    """One setting of every rule the forecast rests on."""

    gain: float
    margin: float
    gate: float
    inflation: float = forecast.INTERVAL_INFLATION
    unknown_inflation: float = forecast.UNKNOWN_PLAN_INFLATION
    error_scale: float = forecast.ERROR_PRIOR_SCALE
    error_weight: float = forecast.ERROR_PRIOR_WEIGHT
    # The uncertainty rules (see Replay.unsorted): the share of draws from the plausible
    # plans, the t's degrees of freedom (0: the forecast's, prior weight + inner forecasts),
    # the laws' evidence weighting (0: the hard pick) and the point's share from the
    # plausible plans, for a plan inferred and for one of unknown shape (0: the central's).
    plan_share: float = plan_spread.PLAN_SHARE
    dof: float = forecast.ERROR_DOF
    mix: float = 0.0
    point_inferred: float = plan_spread.INFERRED_POINT_SHARE
    point_unknown: float = plan_spread.UNKNOWN_SHAPE_POINT_SHARE
    loss_horizon: float = forecast.LOSS_HORIZON_SHARE  # the interval's share of the loss horizon
    compared: float = forecast.COMPARED_SHARE  # auto compares the laws on inner cuts that shed this share of the log's

    def __str__(self) -> str:
        return (f"gain {self.gain:g}, margin {self.margin:g}, gate {self.gate:g}, compared past {self.compared:g}, inflation {self.inflation:g} / unknown plan {self.unknown_inflation:g}, "
                f"error prior {self.error_scale:g} x {self.error_weight:g}, plan share {self.plan_share:g}, "
                f"dof {self.dof:g}, loss horizon {self.loss_horizon:g}, law mix {self.mix:g}, point from the plans {self.point_inferred:g} inferred / {self.point_unknown:g} unknown shape")


# Today's rules (the forecast's and plan_spread's defaults, the gain prior's default).
TODAY = Rule(ANNEAL_GAIN, forecast.SELECTION_MARGIN, forecast.MIN_SEEN_DECAY)
# The rules before the interval drew over the plausible plans (the rules of that forecast).
BEFORE = Rule(0.05, 0.01, 0.25, 0.8, 1.0, 0.3, 1.0, plan_share=0.0, dof=0.0, mix=0.0, point_inferred=0.0, point_unknown=0.0, loss_horizon=0.0,
              compared=0.0)


def family_of(name: str, rule: str = DEFAULT_FAMILY_RULE) -> str:
    """The family a run belongs to: the first group of ``rule`` searched in its name.

    Raises
    ------
    ConfigError
        The rule is not a pattern with a group, or it does not match the name.
    """
    try:
        pattern = re.compile(rule)
    except re.error as exc:
        raise ConfigError(f"family rule {rule!r} is not a regular expression ({exc})") from None
    if pattern.groups < 1:
        raise ConfigError(f"family rule {rule!r} needs a group, such as ^([^-]+), whose match names the family")
    found = pattern.search(name)
    if found is None or not found.group(1):
        raise ConfigError(f"family rule {rule!r} finds no family in the run name {name!r}")
    return found.group(1)


@dataclass(frozen=True)
class Cut:
    """One cut of one run: what auto's gate and the inflation need besides the cases."""

    run: str
    family: str
    fraction: float
    seen_decay: float  # share of the peak lr shed by the cut
    observed: float  # tokens at the cut
    plan: str = "log"


def run_cases(
    history: History, family: str, config: AnalysisConfig, plan: str, gain: float, given: LrSchedule | None = None
) -> tuple[list[BacktestCase], list[Cut]]:
    """One run's cases under one plan and gain prior, and its cuts.

    ``given`` is the run's planned lr where the run logs none (``plan`` ``log`` only): the
    forecast gets it as the planned schedule, and the gate reads the decay it has shed by
    the cut from it, as the forecast's own gate does.
    """
    schedule = given if plan == "log" else None
    settings = replace(config, targets=(1.0,), anneal_gain=gain, lr_schedule=schedule or config.lr_schedule)
    cases = backtest_run(history, settings, fit_fractions=FRACTIONS, target_quantiles=QUANTILES, models=LAWS,
                         plan=plan, beyond=True)
    cuts = []
    for f in FRACTIONS:
        rows = int(np.searchsorted(history.tokens, f * history.last_tokens, side="right"))
        lr = history.lr[:rows] if history.lr is not None else None
        if lr is None and schedule is not None:
            lr = schedule.at(history.step[:rows])
        cuts.append(Cut(history.run, family, f, _seen_decay(lr), float(history.tokens[max(rows - 1, 0)]), plan))
    return cases, cuts


def _seen_decay(lr: np.ndarray | None) -> float:
    if lr is None or not np.isfinite(lr).any() or np.nanmax(lr) <= 0:
        return 0.0
    peak = float(np.nanmax(lr))
    return (peak - float(np.nanmin(lr[int(np.nanargmax(lr)):]))) / peak


@dataclass(frozen=True)
class Scored:
    """One replayed auto forecast: the case of the law the rule chose, its family and cut."""

    case: BacktestCase
    family: str
    tokens: float | None
    draws: np.ndarray
    sparse: bool
    p_reach: float | None

    @property
    def error(self) -> float | None:
        """ln(predicted / true tokens) for a target the run reached; +inf where the forecast
        said it never would (a miss, counted, not dropped); None where the cut gave no
        forecast at all (its fit failed), which the figures count apart."""
        if not self.case.reached_in_run or self.case.status == Status.NOT_ENOUGH_DATA:
            return None
        if self.tokens is None:
            return math.inf
        return math.log(self.tokens / self.case.true_tokens)

    def covered(self, level: float) -> bool | None:
        """Whether the ``level`` interval holds the truth; a forecast of never holds nothing."""
        if not self.case.reached_in_run or self.case.status == Status.NOT_ENOUGH_DATA:
            return None
        if self.tokens is None or not len(self.draws):
            return False
        top = len(self.draws) - 1
        low, high = self.draws[math.floor((1 - level) / 2 * top)], self.draws[math.ceil((1 + level) / 2 * top)]
        return bool(low <= self.case.true_tokens <= high)


class Replay:
    """``auto`` under any rule, from the per-law cases of every gain and plan.

    ``results`` maps ``(plan, gain)`` to the cases and cuts of every run.
    """

    def __init__(self, results: Results) -> None:
        self.cases: dict[tuple[str, float], dict[tuple[str, float, float, str], BacktestCase]] = {}
        self.cuts: dict[tuple[str, str, float], Cut] = {}
        for (plan, gain), (cases, cuts) in results.items():
            self.cases[(plan, gain)] = {(c.run, c.fit_fraction, c.target_quantile, c.model): c for c in cases}
            for cut in cuts:
                self.cuts[(plan, cut.run, cut.fraction)] = cut
        self.keys = sorted({k[:3] for k in next(iter(self.cases.values()))}) if self.cases else []
        self.families = sorted({c.family for c in self.cuts.values()})

    def runs(self, family: str) -> int:
        return len({c.run for c in self.cuts.values() if c.family == family})

    def scored(self, rule: Rule, plan: str, families: Iterable[str]) -> list[Scored]:
        wanted = set(families)
        table = self.cases[(plan, rule.gain)]
        out = []
        for run, f, q in self.keys:
            cut = self.cuts[(plan, run, f)]
            if cut.family not in wanted:
                continue
            la, mp = table[(run, f, q, LAWS[0])], table[(run, f, q, LAWS[1])]
            chosen = _auto(la, mp, cut, rule)
            tokens = plan_point(chosen, rule)
            draws = self.draws(chosen, rule, cut.observed, tokens)
            if rule.mix > 0 and cut.seen_decay >= rule.gate:
                chosen, tokens, draws = mixed(la, mp, rule, partial(self._draws_at, rule=rule, observed=cut.observed))
            p_reach = chosen.p_reach
            if chosen.plan_end_tokens is not None and len(draws):
                p_reach = replay_reach(chosen, rule, self.unsorted(chosen, rule, cut.observed, tokens))
            out.append(Scored(chosen, cut.family, tokens, draws, chosen.rows <= SPARSE_ROWS, p_reach))
        return out

    def errors(self, rule: Rule, plan: str, families: Iterable[str]) -> list[tuple[str, float, float, float | None]]:
        """``(family, fit fraction, target quantile, error)`` of each case :meth:`scored`
        gives, without the interval draws the point loss does not read."""
        if rule.mix > 0:
            return [(s.family, s.case.fit_fraction, s.case.target_quantile, s.error) for s in self.scored(rule, plan, families)]
        wanted = set(families)
        table = self.cases[(plan, rule.gain)]
        out = []
        for run, f, q in self.keys:
            cut = self.cuts[(plan, run, f)]
            if cut.family in wanted:
                chosen = _auto(table[(run, f, q, LAWS[0])], table[(run, f, q, LAWS[1])], cut, rule)
                out.append((cut.family, f, q, Scored(chosen, cut.family, plan_point(chosen, rule), np.array([]), False, None).error))
        return out

    @staticmethod
    def _draws_at(case: BacktestCase, tokens: float | None, *, rule: Rule, observed: float) -> np.ndarray:
        return Replay.draws(case, rule, observed, tokens)

    @staticmethod
    def draws(case: BacktestCase, rule: Rule, observed: float, tokens: float | None) -> np.ndarray:
        """The case's interval draws under another error prior and inflation, as the forecast
        makes them (forecast_targets): each raw crossing's log horizon stretched by a t draw."""
        return np.sort(Replay.unsorted(case, rule, observed, tokens))

    @staticmethod
    def unsorted(case: BacktestCase, rule: Rule, observed: float, tokens: float | None) -> np.ndarray:
        """The draws of :meth:`draws` in the order of :func:`replay_raw`'s crossings."""
        raw = replay_raw(case, rule)
        if case.error_scale is None or not len(raw):
            return np.array(case.draws, float)
        prior_scale, prior_weight = case.error_prior
        n = case.error_count - prior_weight
        squares = max(case.error_scale**2 * case.error_count - prior_weight * prior_scale**2, 0.0)
        weight = rule.error_weight
        scale = math.sqrt((weight * rule.error_scale**2 + squares) / (weight + n))
        # Keyed on the run's last name part: a CSV's run is its path, and the figures must
        # not depend on where the runs are checked out.
        seed = zlib.crc32(f"{case.run.rsplit('/', 1)[-1]}|{case.fit_fraction}|{case.target_quantile}|{case.model}".encode())
        shifts = np.random.default_rng(seed).standard_t(rule.dof or weight + n, len(raw))
        draws = forecast.stretched(raw, shifts, scale, observed, math.inf, replay_loss_horizons(case, rule), rule.loss_horizon)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inflation = rule.unknown_inflation if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES else rule.inflation
            if inflation != 1.0 and tokens is not None:
                moved = tokens * np.exp(inflation * np.log(draws / tokens))
                draws = np.where(np.isfinite(draws), np.maximum(moved, observed), draws)
        return draws


def _auto(la: BacktestCase, mp: BacktestCase, cut: Cut, rule: Rule) -> BacktestCase:
    """The law auto chooses under ``rule``, as choose_law does: the multi-power law once the
    log has shed enough of the peak lr, unless the lr-annealing law forecast the log's end
    better by the margin, over the inner cuts whose log had shed the rule's share of the
    log's decay."""
    if cut.seen_decay < rule.gate:
        return la
    floor = rule.compared * cut.seen_decay
    la_score, mp_score = (forecast.selection_score(c.inner, floor) if c.inner else c.score for c in (la, mp))
    if la_score is not None and mp_score is not None and la_score < mp_score - rule.margin:
        return la
    return mp


# --- the uncertainty rules: plausible plans, the t's tails, the laws' mixture -------------


def replay_raw(case: BacktestCase, rule: Rule) -> np.ndarray:
    """The raw crossings a case's interval is read from under ``rule``: with an inferred or
    assumed plan, ``rule.plan_share`` of them from the plausible plans (plan_spread.pooled)."""
    raw = np.array(case.raw_draws, float)
    if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES and case.plan_draws:
        return plan_spread.pooled(raw, np.array(case.plan_draws, float), rule.plan_share)
    return raw


def replay_loss_horizons(case: BacktestCase, rule: Rule) -> np.ndarray:
    """The loss horizons of :func:`replay_raw`'s crossings (0 for the plausible plans', as
    the forecast takes them)."""
    horizons = np.array(case.loss_horizons, float)
    if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES and case.plan_draws:
        return plan_spread.pooled(horizons, np.zeros(len(case.plan_draws)), rule.plan_share)
    return horizons


def plan_point(case: BacktestCase, rule: Rule) -> float | None:
    """The case's point forecast; with an unknown plan and a point share above 0 (the
    rule's for the case's plan source), the median of the raw crossings with that share of
    them from the plausible plans (plan_spread.point_share)."""
    # Read from the draws, not from whether the case's own point (under the defaults it was
    # computed with) found a crossing: a point over the plans past every plan's reach can
    # hide a central crossing, and the reverse.
    central = case.tokens if case.forecast else None
    if case.central_tokens is not None:  # the case's own point is over the plausible plans
        central = case.central_tokens if math.isfinite(case.central_tokens) else None
    share = plan_spread.point_share(case.plan_source, rule.point_inferred, rule.point_unknown)
    if share <= 0 or case.plan_source not in forecast.UNKNOWN_PLAN_SOURCES or not case.plan_draws or not case.raw_draws:
        return central
    # As plan_spread.over_plans: a median past every plan's reach is no crossing.
    point = plan_spread.pooled_median(np.array(case.raw_draws, float), np.array(case.plan_draws, float), share)
    return point if math.isfinite(point) else None


def replay_reach(case: BacktestCase, rule: Rule, draws: np.ndarray) -> float:
    """p_reach_within_plan from unsorted replayed draws: each within the end of the plan it
    was drawn on (the central plan's, or a plausible plan's), as plan_spread.over_plans does."""
    ends = np.full(len(case.raw_draws), case.plan_end_tokens)
    if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES and case.plan_draws and len(case.plan_ends) == len(case.plan_draws):
        ends = plan_spread.pooled(ends, np.array(case.plan_ends, float), rule.plan_share)
    if len(ends) != len(draws):  # draws read from the case itself
        ends = np.full(len(draws), case.plan_end_tokens)
    return float(np.mean(draws <= ends))


DrawsOf = Callable[[BacktestCase, "float | None"], np.ndarray]


def mixed(la: BacktestCase, mp: BacktestCase, rule: Rule, draws_of: DrawsOf) -> tuple[BacktestCase, float | None, np.ndarray]:
    """The laws' evidence-weighted mixture: weights exp(-score^2 / (2 mix^2)) from each law's
    own inner-cut score; the point is the weighted mean of ln(tokens), the draws are pooled
    in proportion (each law's draws thinned evenly). The case returned is the heavier law's."""
    scores = [c.score for c in (la, mp)]
    if any(s is None for s in scores) or not (la.forecast and mp.forecast) or la.tokens is None or mp.tokens is None:
        chosen = mp if mp.forecast else la
        point = chosen.tokens if chosen.forecast else None
        return chosen, point, draws_of(chosen, point)
    w = np.exp(-np.square(np.array(scores, float)) / (2 * rule.mix**2))
    w = w / w.sum() if w.sum() > 0 else np.array([0.5, 0.5])
    tokens = float(np.exp(w[0] * math.log(la.tokens) + w[1] * math.log(mp.tokens)))
    a, b = draws_of(la, tokens), draws_of(mp, tokens)
    n = min(len(a), len(b))
    k = int(round(w[0] * n))
    parts = [a[np.linspace(0, len(a) - 1, k).round().astype(np.int64)] if k else a[:0],
             b[np.linspace(0, len(b) - 1, n - k).round().astype(np.int64)] if n - k else b[:0]]
    return (la if w[0] >= 0.5 else mp), tokens, np.sort(np.concatenate(parts))


def in_setting(scored: Sequence[Scored], f: float, q: float) -> list[Scored]:
    return [s for s in scored if (s.case.fit_fraction, s.case.target_quantile) == (f, q)]


def point_loss(replay: Replay, rule: Rule, families: Sequence[str]) -> float:
    """Mean over families, plans and settings of the mean of the median and the p90 |ln|
    (:data:`POINT_PERCENTILES`): every family weighs the same, and a rule is held to its
    tail as well as its middle."""
    values = []
    for plan in PLANS:
        found = replay.errors(rule, plan, families)
        for fam in families:
            for f, q in SETTINGS:
                errors = [min(abs(e), MISS_SCORE) for g, a, b, e in found if (g, a, b) == (fam, f, q) and e is not None]
                if errors:
                    values.append(float(np.mean(np.percentile(errors, POINT_PERCENTILES))))
    return float(np.mean(values)) if values else math.inf


def calibration_loss(replay: Replay, rule: Rule, families: Sequence[str]) -> float:
    """Mean over plans, settings and two groups of cuts of the squared misses of the
    50/80/95% coverages, the families' cases pooled in each (coverage is a property of the
    pooled forecasts: a family of two runs has no coverage of its own worth squaring), a
    shortfall weighing :data:`UNDER_COVERAGE_WEIGHT` times an excess.

    The groups are the cuts with no inner forecast of their own and the rest: the first
    have their interval from the error prior's scale alone, which the rest barely use, and
    pooled with them (18 of about 200 cases) the prior was chosen where it does not act
    (their 80% intervals held 61%)."""
    values = []
    for plan in PLANS:
        scored = replay.scored(rule, plan, families)
        for f, q in SETTINGS:
            group = in_setting(scored, f, q)
            for part in ([s for s in group if _no_track_record(s)], [s for s in group if not _no_track_record(s)]):
                values += coverage_misses(part)
    return float(np.mean(values)) if values else math.inf


def coverage_misses(part: Sequence[Scored]) -> list[float]:
    """The squared misses of the 50/80/95% coverages of pooled cases (none for a level no
    case speaks to), a shortfall weighing :data:`UNDER_COVERAGE_WEIGHT` times an excess."""
    values = []
    for level in LEVELS:
        held = [c for s in part if (c := s.covered(level)) is not None]
        if held:
            miss = float(np.mean(held)) - level
            values.append(miss**2 * (UNDER_COVERAGE_WEIGHT if miss < 0 else 1.0))
    return values


def _no_track_record(scored: Scored) -> bool:
    """Whether the cut's forecast had no inner forecast: its error scale is the prior's."""
    return scored.case.error_count - scored.case.error_prior[1] < 1


def choose(replay: Replay, families: Sequence[str], mixes: Sequence[float] = MIXES) -> Rule:
    """The rule ``families`` pick: the point rules first (gain, margin, gate, the inner cuts
    compared and the point's shares from the plausible plans jointly, a tie keeping today's), then the laws' mixture (of
    ``mixes``) by the point loss, then the interval rules by the calibration loss (rounds
    of :func:`_interval_round` until one changes nothing)."""
    # The point rules jointly (the point over the plausible plans moves which gain fits),
    # so what is chosen does not depend on today's defaults but for exact ties.
    candidates = itertools.product(GAINS, MARGINS, GATES, POINT_SHARES, POINT_SHARES, COMPARED_SHARES)
    best = min((Rule(g, m, gate, point_inferred=a, point_unknown=b, compared=c) for g, m, gate, a, b, c in candidates),
               key=lambda r: (round(point_loss(replay, r, families), 6), _point_rules(r) != _point_rules(TODAY)))
    best = choose_mix(replay, best, families, mixes)
    # The interval rules by coordinate descent from a fixed start (the t's counted dof, half
    # the draws from the plausible plans, the horizon alone), not from today's defaults, which would otherwise
    # steer it; repeated until a round changes nothing.
    rule = replace(best, dof=0.0, plan_share=0.5, loss_horizon=0.0)
    for _ in range(_DESCENT_ROUNDS):
        before = rule
        rule = _interval_round(replay, rule, families)
        if rule == before:
            break
    return rule


def _interval_round(replay: Replay, rule: Rule, families: Sequence[str]) -> Rule:
    """One round over the interval rules: inflation and error prior jointly, the t's degrees
    of freedom, the plausible plans' share, then the inflation apart for a plan given and
    one inferred or assumed."""
    def loss(r: Rule) -> float:
        return calibration_loss(replay, r, families)

    rule = min((replace(rule, inflation=k, unknown_inflation=k, error_scale=s0, error_weight=w)
                for k, s0, w in itertools.product(INFLATIONS, ERROR_SCALES, ERROR_WEIGHTS)), key=loss)
    rule = min((replace(rule, dof=d) for d in DOFS), key=loss)
    rule = min((replace(rule, loss_horizon=h) for h in LOSS_HORIZON_SHARES), key=loss)
    rule = min((replace(rule, plan_share=p) for p in PLAN_SHARES), key=loss)
    rule = min((replace(rule, inflation=k) for k in INFLATIONS), key=loss)
    return min((replace(rule, unknown_inflation=k) for k in INFLATIONS), key=loss)


def _point_rules(rule: Rule) -> tuple[float, ...]:
    return rule.gain, rule.margin, rule.gate, rule.point_inferred, rule.point_unknown, rule.compared


def choose_mix(replay: Replay, rule: Rule, families: Sequence[str], mixes: Sequence[float] = MIXES) -> Rule:
    """The laws' mixture (0: the hard pick) by the point loss, a tie keeping the hard pick."""
    return min((replace(rule, mix=m) for m in mixes), key=lambda r: (round(point_loss(replay, r, families), 6), r.mix))


def lofo(replay: Replay, plan: str, rules: Mapping[str, Rule]) -> list[Scored]:
    """Each family scored with its own rule (``rules`` maps family to rule)."""
    return [s for held, rule in rules.items() for s in replay.scored(rule, plan, [held])]


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


def cross_family(results: Results, held_out_results: Results | None = None, mixes: Sequence[float] = MIXES) -> CrossFamily:
    """Each family's rule chosen on the others, and the rule of all (see the module's docstring).

    ``held_out_results`` are runs of other families, scored with the rule of all only;
    ``mixes`` are the candidate widths of the laws' mixture (0: auto's hard pick).

    Raises
    ------
    ConfigError
        Fewer than two families: none would be left to choose a rule on.
    """
    replay = Replay(results)
    if len(replay.families) < 2:
        found = ", ".join(replay.families) or "none"
        raise ConfigError(f"a cross-family backtest needs runs of at least two families; found {found}")
    rules = tuple((held, choose(replay, [f for f in replay.families if f != held], mixes)) for held in replay.families)
    on_all = choose(replay, replay.families, mixes)
    other = Replay(held_out_results) if held_out_results else None
    return CrossFamily(replay, rules, on_all, other)


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
