"""Leave-one-family-out cross-validation of the forecast's rules, beside today's rules.

    python benchmarks/bench_calibration.py [--runs ../shared/data/runs] [--runs-time ../shared/data/runs-time]
                                           [--workers 2] [--cache /tmp/calibration.pkl]

The forecast rests on rules read off runs: the annealing-gain prior (``anneal_gain``), the
margin by which ``auto`` prefers the multi-power law over the lr-annealing law
(``forecast.SELECTION_MARGIN``), the share of the peak lr a log must have shed before the
multi-power law is a candidate (``forecast.MIN_SEEN_DECAY``) and the interval's inflation
(``forecast.INTERVAL_INFLATION``). Tuned on the runs they are scored on, their figures
flatter them. Here each family of runs is held out in turn:

1. every run is backtested (``tracker_plugin.core.backtest``) with each law (lr-annealing,
   multi-power) and each candidate gain prior, with the plan given (``log``: the finished
   run's logged lr) and inferred (``infer``: only the lr logged up to the cut);
2. ``auto`` with any selection rule is replayed from those cases (the law it would choose
   from each law's own inner-cut score, which every case carries), and any inflation from
   the bootstrap's draws (which every case carries); so are the uncertainty rules
   (``replay_raw``, ``plan_point``, ``mixed``): the share of an inferred or assumed plan's
   draws taken from the plausible plans (``plan_spread.PLAN_SHARE``, from the draws on
   them every such case carries), the point forecast over those plans
   (``plan_spread.PLAN_POINT``), the t's degrees of freedom (``forecast.ERROR_DOF``) and an
   evidence-weighted mixture of the two laws' draws in place of ``auto``'s hard pick
   (``MIXES``; 0 is the hard pick);
3. for each held-out family the rules are chosen on the *other* families alone: gain,
   margin and gate by the mean over families of the median |ln(predicted/true)| (each
   family weighs the same), then the error prior and the inflations by the squared miss
   of the 50/80/95% coverages of the families' cases pooled; the held-out family is
   scored with them;
4. the held-out scores of all families, pooled, are the leave-one-family-out figures.

Families: MPL (``mpl-*``), the OLMo ladder (``olmo-*``), nanoGPT (``nanogpt-*``) and the
modded-nanoGPT speedrun logs (``runs-time/``, read on steps: ``batch_size`` 1 and a
200-step EMA, as the MPL runs are). The speedrun logs log no lr: their plan is the constant
lr assumed (``plan_source`` ``assumed``) with or without ``--plan log``. Cuts whose
forecast saw at most 40 logged rows are reported on their own (sparse logs). The Brier
score of ``p_reach_within_plan`` is over the targets the runs reached and, per cut, one
they did not (see ``backtest_run(beyond=True)``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import pickle
import time
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

# The runs are read and grouped as the forecast benchmark beside this file reads them.
from bench_forecast import family, load  # noqa: E402  (benchmarks/ is on the path when run as a script)

from tracker_plugin.core import forecast, plan_spread
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import BacktestCase, backtest_run
from tracker_plugin.report.tables import text_table

ROOT = Path(__file__).resolve().parents[1]
SHARED = next((p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data" / "runs").is_dir()),
              ROOT.parent / "shared" / "data")
LAWS = ("lr-annealing", "multi-power")
PLANS = ("log", "infer")
FRACTIONS = (0.25, 0.5)
QUANTILES = (0.6, 0.8)
SETTINGS = ((0.5, 0.8), (0.25, 0.6), (0.25, 0.8))
LEVELS = (0.5, 0.8, 0.95)
SPARSE_ROWS = 40
# Candidate rules; today's are marked by TODAY.
GAINS = (0.025, 0.05, 0.1)
MARGINS = (0.0, 0.01, 0.03, 0.1, math.inf)
GATES = (0.1, 0.25, 0.5)
INFLATIONS = (0.8, 1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class Rule:
    gain: float
    margin: float
    gate: float
    inflation: float = forecast.INTERVAL_INFLATION
    unknown_inflation: float = forecast.UNKNOWN_PLAN_INFLATION
    error_scale: float = forecast.ERROR_PRIOR_SCALE
    error_weight: float = forecast.ERROR_PRIOR_WEIGHT
    # The uncertainty rules (see replay_draws): the share of draws from the plausible plans,
    # the t's degrees of freedom (0: the forecast's, prior weight + inner forecasts) and the
    # laws' evidence weighting (0: the hard pick).
    plan_share: float = plan_spread.PLAN_SHARE
    dof: float = forecast.ERROR_DOF
    mix: float = 0.0
    plan_point: bool = plan_spread.PLAN_POINT  # the point: the median over the plausible plans too

    def __str__(self) -> str:
        return (f"gain {self.gain:g}, margin {self.margin:g}, gate {self.gate:g}, inflation {self.inflation:g} / unknown plan {self.unknown_inflation:g}, "
                f"error prior {self.error_scale:g} x {self.error_weight:g}, plan share {self.plan_share:g}, "
                f"dof {self.dof:g}, law mix {self.mix:g}, plan point {self.plan_point}")


TODAY = Rule(0.05, forecast.SELECTION_MARGIN, forecast.MIN_SEEN_DECAY)
# The rules before they were chosen by this benchmark (read off the runs they were scored on).
FORMER = Rule(0.05, 0.01, 0.25, 1.0, 1.0, 0.1, 1.0, 0.0)
# Before the interval drew over the plausible plans (the rules of that forecast).
BEFORE = Rule(0.05, 0.01, 0.25, 0.8, 1.0, 0.3, 1.0, 0.0, plan_point=False)
ERROR_SCALES = (0.05, 0.1, 0.2, 0.3)
ERROR_WEIGHTS = (1.0, 3.0, 10.0)


@dataclass(frozen=True)
class Cut:
    """One cut of one run: what auto's gate and the inflation need besides the cases."""

    run: str
    family: str
    fraction: float
    seen_decay: float  # share of the peak lr shed by the cut
    observed: float  # tokens at the cut


