"""Forecasts calibrated on the run's siblings (the finished runs of its family), measured.

    python benchmarks/bench_siblings.py [--quick] [--cache /tmp/calibration.pkl] [--workers 2]

Reads the backtest cases ``bench_calibration.py`` computes (the same cache), replays
``auto`` under the leave-one-family-out rules (``tracker_plugin.core.cross_family``) and
calibrates each run's forecast on its siblings (``tracker_plugin.core.siblings``): the
other runs of its family, backtested at the same cut (both target quantiles), give a bias
taken off the point and a width the interval is stretched by, each shrunk toward none by
the number of sibling runs.

The protocol, which cannot see the scored run:

- a run is never among its own siblings (checked on every case; the count of breaches is
  printed and must be 0);
- for a held-out family ``F`` everything is chosen without it: the forecast's rules are the
  ones the other families chose (``cross_family``), the other families' runs are scored
  with those same rules and calibrated on their own siblings, and the sibling rules (the
  bias and width weights, the minimum count of sibling runs) are the ones that score best
  on them: the weights by the point loss and the calibration loss of ``cross_family``
  (the bias's weight fixed, or read from the siblings' scatter over one of ``SPREADS``);
- the *temporal* variant gives the speedrun records only the records dated before them
  (their names begin with the date); the other families are sweeps finished together and
  hold no dates, so they keep all their siblings;
- held-out families (GPT-2-medium records, the 2025 GPT-2-small records; ``--held-out``)
  are scored with the rules of all visible families, their siblings the runs of their
  family dated before them (the 2025 records' include the visible records).

Printed: the rules each family got; per plan and setting the figures of today's
leave-one-family-out forecast beside the sibling-calibrated ones (all siblings, temporal);
per family at f=0.5 q=0.8 the signed error, the median |ln| and the 50/80/95% coverages;
the error against the number of siblings (0, 1, 2, 4, all: each run's siblings a seeded
draw of that many); the held-out families.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from bench_calibration import HELD_OUT, members, speedrun_plans
from harness import RUNS, RUNS_TIME, csv_logs, fewer, number
from harness import parser as options

from tracker_plugin.core.backtest import PLANS
from tracker_plugin.core.cross_family import (
    MISS_SCORE,
    POINT_PERCENTILES,
    SETTINGS,
    CrossFamily,
    Replay,
    Rule,
    Scored,
    coverage_misses,
    cross_family,
    figures,
    in_setting,
)
from tracker_plugin.core.siblings import (
    BIAS_WEIGHT,
    CENTER,
    CENTERS,
    MIN_RUNS,
    SPREAD,
    WIDTH_WEIGHT,
    Calibration,
    SiblingCase,
    calibrate,
    sibling_case,
)
from tracker_plugin.jobs.cross_family import cross_family_cases

# Candidate sibling rules: prior weights in sibling runs (inf: that part off) and minimum counts.
WEIGHTS = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
# Prior spreads of a project's bias (ln) for the scatter-weighted shrinkage.
SPREADS = (0.02, 0.05, 0.1, 0.2)
MIN_COUNTS = (1, 2, 3)
# Families whose run names begin with their date: their siblings, temporally, are the earlier ones.
DATED = ("modded", "medium")
COUNTS = (0, 1, 2, 4, None)  # None: all
_SEEDS = 5


@dataclass(frozen=True)
class SiblingRule:
    bias_weight: float = BIAS_WEIGHT
    width_weight: float = WIDTH_WEIGHT
    min_runs: int = MIN_RUNS
    narrow: tuple[str, ...] = ()  # the params a sibling must share with the run, where both have them
    center: str = CENTER
    spread: float | None = SPREAD  # the scatter-weighted bias shrinkage's prior spread (None: fixed weight)

    def __str__(self) -> str:
        weight = f"weight {self.bias_weight:g}" if self.spread is None or math.isinf(self.bias_weight) else f"scatter over {self.spread:g}"
        return (f"bias the {self.center} x {weight}, width weight {self.width_weight:g}, "
                f"at least {self.min_runs} run(s), same {' and '.join(self.narrow) or 'family'}")


# The params the runs carry in their names, as a project's runs log them in their config:
# the model size and the lr schedule's kind.
PARAMS = {"size": re.compile(r"-(\d+M)-"), "schedule": re.compile(r"-(constant|cosine|wsdcon|wsdld|wsd)-")}
NARROWINGS = ((), ("schedule",), ("size",), ("schedule", "size"))


def params(run: str) -> dict[str, str]:
    name = Path(run).stem
    return {key: found.group(1) for key, pattern in PARAMS.items() if (found := pattern.search(name))}


OFF = SiblingRule(math.inf, math.inf, 1)


class Pool:
    """Every scored case of one base rule and plan, and each run's cases as a sibling."""

    def __init__(self, scored: Sequence[Scored]) -> None:
        self.scored = list(scored)
        self.family = {s.case.run: s.family for s in scored}
        self.as_sibling: dict[tuple[str, float], list[SiblingCase]] = {}
        for s in scored:
            e = s.error
            if e is None or not math.isfinite(e) or s.tokens is None:
                continue
            case = sibling_case(s.case.run, s.tokens, s.case.true_tokens, s.draws)
            if case is not None:
                self.as_sibling.setdefault((s.case.run, s.case.fit_fraction), []).append(case)

    def runs(self, family: str) -> list[str]:
        return sorted(r for r, f in self.family.items() if f == family)


