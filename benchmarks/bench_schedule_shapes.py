"""Forecasts on synthetic runs of the multi-power law, schedule shape by schedule shape.

    python benchmarks/bench_schedule_shapes.py [--quick] [--workers 2] [--seeds 3] [--noise 0.01] [--loss-horizon-share S]

Each run follows the multi-power law of Luo et al. (2025) (the form of
``core/models/multipower.py``) with known parameters, plus white noise of ``--noise``:

    L(t) = L0 + A * (S1(t) / S_REF) ** -alpha - B * sum_k (lr_(k-1) - lr_k) * G(lr_k ** -gamma * S_k(t))
    G(x) = 1 - (C x + 1) ** -beta

``lr`` is the planned lr over its peak, ``S1`` the lr summed from step 0 and ``S_k`` from step
``k``, both in peak-lr steps (``tracker_plugin.testing.synthetic.multi_power_run``; two sets of
parameters, ``--quick`` the first only). The shapes: cosine to 0, cosine to 10%, linear to 0, WSD with
10% and 50% linear cooldowns, and two-stage (constant, a drop to half the peak at 40%, held,
then a linear cooldown over the last 20%); every one warms up over the first 2% of steps.
Runs of 2000 and 4000 steps (``--quick``: 2000), so the cooldown's length differs against the
law's annealing time ``1 / C``: a decay barely begun at the cut is a smaller share of it in
the shorter runs.

Each run is cut at 10%, 25% and 50% of its tokens and forecast with its whole planned lr given
(an ``LrSchedule`` of the plan, as ``--lr-schedule`` gives it), by the backtest's protocol
(``core/backtest.py``): the targets are the smoothed loss at 60%, 80% and 95% of the plan,
which the run reaches within its plan, and one target below the run's final loss, which it
does not (for the Brier score). Printed per shape and cut, and over the set: the statuses
of the reachable targets (how many ``unreachable`` or ``not_reached``), the median
``|ln(forecast / true tokens)|``, the share of 80% intervals holding the truth, and the
mean ``p_reach_within_plan`` and its Brier score over all four targets, each beside the
issue's target figure.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from harness import parser as options

from tracker_plugin.core import analysis_forecasts, forecast, law_selection
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import BacktestCase, backtest_run
from tracker_plugin.core.cross_family import reliability
from tracker_plugin.core.models import GainPrior
from tracker_plugin.core.status import Status
from tracker_plugin.frame.history import build_history
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.report.cross_family import reliability_text
from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run

CUTS = (0.1, 0.25, 0.5)
QUANTILES = (0.6, 0.8, 0.95)
BATCH = 262_144.0
LOG_EVERY = 10
# The target figures.
GOAL_MEDIAN_AT_25 = 0.05
GOAL_COVERAGE = (0.7, 0.9)


LAWS = {"base": MultiPowerLaw(),
        "steep": MultiPowerLaw(a=1.2, alpha=0.6, b=0.4, c=0.004, beta=0.8, gamma=0.3)}


def shapes(steps: int) -> dict[str, LrSchedule]:
    """The planned lr of each shape, ``steps`` steps long."""
    warmup = max(1, round(0.02 * steps))
    spec = {
        "cosine-0": f"cosine:warmup={warmup},total={steps}",
        "cosine-10%": f"cosine:warmup={warmup},total={steps},final=0.1",
        "linear-0": f"linear:warmup={warmup},total={steps}",
        "wsd-10%": f"wsd:warmup={warmup},total={steps},decay=0.1",
        "wsd-50%": f"wsd:warmup={warmup},total={steps},decay=0.5",
    }
    out = {name: LrSchedule.parse_spec(s) for name, s in spec.items()}
    knots = [0, warmup, 0.4 * steps, 0.4 * steps + 1, 0.8 * steps, steps]
    out["two-stage"] = LrSchedule.from_table(knots, [0.0, 1.0, 1.0, 0.5, 0.5, 0.0], source="spec", name="two-stage")
    return out


@dataclass(frozen=True)
class Job:
    shape: str
    law: str
    seed: int
    steps: int
    noise: float
    gain: float | None = None
    model: str = "auto"
    loss_horizon_share: float | None = None
    error_prior: tuple[float, float] | None = None  # (scale, weight)
    gain_sd: float | None = None


def run_job(job: Job) -> list[BacktestCase]:
    if job.loss_horizon_share is not None:  # a worker process of this benchmark: its own copy of the module
        forecast.LOSS_HORIZON_SHARE = job.loss_horizon_share
    if job.error_prior is not None:
        law_selection.ERROR_PRIOR_SCALE, law_selection.ERROR_PRIOR_WEIGHT = job.error_prior
    if job.gain_sd is not None:  # the analysis builds its GainPrior with the default spread
        analysis_forecasts.GainPrior = functools.partial(GainPrior, sd=job.gain_sd)
    plan = shapes(job.steps)[job.shape]
    frame = multi_power_run(plan, job.steps, LAWS[job.law], batch=BATCH, noise=job.noise, log_every=LOG_EVERY,
                            seed=job.seed)
    history = build_history(frame, run=f"{job.shape}-{job.law}-{job.steps}-{job.seed}")
    # The EMA over 2% of the run, as a real run's window is a small share of it.
    config = AnalysisConfig(targets=(1.0,), lr_schedule=plan, ema_token_window=0.02 * job.steps * BATCH)
    if job.gain is not None:
        config = replace(config, anneal_gain=job.gain)
    return backtest_run(history, config, fit_fractions=CUTS, target_quantiles=QUANTILES, models=(job.model,),
                        plan="infer", beyond=True)


def brier(cases: Sequence[BacktestCase]) -> tuple[float | None, float | None, int]:
    """Mean p_reach and its Brier score over the cases that have one, and their count."""
    scored = [(c.p_reach, 1.0 if c.reached_in_run else 0.0) for c in cases if c.p_reach is not None]
    if not scored:
        return None, None, 0
    p, y = np.array(scored).T
    return float(p.mean()), float(np.mean((p - y) ** 2)), len(scored)


def figures(cases: Sequence[BacktestCase]) -> dict[str, object]:
    reachable = [c for c in cases if c.reached_in_run]
    errors = np.abs([c.error for c in reachable if c.error is not None])
    covered = [c.covered_at(0.8) for c in reachable if c.covered_at(0.8) is not None]
    statuses = Counter(c.status for c in reachable)
    p_mean, score, _ = brier(cases)
    return {
        "n": len(reachable),
        "unreach": statuses[Status.UNREACHABLE],
        "not_reached": statuses[Status.NOT_REACHED],
        "no_fc": len(reachable) - len(errors),
        "median": float(np.median(errors)) if len(errors) else math.nan,
        "coverage": float(np.mean(covered)) if covered else math.nan,
        "p_reach_true": float(np.mean([c.p_reach for c in reachable if c.p_reach is not None] or [math.nan])),
        "p_reach_beyond": float(np.mean([c.p_reach for c in cases if not c.reached_in_run and c.p_reach is not None]
                                        or [math.nan])),
        "brier": math.nan if score is None else score,
        "p_mean": math.nan if p_mean is None else p_mean,
    }


HEADER = f"{'shape':<11} {'cut':>4} {'n':>3} {'unreach':>7} {'not_rch':>7} {'no_fc':>5} {'med|ln|':>8} {'cov80':>6} " \
         f"{'P|reach':>7} {'P|beyond':>8} {'Brier':>6}"


def row(label: str, cut: str, f: dict[str, object]) -> str:
    return (f"{label:<11} {cut:>4} {f['n']:>3} {f['unreach']:>7} {f['not_reached']:>7} {f['no_fc']:>5} "
            f"{f['median']:>8.3f} {f['coverage']:>6.2f} {f['p_reach_true']:>7.2f} {f['p_reach_beyond']:>8.2f} "
            f"{f['brier']:>6.3f}")


def main() -> None:
    parser = options(__doc__, quick="one law, one seed, shorter runs", workers=2)
    parser.add_argument("--seeds", type=int, default=3, help="noise draws per shape and law (default 3)")
    parser.add_argument("--noise", type=float, default=0.01, help="standard deviation of the loss noise")
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="run lengths in steps (default 2000 4000, --quick 2000)")
    parser.add_argument("--anneal-gain", type=float, default=None, help="the gain prior's share (default: the library's)")
    parser.add_argument("--model", default="auto", help="the law to forecast with (default auto)")
    parser.add_argument("--loss-horizon-share", type=float, default=None,
                        help="the interval's share of the loss horizon (default: the library's LOSS_HORIZON_SHARE)")
    parser.add_argument("--error-prior", type=float, nargs=2, metavar=("SCALE", "WEIGHT"), default=None,
                        help="the track record's prior error per unit of log horizon and its weight in forecasts "
                             "(default: the library's ERROR_PRIOR_SCALE and ERROR_PRIOR_WEIGHT)")
    parser.add_argument("--gain-sd", type=float, default=None,
                        help="the gain prior's spread, relative to its mean (default: GainPrior's 0.5)")
    args = parser.parse_args()
    lengths = args.steps or ([2000] if args.quick else [2000, 4000])
    laws = ("base",) if args.quick else tuple(LAWS)
    seeds = range(1 if args.quick else args.seeds)
    names = list(shapes(lengths[0]))
    jobs = [Job(s, law, seed, n, args.noise, args.anneal_gain, args.model, args.loss_horizon_share,
            None if args.error_prior is None else tuple(args.error_prior), args.gain_sd) for n in lengths for s in names for law in laws for seed in seeds]
    began = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(run_job, jobs))
    cases = [c for r in results for c in r]
    print(f"{len(jobs)} runs ({'/'.join(map(str, lengths))} steps, logged every {LOG_EVERY}, noise {args.noise}, laws {', '.join(laws)}), "
          f"cuts {CUTS}, targets at {QUANTILES} of the plan + one beyond it; {time.perf_counter() - began:.0f}s")
    print("n: reachable targets; unreach/not_rch: their statuses 'unreachable'/'not_reached' (goal 0); "
          "no_fc: without a forecast;\nP|reach, P|beyond: mean p_reach_within_plan of reachable / unreachable targets; "
          "Brier over both.\n")
    print(HEADER)
    for name in names:
        for f in CUTS:
            group = [c for c in cases if c.run.startswith(name + "-") and c.fit_fraction == f]
            print(row(name, f"{f:g}", figures(group)))
    print()
    for f in CUTS:
        print(row("all", f"{f:g}", figures([c for c in cases if c.fit_fraction == f])))
    total = figures(cases)
    print(row("all", "all", total))
    for n in lengths:
        print(row(f"{n} steps", "all", figures([c for c in cases if f"-{n}-" in c.run])))
    at_25 = figures([c for c in cases if c.fit_fraction == 0.25])
    print("\nagainst the issue's targets:")
    print(f"  'unreachable' for a reachable target: {total['unreach']} (goal 0); "
          f"'not_reached': {total['not_reached']} (goal 0)")
    missed = [c for c in cases if c.reached_in_run and c.status in (Status.UNREACHABLE, Status.NOT_REACHED)]
    if missed:
        p_missed = np.array([c.p_reach or 0.0 for c in missed])
        finite = np.array([np.mean(np.isfinite(c.draws)) if c.draws else 0.0 for c in missed])
        print(f"    of those {len(missed)}: P(reach within plan) median {np.median(p_missed):.2f} (0 in {int((p_missed == 0).sum())}, "
              f">= 0.5 in {int((p_missed >= 0.5).sum())}), draws that ever reach the target median {np.median(finite):.2f}")
    print(f"  median |ln| at 25%: {at_25['median']:.3f} (goal <= {GOAL_MEDIAN_AT_25})")
    print(f"  80% coverage over the set: {total['coverage']:.2f} (goal {GOAL_COVERAGE[0]:.2f}-{GOAL_COVERAGE[1]:.2f})")
    print(f"  Brier of p_reach_within_plan: {total['brier']:.3f} (always 0.5: 0.250)")
    table = reliability([(c.p_reach, c.reached_in_run) for c in cases if c.p_reach is not None])
    print("\n".join(reliability_text([("given", table)], "the library's")))


if __name__ == "__main__":
    main()