def one_job(job: tuple[str, str, float]) -> tuple[list[BacktestCase], list[Cut]]:
    path, plan, gain = job
    history, window = load(path)
    config = AnalysisConfig(targets=(1.0,), ema_token_window=window, anneal_gain=gain)
    cases = backtest_run(history, config, fit_fractions=FRACTIONS, target_quantiles=QUANTILES, models=LAWS,
                         plan=plan, beyond=True)
    cuts = []
    for f in FRACTIONS:
        rows = int(np.searchsorted(history.tokens, f * history.last_tokens, side="right"))
        lr = None if history.lr is None else history.lr[:rows]
        seen = 0.0
        if lr is not None and np.isfinite(lr).any() and np.nanmax(lr) > 0:
            peak = float(np.nanmax(lr))
            seen = (peak - float(np.nanmin(lr[int(np.nanargmax(lr)):]))) / peak
        cuts.append(Cut(history.run, family(path), f, seen, float(history.tokens[max(rows - 1, 0)])))
    return cases, cuts


def run_all(files: Sequence[str], workers: int) -> dict[tuple[str, float], tuple[list[BacktestCase], list[Cut]]]:
    jobs = [(f, plan, gain) for plan in PLANS for gain in GAINS for f in files]
    # The longest logs first, so the pool does not end waiting on one.
    jobs.sort(key=lambda j: -os.path.getsize(j[0]))
    out: dict[tuple[str, float], tuple[list[BacktestCase], list[Cut]]] = {}
    with ProcessPoolExecutor(workers) as pool:
        for (_path, plan, gain), (cases, cuts) in zip(jobs, pool.map(one_job, jobs)):
            got = out.setdefault((plan, gain), ([], []))
            got[0].extend(cases)
            got[1].extend(cuts)
    return out


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
        if self.tokens is None or not self.case.reached_in_run or not self.case.forecast:
            return None
        return math.log(self.tokens / self.case.true_tokens)

    def covered(self, level: float) -> bool | None:
        if not self.case.reached_in_run or self.tokens is None or not len(self.draws):
            return None
        top = len(self.draws) - 1
        low, high = self.draws[math.floor((1 - level) / 2 * top)], self.draws[math.ceil((1 + level) / 2 * top)]
        return bool(low <= self.case.true_tokens <= high)