def siblings(run: str, pool: Pool, temporal: bool, count: int | None = None, seed: int = 0,
             narrow: Sequence[str] = ()) -> list[str]:
    """The run's siblings: the other runs of its family (dated before it, ``temporal``),
    those sharing the ``narrow`` params with it where both have them (none left: all),
    or a draw of ``count`` of them (seeded on the run, the count and ``seed``)."""
    family = pool.family[run]
    others = [r for r in pool.runs(family) if r != run
              and not (temporal and family in DATED and Path(r).stem.split("-", 1)[1] >= Path(run).stem.split("-", 1)[1])]
    own = params(run)
    alike = [r for r in others if all(params(r).get(k, own.get(k)) == own.get(k) for k in narrow)]
    others = alike or others
    if count is not None and count < len(others):
        rng = np.random.default_rng([zlib.crc32(Path(run).stem.encode()), count, seed])
        others = sorted(rng.choice(others, count, replace=False).tolist())
    return others


BREACHES = [0]  # a scored run found among its own siblings (must stay 0)


def calibrated(pool: Pool, rule: SiblingRule, temporal: bool, families: Sequence[str] | None = None,
               count: int | None = None, seed: int = 0) -> list[Scored]:
    """The pool's cases (of ``families``) with each forecast calibrated on its siblings."""
    out = []
    cache: dict[tuple[str, float], Calibration] = {}
    for s in pool.scored:
        if families is not None and s.family not in families:
            continue
        key = (s.case.run, s.case.fit_fraction)
        if key not in cache:
            names = siblings(s.case.run, pool, temporal, count, seed, rule.narrow)
            BREACHES[0] += s.case.run in names
            cases = [c for r in names for c in pool.as_sibling.get((r, s.case.fit_fraction), [])]
            cache[key] = calibrate(cases, bias_weight=rule.bias_weight, width_weight=rule.width_weight,
                                   min_runs=rule.min_runs, center=rule.center, spread=rule.spread)
        cal = cache[key]
        if cal.active and s.tokens is not None:
            s = replace(s, tokens=cal.point(s.tokens), draws=np.sort(cal.draws(s.draws, s.tokens)))
        out.append(s)
    return out


def point_loss(scored: Sequence[Scored]) -> float:
    """cross_family's point loss over scored cases: mean over families and settings of
    the mean of the median and p90 |ln|."""
    values = []
    for fam in sorted({s.family for s in scored}):
        for f, q in SETTINGS:
            errors = [min(abs(e), MISS_SCORE) for s in in_setting(scored, f, q) if s.family == fam and (e := s.error) is not None]
            if errors:
                values.append(float(np.mean(np.percentile(errors, POINT_PERCENTILES))))
    return float(np.mean(values)) if values else math.inf


def calibration_loss(scored: Sequence[Scored]) -> float:
    """cross_family's coverage misses, pooled per setting (without its split by track record)."""
    values = [m for f, q in SETTINGS for m in coverage_misses(in_setting(scored, f, q))]
    return float(np.mean(values)) if values else math.inf


