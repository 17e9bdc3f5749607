"""Where each family's mean signed error comes from, run by run, at the headline setting.

    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl [--plan log|infer] [--fraction 0.5] [--quantile 0.8]
    python benchmarks/bench_family_bias.py --whole-run-gains
    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl --gain-errors
    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl --train-val-gap
    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl --in-sample
    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl --sibling-gains [--earlier-siblings]

Reads the cases ``bench_calibration.py --cache`` kept (run it first with the same code) and
replays ``auto`` with the rule chosen without each family (``cross_family``), as the
calibration report does. Per family: the mean signed ``ln(predicted/true tokens)`` under
that rule with each candidate gain prior; per run: the law ``auto`` chose, the share of the
peak lr the log had shed by the cut (below the gate the multi-power law is no candidate and
the gain is the prior's alone), the rows the forecast saw, how much earlier than the
tokens at the target's quantile the smoothed loss first reached the target (``early``,
``ln(first crossing / q x the run's tokens)``: a dip to the target before the point it was
read at is an error no forecast of the mean curve makes up), its error, and each law's error
under each gain (``lr-annealing / multi-power``), so a family's bias can be traced to the
runs and the rule that make it.

``--whole-run-gains`` prints instead what the gain prior speaks about, measured: the
lr-annealing law fitted to each whole run (its decay logged or, for the speedruns, their
records' plans given; no gain prior), its ``G`` and ``G`` over the loss at the run's end,
beside the prior's share (``--anneal-gain``).

``--gain-errors`` puts the two together for the cuts whose gain is the prior's alone (the
log had shed less of the peak lr than the rule's gate): each cut's signed error beside
``ln(prior's share / the whole run's G over its loss)``, and their correlation, over all
such cuts and per family. A negative correlation says the error is the gain prior's: a
prior above the run's own gain forecasts early, one below it late.

``--train-val-gap`` does the same for the speedrun logs that log both losses (they are
forecast on the train loss): the gap of the train loss (a centred mean of 101 rows) over the val loss, its mean
over the first and the second half of the fit window (from 0.2 to 0.5 and from 0.5 to 1 of
the cut), its drift between them, and after the cut (up to the target's quantile), beside
the cut's signed error. The train loss is the batches' loss in data order: a gap that
narrows over the fit window makes the train loss fall faster than the model improves, and
the forecast of it is early; one that widens, late.

``--in-sample`` bounds what any choice of the rules could give: each family scored by the
rule chosen on that family itself (``choose(replay, [family])``), which the validation
forbids, beside the leave-one-family-out rule, and the pooled median and p90 with each
family at the gain prior whose median on that family itself is smallest. A figure neither
reaches is out of reach of the rules; it is the laws' (or what the logs carry) to move.

``--sibling-gains`` measures the gain a project's own finished runs carry: every run
backtested (about 2 min on 2 cores) with the gain prior its family's other runs show, the
median of their whole-run ``G`` over the loss at their end (runs with no decay to fit it on
left out; none left: the prior's default), the LOFO rules otherwise, beside the LOFO
figures. A gain known from siblings is an input, as a given plan is, not a rule tuned on the
family. With ``--earlier-siblings`` the speedrun records take only the records before them
(their siblings by date, as a user would have them); the other families' runs are sweeps,
finished together.
"""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from bench_calibration import load, members, speedrun_plans
from harness import RUNS, RUNS_TIME, csv_logs, fewer, number
from harness import parser as options

import tracker_plugin as tp
from tracker_plugin.core.backtest import PLANS, BacktestCase
from tracker_plugin.core.cross_family import (
    GAINS,
    LAWS,
    SETTINGS,
    CrossFamily,
    Cut,
    Replay,
    Results,
    Rule,
    Scored,
    choose,
    cross_family,
    family_of,
    figures,
    in_setting,
    lofo,
    run_cases,
)
from tracker_plugin.core.forecast import UNKNOWN_PLAN_SOURCES
from tracker_plugin.core.models import ANNEAL_GAIN
from tracker_plugin.jobs.cross_family import Member

# The visible logs this script reads itself (--quick: three of each family).
LOGS = csv_logs(RUNS, RUNS_TIME)