class Replay:
    """``auto`` under any rule, from the per-law cases of every gain and plan."""

    def __init__(self, results: dict[tuple[str, float], tuple[list[BacktestCase], list[Cut]]]) -> None:
        self.cases: dict[tuple[str, float], dict[tuple[str, float, float, str], BacktestCase]] = {}
        self.cuts: dict[tuple[str, float], Cut] = {}
        for (plan, gain), (cases, cuts) in results.items():
            self.cases[(plan, gain)] = {(c.run, c.fit_fraction, c.target_quantile, c.model): c for c in cases}
            for cut in cuts:
                self.cuts[(cut.run, cut.fraction)] = cut
        self.keys = sorted({k[:3] for k in next(iter(self.cases.values()))})
        self.families = sorted({c.family for c in self.cuts.values()})

    def scored(self, rule: Rule, plan: str, families: Iterable[str]) -> list[Scored]:
        wanted = set(families)
        table = self.cases[(plan, rule.gain)]
        out = []
        for run, f, q in self.keys:
            cut = self.cuts[(run, f)]
            if cut.family not in wanted:
                continue
            la, mp = table[(run, f, q, LAWS[0])], table[(run, f, q, LAWS[1])]
            # As choose_law: the multi-power law once the log has shed enough of the peak
            # lr, unless the lr-annealing law forecast the log's end better by the margin.
            chosen = la
            if cut.seen_decay >= rule.gate:
                chosen = mp
                if la.score is not None and mp.score is not None and la.score < mp.score - rule.margin:
                    chosen = la
            tokens = plan_point(chosen, rule)
            draws = self.draws(chosen, rule, cut.observed, tokens)
            if rule.mix > 0 and cut.seen_decay >= rule.gate:
                chosen, tokens, draws = mixed(la, mp, rule, lambda c, t, o=cut.observed: self.draws(c, rule, o, t))
            p_reach = chosen.p_reach
            if chosen.plan_end_tokens is not None and len(draws):
                p_reach = replay_reach(chosen, rule, self.unsorted(chosen, rule, cut.observed, tokens))
            out.append(Scored(chosen, cut.family, tokens, draws, chosen.rows <= SPARSE_ROWS, p_reach))
        return out

    @staticmethod
    def draws(case: BacktestCase, rule: Rule, observed: float, tokens: float | None) -> np.ndarray:
        """The case's interval draws under another error prior and inflation, as the forecast
        makes them (forecast_targets): each raw crossing's log horizon stretched by a t draw."""
        return np.sort(Replay.unsorted(case, rule, observed, tokens))

    @staticmethod
    def unsorted(case: BacktestCase, rule: Rule, observed: float, tokens: float | None) -> np.ndarray:
        """The draws of :meth:`draws` in the order of replay_raw's crossings."""
        raw = replay_raw(case, rule)
        if case.error_scale is None or not len(raw):
            return np.array(case.draws, float)
        n = case.error_count - forecast.ERROR_PRIOR_WEIGHT
        squares = max(case.error_scale**2 * case.error_count - forecast.ERROR_PRIOR_WEIGHT * forecast.ERROR_PRIOR_SCALE**2, 0.0)
        weight = rule.error_weight
        scale = math.sqrt((weight * rule.error_scale**2 + squares) / (weight + n))
        seed = zlib.crc32(f"{case.run}|{case.fit_fraction}|{case.target_quantile}|{case.model}".encode())
        shifts = np.random.default_rng(seed).standard_t(rule.dof or weight + n, len(raw))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            horizon = np.log(np.maximum(raw / observed, 1.0))
            stretch = np.exp(np.clip(scale * shifts, -20.0, 5.0))
            draws = observed * np.exp(np.minimum(horizon * stretch, 600.0))
            draws = np.where(np.isfinite(raw), draws, math.inf)
            inflation = rule.unknown_inflation if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES else rule.inflation
            if inflation != 1.0 and tokens is not None:
                moved = tokens * np.exp(inflation * np.log(draws / tokens))
                draws = np.where(np.isfinite(draws), np.maximum(moved, observed), draws)
        return draws


# --- the uncertainty rules: plausible plans, the t's tails, the laws' mixture -------------

PLAN_SHARES = (0.0, 0.5, 1.0)
DOFS = (0.0, 2.0, 3.0, 5.0)
# The laws' mixture is a candidate with --law-mixes (the hard pick alone by default: see main).
MIXES: tuple[float, ...] = (0.0,)


def replay_raw(case: BacktestCase, rule: Rule) -> np.ndarray:
    """The raw crossings a case's interval is read from under ``rule``: with an inferred or
    assumed plan, ``rule.plan_share`` of them from the plausible plans (plan_spread.pooled)."""
    raw = np.array(case.raw_draws, float)
    if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES and case.plan_draws:
        return plan_spread.pooled(raw, np.array(case.plan_draws, float), rule.plan_share)
    return raw