def choose(pools: Mapping[str, Pool], families: Sequence[str], temporal: bool) -> SiblingRule:
    """The sibling rule ``families`` pick (pools by plan; one rule for every cut): bias
    weight, its center, the minimum count and the narrowing by the point loss, then the
    width weight by the calibration loss; a tie keeps the larger weight (less trust in the
    siblings), the smaller count, the narrower siblings and the default center. (A rule per
    cut, tried, chose less stable rules: p90 0.247 at f=0.5 q=0.8, plan given, against 0.151.)"""
    def over_plans(rule: SiblingRule, loss: Callable[[Sequence[Scored]], float]) -> float:
        return float(np.mean([loss(calibrated(p, rule, temporal, families)) for p in pools.values()]))

    # A fixed bias weight, or the weight the siblings' own scatter gives (one per spread).
    biases = [(w, None) for w in WEIGHTS] + [(1.0, spread) for spread in SPREADS]
    candidates = itertools.product(biases, MIN_COUNTS, NARROWINGS, CENTERS)
    point = min((SiblingRule(b, math.inf, m, n, c, spread) for (b, spread), m, n, c in candidates),
                key=lambda r: (round(over_plans(r, point_loss), 6), -r.bias_weight, r.min_runs, -len(r.narrow),
                               r.center != CENTER))
    return min((replace(point, width_weight=w) for w in WEIGHTS),
               key=lambda r: (round(over_plans(r, calibration_loss), 6), -r.width_weight))


def pools_of(replay: Replay, rule: Rule, extra: Replay | None = None) -> dict[str, Pool]:
    """Per plan, every run scored with ``rule`` (``extra``'s runs too)."""
    out = {}
    for plan in PLANS:
        scored = replay.scored(rule, plan, replay.families)
        if extra is not None:
            scored += extra.scored(rule, plan, extra.families)
        out[plan] = Pool(scored)
    return out


def lofo_pools(result: CrossFamily) -> dict[str, dict[str, Pool]]:
    """Per held-out family, per plan: every visible run scored with the rule chosen without it."""
    return {held: pools_of(result.replay, rule) for held, rule in result.rules}


def _row(label: str, scored: Sequence[Scored]) -> str:
    x = figures(scored)
    return (f"  {label:22s} {_f(x['n'], 4, 0)} {_f(x['median'])} {_f(x['p90'])} {_f(x['signed'], signed=True)} "
            f"{_f(x['cov50%'], 6)} {_f(x['cov80%'], 6)} {_f(x['cov95%'], 6)}")


def _f(value: float | None, width: int = 7, digits: int = 3, signed: bool = False) -> str:
    return number(value, f"{'+' if signed else ''}{width}.{digits}f", width)


HEADER = f"  {'':22s} {'n':>4s} {'median':>7s} {'p90':>7s} {'signed':>7s} {'cov50':>6s} {'cov80':>6s} {'cov95':>6s}"


def report(result: CrossFamily) -> list[str]:
    families = result.families
    pools = lofo_pools(result)
    variants = {"siblings": False, "siblings, temporal": True}
    chosen = {(name, held): choose(pools[held], [f for f in families if f != held], temporal)
              for name, temporal in variants.items() for held in families}
    lines = ["sibling rules chosen without each family (bias and width weights in sibling runs; inf: off):"]
    lines += [f"  {name:18s} without {held:8s} {rules}" for (name, held), rules in chosen.items()]
    # Each family scored: its cases under its LOFO rule, calibrated with its sibling rule.
    scored: dict[tuple[str, str], list[Scored]] = {}
    for plan in PLANS:
        scored[("LOFO (today)", plan)] = [s for held in families for s in pools[held][plan].scored if s.family == held]
        for name, temporal in variants.items():
            scored[(name, plan)] = [s for held in families
                                    for s in calibrated(pools[held][plan], chosen[(name, held)], temporal, [held])]
    for plan in PLANS:
        lines += ["", f"plan {plan}: visible families, each scored with the rules chosen without it", HEADER]
        for f, q in SETTINGS:
            for name in ("LOFO (today)", *variants):
                lines.append(_row(f"f={f:g} q={q:g} {name}", in_setting(scored[(name, plan)], f, q)))
        f, q = SETTINGS[0]
        lines += [f"  per family at f={f:g} q={q:g}:"]
        for fam in families:
            for name in ("LOFO (today)", *variants):
                lines.append(_row(f"{fam} {name}", [s for s in in_setting(scored[(name, plan)], f, q) if s.family == fam]))
    lines += ["", *curve(result, pools, chosen)]
    lines += ["", *held_out(result), "", f"scored runs found among their own siblings: {BREACHES[0]} (must be 0)"]
    return lines