# Train-loss rows averaged around each val row (--train-val-gap).
_GAP_ROWS = 101


def _error(value: float | None) -> str:
    return number(value, "+.3f", 6)


def family_report(replay: Replay, family: str, rule: Rule, plan: str, f: float, q: float, ends: dict[str, float]) -> list[str]:
    """``ends``: each run's last logged tokens, by its path."""
    lines = [f"{family} (rule without it: gain {rule.gain:g}, margin {rule.margin:g}, gate {rule.gate:g})"]
    for gain in GAINS:
        errors = [e for s in in_setting(replay.scored(replace(rule, gain=gain), plan, [family]), f, q)
                  if (e := s.error) is not None]
        mean = f"{np.mean(errors):+.3f}" if errors else "-"
        lines.append(f"  gain {gain:<6g} mean signed {mean} ({len(errors)} cases)")
    lines.append(f"  {'run':46s} {'law':13s} {'shed':>5s} {'rows':>5s} {'early':>6s} {'error':>6s}  "
                 + "  ".join(f"gain {g:g}: la / mp" for g in GAINS))
    for s in in_setting(replay.scored(rule, plan, [family]), f, q):
        run = s.case.run
        shed = replay.cuts[(plan, run, f)].seen_decay
        # ln(the first crossing / the tokens at q of the run): below 0 where the smoothed
        # loss dipped to the target before the point it was read at.
        early = float(np.log(s.case.true_tokens / (q * ends[run])))
        per_gain = []
        for gain in GAINS:
            table = replay.cases[(plan, gain)]
            la, mp = (table[(run, f, q, law)].error for law in LAWS)
            per_gain.append(f"{_error(la)} / {_error(mp)}")
        lines.append(f"  {Path(run).stem[:46]:46s} {s.case.model:13s} {shed:5.2f} {s.case.rows:5d} {early:+6.3f} {_error(s.error)}  "
                     + "  ".join(f"{x:>17s}" for x in per_gain))
    return lines