def plan_point(case: BacktestCase, rule: Rule) -> float | None:
    """The case's point forecast; with ``rule.plan_point`` and an unknown plan, the median of
    the raw crossings over the central and the plausible plans alike (plan_spread.pooled at a half)."""
    if not case.forecast:
        return None
    if not rule.plan_point or case.plan_source not in forecast.UNKNOWN_PLAN_SOURCES or not case.plan_draws:
        return case.tokens
    point = float(np.median(plan_spread.pooled(np.array(case.raw_draws, float), np.array(case.plan_draws, float), 0.5)))
    return point if math.isfinite(point) else case.tokens


def replay_reach(case: BacktestCase, rule: Rule, draws: np.ndarray) -> float:
    """p_reach_within_plan from unsorted replayed draws: each within the end of the plan it
    was drawn on (the central plan's, or a plausible plan's), as plan_spread.over_plans does."""
    ends = np.full(len(case.raw_draws), case.plan_end_tokens)
    if case.plan_source in forecast.UNKNOWN_PLAN_SOURCES and case.plan_draws and len(case.plan_ends) == len(case.plan_draws):
        ends = plan_spread.pooled(ends, np.array(case.plan_ends, float), rule.plan_share)
    if len(ends) != len(draws):  # draws read from the case itself
        ends = np.full(len(draws), case.plan_end_tokens)
    return float(np.mean(draws <= ends))


def mixed(la: BacktestCase, mp: BacktestCase, rule: Rule, draws_of) -> tuple[BacktestCase, float | None, np.ndarray]:
    """The laws' evidence-weighted mixture: weights exp(-score^2 / (2 mix^2)) from each law's
    own inner-cut score; the point is the weighted mean of ln(tokens), the draws are pooled
    in proportion (each law's draws thinned evenly). The case returned is the heavier law's."""
    scores = [c.score for c in (la, mp)]
    if any(s is None for s in scores) or not (la.forecast and mp.forecast):
        chosen = mp if mp.forecast else la
        return chosen, chosen.tokens if chosen.forecast else None, draws_of(chosen, chosen.tokens if chosen.forecast else None)
    w = np.exp(-np.square(np.array(scores, float)) / (2 * rule.mix**2))
    w = w / w.sum() if w.sum() > 0 else np.array([0.5, 0.5])
    tokens = float(np.exp(w[0] * math.log(la.tokens) + w[1] * math.log(mp.tokens)))
    a, b = draws_of(la, tokens), draws_of(mp, tokens)
    n = min(len(a), len(b))
    k = int(round(w[0] * n))
    parts = [a[np.linspace(0, len(a) - 1, k).round().astype(np.int64)] if k else a[:0],
             b[np.linspace(0, len(b) - 1, n - k).round().astype(np.int64)] if n - k else b[:0]]
    return (la if w[0] >= 0.5 else mp), tokens, np.sort(np.concatenate(parts))


def in_setting(scored: list[Scored], f: float, q: float) -> list[Scored]:
    return [s for s in scored if (s.case.fit_fraction, s.case.target_quantile) == (f, q)]


def point_loss(replay: Replay, rule: Rule, families: Sequence[str]) -> float:
    """Mean over families, plans and settings of the median |ln|: every family weighs the same."""
    values = []
    for plan in PLANS:
        scored = replay.scored(rule, plan, families)
        for fam in families:
            for f, q in SETTINGS:
                errors = [abs(e) for s in in_setting(scored, f, q) if s.family == fam and (e := s.error) is not None]
                if errors:
                    values.append(float(np.median(errors)))
    return float(np.mean(values)) if values else math.inf


def calibration_loss(replay: Replay, rule: Rule, families: Sequence[str]) -> float:
    """Mean over plans and settings of the squared misses of the 50/80/95% coverages, the
    families' cases pooled: coverage is a property of the pooled forecasts (a family of two
    runs has no coverage of its own worth squaring)."""
    values = []
    for plan in PLANS:
        scored = replay.scored(rule, plan, families)
        for f, q in SETTINGS:
            group = in_setting(scored, f, q)
            for level in LEVELS:
                held = [c for s in group if (c := s.covered(level)) is not None]
                if held:
                    values.append((float(np.mean(held)) - level) ** 2)
    return float(np.mean(values)) if values else math.inf


