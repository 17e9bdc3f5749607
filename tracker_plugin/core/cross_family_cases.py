"""The cases of the leave-one-family-out validation, and ``auto`` replayed on them under a rule.

Every run is backtested once per law, gain and plan (:func:`run_cases`); a :class:`Rule`
is then scored without refitting anything: :class:`Replay` reads from each case the law
``auto`` would choose, the interval the rule would draw and the point it would give
(:func:`replay_raw`, :func:`replay_reach`, :func:`plan_point`, :func:`mixed`), and
:func:`lofo` scores each family under the rule chosen without it (see :mod:`.cross_family`).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from tracker_plugin.core import forecast, plan_spread
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import BacktestCase, backtest_run
from tracker_plugin.core.models import ANNEAL_GAIN
from tracker_plugin.core.status import Status
from tracker_plugin.defaults import DEFAULT_FAMILY_RULE
from tracker_plugin.errors import ConfigError
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

__all__ = ["BEFORE", "Cut", "DrawsOf", "FRACTIONS", "LAWS", "LEVELS", "QUANTILES", "Replay", "Results", "Rule", "SETTINGS", "SPARSE_ROWS", "Scored", "TODAY", "family_of", "in_setting", "lofo", "mixed", "plan_point", "replay_loss_horizons", "replay_raw", "replay_reach", "run_cases"]


LAWS = ("lr-annealing", "multi-power")
FRACTIONS = (0.25, 0.5)
QUANTILES = (0.6, 0.8)
# (fit fraction, target quantile) of the figures; the first is the headline setting.
SETTINGS = ((0.5, 0.8), (0.25, 0.6), (0.25, 0.8))
LEVELS = (0.5, 0.8, 0.95)
SPARSE_ROWS = 40


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


def lofo(replay: Replay, plan: str, rules: Mapping[str, Rule]) -> list[Scored]:
    """Each family scored with its own rule (``rules`` maps family to rule)."""
    return [s for held, rule in rules.items() for s in replay.scored(rule, plan, [held])]