def fitted_gains() -> dict[str, tuple[float, float] | str]:
    """Each visible run's whole-run ``G`` and its share of the loss at the run's end, by run
    name (or why the law could not be fitted)."""
    plans = speedrun_plans()
    out: dict[str, tuple[float, float] | str] = {}
    for path in LOGS:
        history, window = load(path)
        plan = plans.get(Path(path).stem) if history.lr is None else None
        analysis = tp.analyze(history, [0.5], ema_token_window=window, model="lr-annealing", lr_schedule=plan, anneal_gain=0.0)
        if isinstance(analysis.fit, tp.FitFailure) or analysis.fit is None:
            out[Path(path).stem] = f"no fit: {analysis.fit.reason if analysis.fit else 'no open target'}"
            continue
        gain = analysis.fit.params["G"]
        end = float(np.median(history.loss[-max(3, len(history.loss) // 20):]))
        out[Path(path).stem] = (gain, gain / end)
    return out


def whole_run_gains() -> list[str]:
    """Each visible run's whole-run ``G``, and its share of the loss at the run's end."""
    lines = [f"the gain prior's share today: {ANNEAL_GAIN:g}", f"{'run':46s} {'G':>7s} {'G/loss':>7s}"]
    for name, fitted in fitted_gains().items():
        lines.append(f"{name[:46]:46s} {fitted}" if isinstance(fitted, str) else f"{name[:46]:46s} {fitted[0]:7.3f} {fitted[1]:7.3f}")
    return lines


def gain_errors(result: CrossFamily, plan: str, f: float, q: float) -> list[str]:
    """The signed errors of the cuts whose gain is the prior's alone, beside how far the
    prior's share (the rule's, chosen without the family) is from the run's own gain."""
    gains = fitted_gains()
    offsets, errors, families = [], [], []
    lines = [f"cuts at f={f:g} q={q:g} (plan {plan}) whose gain is the prior's alone (shed below the gate)",
             f"  {'run':46s} {'prior':>6s} {'own':>6s} {'ln p/o':>7s} {'error':>7s}"]
    for family, rule in result.rules:
        for s in in_setting(result.replay.scored(rule, plan, [family]), f, q):
            name, error = Path(s.case.run).stem, s.error
            own = gains.get(name)
            if (error is None or not np.isfinite(error) or not isinstance(own, tuple) or own[1] <= 0
                    or result.replay.cuts[(plan, s.case.run, f)].seen_decay >= rule.gate):
                continue
            offsets.append(float(np.log(rule.gain / own[1])))
            errors.append(error)
            families.append(family)
            lines.append(f"  {name[:46]:46s} {rule.gain:6.3f} {own[1]:6.3f} {offsets[-1]:+7.2f} {error:+7.3f}")
    x, y, fam = np.array(offsets), np.array(errors), np.array(families)
    for label, mask in [("all", np.ones(len(x), bool))] + [(g, fam == g) for g in sorted(set(families))]:
        if mask.sum() >= 3:
            lines.append(f"  {label:8s} {int(mask.sum()):3d} cuts: corr(ln prior/own, signed error) {np.corrcoef(x[mask], y[mask])[0, 1]:+.2f}, "
                         f"mean ln prior/own {x[mask].mean():+.2f}, mean signed {y[mask].mean():+.3f}")
    return lines


def train_val_gaps(result: CrossFamily, plan: str, f: float, q: float) -> list[str]:
    """The speedrun logs' train-over-val gap in and after the fit window, beside the cut's error."""
    rule = dict(result.rules)["modded"]
    scored = {Path(s.case.run).stem: s for s in in_setting(result.replay.scored(rule, plan, ["modded"]), f, q)}
    lines = [f"speedrun logs with both losses, cut at f={f:g}, target at q={q:g} (plan {plan}): the train loss (centred mean) less the val loss",
             f"  {'run':46s} {'fit 1st':>7s} {'fit 2nd':>7s} {'drift':>7s} {'after':>7s} {'error':>7s}  plan"]
    drifts, signed = [], []
    for path in [p for p in LOGS if Path(p).parent == RUNS_TIME]:
        name = Path(path).stem
        try:
            train = tp.load_csv(path, columns=tp.Columns().with_overrides(loss="train_loss"), batch_size=1.0)
        except tp.DataError:
            continue  # a log with the val loss alone
        val = tp.load_csv(path, columns=tp.Columns().with_overrides(loss="val_loss"), batch_size=1.0)
        # The train loss averaged over the rows around each val row: centred, so it does not
        # lag the val loss where both fall fast.
        centred = pd.Series(train.loss).rolling(_GAP_ROWS, center=True, min_periods=_GAP_ROWS // 5).mean().to_numpy()
        gap = np.interp(val.step, train.step, centred) - val.loss
        end = float(val.last_step)
        mean = {k: float(np.mean(gap[(val.step >= a * end) & (val.step <= b * end)]))
                for k, (a, b) in {"first": (0.2 * f, 0.5 * f), "second": (0.5 * f, f), "after": (f, q)}.items()}
        drift = mean["second"] - mean["first"]
        case = scored.get(name)
        error, source = (None, None) if case is None else (case.error, case.case.plan_source)
        lines.append(f"  {name[:46]:46s} {mean['first']:+7.3f} {mean['second']:+7.3f} {drift:+7.3f} {mean['after']:+7.3f} "
                     f"{_error(error):>7s}  {source}")
        # A log whose plan was assumed errs by its unknown ending first.
        if error is not None and np.isfinite(error) and source not in UNKNOWN_PLAN_SOURCES:
            drifts.append(drift)
            signed.append(error)
    if len(drifts) >= 3:
        lines.append(f"  {len(drifts)} logs with their plan given: corr(drift over the fit window, signed error) "
                     f"{np.corrcoef(drifts, signed)[0, 1]:+.2f}")
    return lines


def in_sample(result: CrossFamily) -> list[str]:
    """The figures with each family scored by the rule chosen on itself, beside LOFO's."""
    replay = result.replay
    rule_sets = {"LOFO": dict(result.rules), "in-sample": {fam: choose(replay, [fam]) for fam in replay.families}}
    lines = ["each family scored by the rule chosen without it (LOFO) and on itself (in-sample, a bound):"]
    lines += _figure_table(replay, rule_sets)
    lines += _best_gain_bound(result)
    for name, rules in rule_sets.items():
        lines.append(f"  {name} rules: " + "; ".join(f"{fam} gain {r.gain:g} margin {r.margin:g} gate {r.gate:g}" for fam, r in rules.items()))
    return lines


def _best_gain_bound(result: CrossFamily) -> list[str]:
    """At the headline setting, each family with the gain prior of GAINS whose median |ln|
    on that family itself is smallest (the LOFO rule otherwise): the median the gain alone
    could give."""
    f, q = SETTINGS[0]
    lines = []
    for plan in PLANS:
        pooled, parts = [], []
        for family, rule in result.rules:
            by_gain = {g: [e for s in in_setting(result.replay.scored(replace(rule, gain=g), plan, [family]), f, q)
                           if (e := s.error) is not None] for g in GAINS}
            best = min(GAINS, key=lambda g: float(np.median(np.abs(by_gain[g]))) if by_gain[g] else np.inf)
            pooled += by_gain[best]
            parts.append(f"{family} {best:g}")
        errors = np.abs(pooled)
        lines.append(f"  {plan:5s} {f:4g} {q:4g} {'best gain':9s} {np.median(errors):7.3f} {np.percentile(errors, 90):7.3f}"
                     f"          each family's own best gain by its median: {', '.join(parts)}")
    return lines


def sibling_gains(result: CrossFamily, results: Results, earlier: bool, workers: int) -> list[str]:
    """The figures with each run forecast on its siblings' whole-run gain, beside LOFO's
    (``result`` is the cross-family validation of ``results``)."""
    gains = {name: g[1] for name, g in fitted_gains().items() if isinstance(g, tuple) and g[1] > _NO_DECAY}
    runs = members(LOGS, speedrun_plans())
    own = {m.history.run: _siblings_gain(Path(m.history.run).stem, m.family, gains, earlier) for m in runs}
    jobs = [(m, plan, own[m.history.run]) for plan in PLANS for m in runs]
    with ProcessPoolExecutor(workers) as pool:
        done = list(pool.map(_cases, jobs))
    # The cases under a gain slot of their own, scored with each family's LOFO rule.
    slot = -1.0
    results = dict(results)
    for plan in PLANS:
        cases = [c for (_m, p, _g), (cs, _cu) in zip(jobs, done) if p == plan for c in cs]
        cuts = [c for (_m, p, _g), (_cs, cu) in zip(jobs, done) if p == plan for c in cu]
        results[(plan, slot)] = (cases, cuts)
    replay = Replay(results)
    rule_sets = {"LOFO": dict(result.rules), "siblings": {f: replace(r, gain=slot) for f, r in result.rules}}
    per_family = {fam: sorted({round(own[m.history.run], 3) for m in runs if m.family == fam}) for fam in replay.families}
    lines = [f"each run with its siblings' whole-run gain ({'earlier records only for the speedruns' if earlier else 'all the other runs of its family'}),"
             " the LOFO rules otherwise:",
             "  siblings' gains: " + "; ".join(f"{fam} {g[0]:g}-{g[-1]:g}" for fam, g in per_family.items())]
    return lines + _figure_table(replay, rule_sets)


def _figure_table(replay: Replay, rule_sets: dict[str, dict[str, Rule]]) -> list[str]:
    """Each plan and setting's figures under each set of rules (a rule per family), and at
    the headline setting each family's signed error and median."""
    lines = [f"  {'plan':5s} {'f':>4s} {'q':>4s} {'rules':9s} {'median':>7s} {'p90':>7s} {'cov50':>6s} {'cov80':>6s} {'cov95':>6s}"
             f"  per family at f={SETTINGS[0][0]:g} q={SETTINGS[0][1]:g}: signed (median |ln|)"]
    for plan in PLANS:
        for name, rules in rule_sets.items():
            scored = lofo(replay, plan, rules)
            for f, q in SETTINGS:
                x = figures(in_setting(scored, f, q))
                tail = ""
                if (f, q) == SETTINGS[0]:
                    tail = "  " + ", ".join(_family_figure(fam, in_setting(scored, f, q)) for fam in replay.families)
                lines.append(f"  {plan:5s} {f:4g} {q:4g} {name:9s} {_figure(x['median'])} {_figure(x['p90'])} "
                             f"{_figure(x['cov50%'], 6)} {_figure(x['cov80%'], 6)} {_figure(x['cov95%'], 6)}{tail}")
    return lines


# A whole-run G/loss below this is a run with no decay to fit the gain on (a constant lr).
_NO_DECAY = 0.005


def _siblings_gain(name: str, family: str, gains: dict[str, float], earlier: bool) -> float:
    """The median whole-run gain share of the run's siblings (by date for the speedruns
    with ``earlier``: the record names begin with their date)."""
    others = [g for n, g in gains.items() if n != name and family_of(n) == family
              and not (earlier and family == "modded" and n > name)]
    # No sibling with a decay: the prior's default.
    return float(np.median(others)) if others else ANNEAL_GAIN


def _cases(job: tuple[Member, str, float]) -> tuple[list[BacktestCase], list[Cut]]:
    member, plan, gain = job
    return run_cases(member.history, member.family, member.config, plan, gain, member.given)


def _figure(value: float | None, width: int = 7) -> str:
    return number(value, f"{width}.3f", width)


def _family_figure(family: str, scored: list[Scored]) -> str:
    errors = np.array([e for s in scored if s.family == family and (e := s.error) is not None])
    finite = errors[np.isfinite(errors)]
    if not len(finite):
        return f"{family} -"
    return f"{family} {np.mean(finite):+.3f} ({np.median(np.abs(errors)):.3f})"


def main() -> None:
    global LOGS
    parser = options(__doc__, quick="three logs of each family where the script reads the logs itself (the cases are "
                     "the cache's: bench_calibration.py --quick --cache FILE makes a quick one)", workers=2)
    parser.add_argument("--cache", type=Path, help="the cases bench_calibration.py --cache wrote")
    parser.add_argument("--plan", choices=("log", "infer"), default="log")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--quantile", type=float, default=0.8)
    # One report a run: the per-family tables unless one of these is asked for.
    report = parser.add_mutually_exclusive_group()
    report.add_argument("--whole-run-gains", action="store_true", help="the gain each whole run shows, beside the prior's")
    report.add_argument("--train-val-gap", action="store_true",
                        help="the speedrun logs' train-over-val gap in and after the fit window, beside each cut's error")
    report.add_argument("--gain-errors", action="store_true",
                        help="the cuts whose gain is the prior's alone: their errors beside the prior's distance from the run's own gain")
    report.add_argument("--sibling-gains", action="store_true",
                        help="each run forecast with the gain its family's other runs show, beside LOFO")
    parser.add_argument("--earlier-siblings", action="store_true",
                        help="with --sibling-gains: the speedrun records take only the records before them")
    report.add_argument("--in-sample", action="store_true",
                        help="each family scored by the rule chosen on itself, a bound on what any rule could give")
    args = parser.parse_args()
    LOGS = fewer(LOGS) if args.quick else LOGS
    if args.earlier_siblings and not args.sibling_gains:
        parser.error("--earlier-siblings goes with --sibling-gains")
    if args.whole_run_gains:
        print("\n".join(whole_run_gains()))
        return
    if args.cache is None or not args.cache.exists():
        raise SystemExit(f"no cases at {args.cache}: run benchmarks/bench_calibration.py --cache {args.cache} first")
    results = pickle.loads(args.cache.read_bytes())["results"]
    result = cross_family(results)
    if args.gain_errors:
        print("\n".join(gain_errors(result, args.plan, args.fraction, args.quantile)))
        return
    if args.sibling_gains:
        print("\n".join(sibling_gains(result, results, args.earlier_siblings, args.workers)))
        return
    if args.in_sample:
        print("\n".join(in_sample(result)))
        return
    if args.train_val_gap:
        print("\n".join(train_val_gaps(result, args.plan, args.fraction, args.quantile)))
        return
    ends = {path: load(path)[0].last_tokens for path in LOGS}
    for family, rule in result.rules:
        print("\n".join(family_report(result.replay, family, rule, args.plan, args.fraction, args.quantile, ends)), "\n", sep="")


if __name__ == "__main__":
    main()