def choose(replay: Replay, families: Sequence[str]) -> Rule:
    """The rule the training families pick: point rules first, then the inflation."""
    best = min((Rule(g, m, gate) for g, m, gate in itertools.product(GAINS, MARGINS, GATES)),
               key=lambda r: (round(point_loss(replay, r, families), 6), r != Rule(TODAY.gain, TODAY.margin, TODAY.gate)))
    best = choose_mix(replay, best, families)
    best = min((replace(best, plan_point=p) for p in (False, True)),
               key=lambda r: (round(point_loss(replay, r, families), 6), r.plan_point))
    joint = min((replace(best, inflation=k, unknown_inflation=k, error_scale=s0, error_weight=w)
                 for k, s0, w in itertools.product(INFLATIONS, ERROR_SCALES, ERROR_WEIGHTS)),
                key=lambda r: calibration_loss(replay, r, families))
    # Then the t's tails and the plausible plans' share.
    joint = min((replace(joint, dof=d) for d in DOFS), key=lambda r: calibration_loss(replay, r, families))
    joint = min((replace(joint, plan_share=p) for p in PLAN_SHARES), key=lambda r: calibration_loss(replay, r, families))
    # Then the inflation apart for a plan given and one inferred or assumed.
    known = min((replace(joint, inflation=k) for k in INFLATIONS), key=lambda r: calibration_loss(replay, r, families))
    return min((replace(known, unknown_inflation=k) for k in INFLATIONS), key=lambda r: calibration_loss(replay, r, families))


def choose_mix(replay: Replay, rule: Rule, families: Sequence[str]) -> Rule:
    """The laws' mixture (0: the hard pick) by the point loss, a tie keeping the hard pick."""
    return min((replace(rule, mix=m) for m in MIXES), key=lambda r: (round(point_loss(replay, r, families), 6), r.mix))


def lofo(replay: Replay, plan: str, rules: dict[str, Rule]) -> list[Scored]:
    return [s for held, rule in rules.items() for s in replay.scored(rule, plan, [held])]


def figures(scored: list[Scored]) -> dict[str, float | None]:
    errors = np.array([e for s in scored if (e := s.error) is not None])
    out: dict[str, float | None] = {
        "n": float(len([s for s in scored if s.case.reached_in_run])),
        "median": float(np.median(np.abs(errors))) if len(errors) else None,
        "p90": float(np.percentile(np.abs(errors), 90)) if len(errors) else None,
        "signed": float(np.mean(errors)) if len(errors) else None,
    }
    for level in LEVELS:
        held = [c for s in scored if (c := s.covered(level)) is not None]
        out[f"cov{level:.0%}"] = float(np.mean(held)) if held else None
    return out