def curve(result: CrossFamily, pools: Mapping[str, Mapping[str, Pool]], chosen: Mapping[tuple[str, str], SiblingRule]) -> list[str]:
    """Error against the number of siblings, per family, plan given, f=0.5 q=0.8."""
    f, q = SETTINGS[0]
    lines = [f"error against the number of siblings (plan log, f={f:g} q={q:g}; a seeded draw of that many, "
             f"{_SEEDS} draws pooled; median |ln| / cov80):",
             "  " + f"{'family':10s}" + "".join(f"{'all' if k is None else k:>16}" for k in COUNTS)]
    for held in result.families:
        pool, rule = pools[held]["log"], chosen[("siblings", held)]
        cells = []
        for k in COUNTS:
            seeds = range(1 if k in (0, None) else _SEEDS)
            group = [x for seed in seeds for x in in_setting(_at_count(pool, rule, held, k, seed), f, q)]
            x = figures(group)
            cells.append(f"{_f(x['median'], 7)} / {_f(x['cov80%'], 5, 2)}")
        lines.append(f"  {held:10s}" + "".join(f"{c:>16s}" for c in cells))
    return lines


def _at_count(pool: Pool, rule: SiblingRule, family: str, k: int | None, seed: int) -> list[Scored]:
    if k == 0:
        return [s for s in pool.scored if s.family == family]
    return calibrated(pool, rule, False, [family], count=k, seed=seed)


def held_out(result: CrossFamily) -> list[str]:
    """The held-out families, scored with the rules of all visible families; their
    siblings the runs of their family dated before them (visible ones included)."""
    if result.held_out is None:
        return ["no held-out runs"]
    pools = pools_of(result.replay, result.on_all, result.held_out)
    rule = choose({p: Pool([s for s in pool.scored if s.family in result.families]) for p, pool in pools.items()},
                  result.families, True)
    held_runs = {c.run for c in result.held_out.cuts.values()}
    lines = [f"held-out runs ({len(held_runs)}), the rules of all visible families; sibling rule chosen on them "
             f"(temporal): {rule}", HEADER]
    for plan in PLANS:
        today = [s for s in pools[plan].scored if s.case.run in held_runs]
        calib = [s for s in calibrated(pools[plan], rule, True) if s.case.run in held_runs]
        for f, q in SETTINGS:
            lines.append(_row(f"{plan} f={f:g} q={q:g} today", in_setting(today, f, q)))
            lines.append(_row(f"{plan} f={f:g} q={q:g} siblings", in_setting(calib, f, q)))
    return lines


def main() -> None:
    parser = options(__doc__, quick="three runs of each family, no held-out runs (a cache made without --quick is "
                     "not reused)", workers=min(os.cpu_count() or 2, 2))
    parser.add_argument("--cache", type=Path, help="bench_calibration.py's cache of the backtest cases (made if missing)")
    parser.add_argument("--held-out", type=Path, action="append", help="a folder of held-out runs (default: bench_calibration's)")
    args = parser.parse_args()
    plans = speedrun_plans()
    visible = csv_logs(RUNS, RUNS_TIME)
    results = cross_family_cases(members(fewer(visible) if args.quick else visible, plans),
                                 processes=args.workers, cache=args.cache)
    held = [] if args.quick and not args.held_out else csv_logs(*(args.held_out or HELD_OUT))
    held_cache = None if args.cache is None else args.cache.with_name(args.cache.name + ".heldout")
    other = cross_family_cases(members(held, plans), processes=args.workers, cache=held_cache) if held else None
    print("\n".join(report(cross_family(results, other))))


if __name__ == "__main__":
    main()