def brier(scored: list[Scored], f: float) -> tuple[float | None, int]:
    """Brier score of p_reach_within_plan at one cut: the targets reached and the one past the end."""
    pairs = [(s.p_reach, 1.0 if s.case.reached_in_run else 0.0) for s in scored
             if s.case.fit_fraction == f and s.p_reach is not None]
    if not pairs:
        return None, 0
    return float(np.mean([(p - o) ** 2 for p, o in pairs])), len(pairs)


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def show(replay: Replay, rules: dict[str, Rule]) -> None:
    today = dict.fromkeys(replay.families, TODAY)
    former = dict.fromkeys(replay.families, BEFORE)
    header = ("plan", "f", "q", "runs", "rules", "cases", "median", "p90", "signed", "cov50", "cov80", "cov95")
    rows = []
    for plan in PLANS:
        for name, chosen in (("before", former), ("today", today), ("LOFO", rules)):
            scored = lofo(replay, plan, chosen)
            for f, q in SETTINGS:
                for label, group in (("all", [s for s in scored if not s.sparse]), ("sparse", [s for s in scored if s.sparse])):
                    group = in_setting(group, f, q)
                    if not group:
                        continue
                    x = figures(group)
                    rows.append((plan, f"{f:g}", f"{q:g}", label, name, f"{x['n']:.0f}", _fmt(x["median"]), _fmt(x["p90"]),
                                 _fmt(x["signed"], "+.3f"), _fmt(x["cov50%"], ".2f"), _fmt(x["cov80%"], ".2f"),
                                 _fmt(x["cov95%"], ".2f")))
    print("Forecasts of every family (\"all\": cuts with more than 40 logged rows; \"sparse\": at most 40),")
    print("with today's rules and with the rules chosen on the other families (LOFO):\n")
    print("\n".join(text_table(header, rows, align="<" * 5 + ">" * 7)))
    print("\nAll cuts pooled (sparse and not), f=0.5 q=0.8 | f=0.25 q=0.6 | f=0.25 q=0.8: median / p90, cov50 / cov80 / cov95")
    for plan in PLANS:
        for name, chosen in (("before", former), ("today", today), ("LOFO", rules)):
            scored = lofo(replay, plan, chosen)
            parts = []
            for f, q in SETTINGS:
                x = figures(in_setting(scored, f, q))
                parts.append(f"{_fmt(x['median'])} / {_fmt(x['p90'])}, {_fmt(x['cov50%'], '.2f')} / "
                             f"{_fmt(x['cov80%'], '.2f')} / {_fmt(x['cov95%'], '.2f')}")
            print(f"  plan {plan:5} {name:5}  " + " | ".join(parts))
    print("\nMean signed ln(predicted/true) per family at f=0.5 q=0.8 (target within +-0.03), and the Brier score")
    print("of p_reach_within_plan (f=0.5 | f=0.25; cases with a plan end), today -> LOFO:")
    for plan in PLANS:
        now, held = lofo(replay, plan, today), lofo(replay, plan, rules)
        for fam in replay.families:
            a = figures([s for s in in_setting(now, 0.5, 0.8) if s.family == fam])["signed"]
            b = figures([s for s in in_setting(held, 0.5, 0.8) if s.family == fam])["signed"]
            briers = []
            for f in (0.5, 0.25):
                (x, n), (y, _) = brier([s for s in now if s.family == fam], f), brier([s for s in held if s.family == fam], f)
                briers.append(f"{_fmt(x)} -> {_fmt(y)} ({n})")
            print(f"  plan {plan:5} {fam:8} signed {_fmt(a, '+.3f')} -> {_fmt(b, '+.3f')}   Brier " + " | ".join(briers))
        pooled = [f"{_fmt(brier(now, f)[0])} -> {_fmt(brier(held, f)[0])} ({brier(now, f)[1]})" for f in (0.5, 0.25)]
        print(f"  plan {plan:5} {'all':8} Brier {' | '.join(pooled)}")
    print(f"\nformer rules (before the plausible plans): {BEFORE}\ntoday's rules: {TODAY}")
    print("Rules chosen with each family held out:")
    for held, rule in rules.items():
        print(f"  without {held:8} {rule}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=SHARED / "runs")
    parser.add_argument("--runs-time", type=Path, default=SHARED / "runs-time")
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 2, 2))
    parser.add_argument("--cache", type=Path, help="keep the backtest cases here and reuse them (same code only)")
    parser.add_argument("--law-mixes", type=float, nargs="+", default=[0.0],
                        help="candidate widths of the laws' evidence weighting (0: auto's hard pick); with 0.03 0.1 0.3 "
                             "the other families chose a mixture that forecast the held-out OLMo runs later (p90 0.41 "
                             "against 0.31 at f=0.5 q=0.8, plan given)")
    args = parser.parse_args()
    global MIXES
    MIXES = tuple(args.law_mixes)
    files = sorted(str(p) for d in (args.runs, args.runs_time) if d.is_dir()
                   for p in d.glob("*.csv") if not p.name.endswith(".wandb-export.csv"))
    if not files:
        raise SystemExit(f"no runs in {args.runs} or {args.runs_time}")
    start = time.perf_counter()
    if args.cache is not None and args.cache.exists():
        results = pickle.loads(args.cache.read_bytes())
    else:
        results = run_all(files, args.workers)
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps(results))
    replay = Replay(results)
    counts = {fam: len({c.run for c in replay.cuts.values() if c.family == fam}) for fam in replay.families}
    print(f"{len(files)} runs ({', '.join(f'{k} {v}' for k, v in counts.items())}); laws {LAWS} x gains {GAINS} x plans "
          f"{PLANS}, cut at {FRACTIONS}, targets at {QUANTILES} ({time.perf_counter() - start:.0f} s)\n")
    rules = {held: choose(replay, [f for f in replay.families if f != held]) for held in replay.families}
    show(replay, rules)
    print(f"  on all families:  {choose(replay, replay.families)}  (what the forecast's defaults should be)")


if __name__ == "__main__":
    main()
