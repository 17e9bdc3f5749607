"""Where each family's mean signed error comes from, run by run, at the headline setting.

    python benchmarks/bench_family_bias.py --cache /tmp/calibration.pkl [--plan log|infer] [--fraction 0.5] [--quantile 0.8]
    python benchmarks/bench_family_bias.py --whole-run-gains

Reads the cases ``bench_calibration.py --cache`` kept (run it first with the same code) and
replays ``auto`` with the rule chosen without each family (``cross_family``), as the
calibration report does. Per family: the mean signed ``ln(predicted/true tokens)`` under
that rule with each candidate gain prior; per run: the law ``auto`` chose, the share of the
peak lr the log had shed by the cut (below the gate the multi-power law is no candidate and
the gain is the prior's alone), the rows the forecast saw, its error, and each law's error
under each gain (``lr-annealing / multi-power``), so a family's bias can be traced to the
runs and the rule that make it.

``--whole-run-gains`` prints instead what the gain prior speaks about, measured: the
lr-annealing law fitted to each whole run (its decay logged or, for the speedruns, their
records' plans given; no gain prior), its ``G`` and ``G`` over the loss at the run's end,
beside the prior's share (``--anneal-gain``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import tracker_plugin as tp
from tracker_plugin.core.cross_family import GAINS, LAWS, Replay, Rule, cross_family, in_setting
from tracker_plugin.core.models import ANNEAL_GAIN

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import SHARED, csvs, load, speedrun_plans  # noqa: E402


def _error(value: float | None) -> str:
    return "   -  " if value is None else f"{value:+.3f}"


def family_report(replay: Replay, family: str, rule: Rule, plan: str, f: float, q: float) -> list[str]:
    lines = [f"{family} (rule without it: gain {rule.gain:g}, margin {rule.margin:g}, gate {rule.gate:g})"]
    for gain in GAINS:
        errors = [e for s in in_setting(replay.scored(replace(rule, gain=gain), plan, [family]), f, q)
                  if (e := s.error) is not None]
        mean = f"{np.mean(errors):+.3f}" if errors else "-"
        lines.append(f"  gain {gain:<6g} mean signed {mean} ({len(errors)} cases)")
    lines.append(f"  {'run':46s} {'law':13s} {'shed':>5s} {'rows':>5s} {'error':>6s}  "
                 + "  ".join(f"gain {g:g}: la / mp" for g in GAINS))
    for s in in_setting(replay.scored(rule, plan, [family]), f, q):
        run = s.case.run
        shed = replay.cuts[(plan, run, f)].seen_decay
        per_gain = []
        for gain in GAINS:
            table = replay.cases[(plan, gain)]
            la, mp = (table[(run, f, q, law)].error for law in LAWS)
            per_gain.append(f"{_error(la)} / {_error(mp)}")
        lines.append(f"  {Path(run).stem[:46]:46s} {s.case.model:13s} {shed:5.2f} {s.case.rows:5d} {_error(s.error)}  "
                     + "  ".join(f"{x:>17s}" for x in per_gain))
    return lines


def whole_run_gains() -> list[str]:
    """Each visible run's whole-run ``G``, and its share of the loss at the run's end."""
    plans = speedrun_plans()
    lines = [f"the gain prior's share today: {ANNEAL_GAIN:g}", f"{'run':46s} {'G':>7s} {'G/loss':>7s}"]
    for path in csvs(SHARED / "runs", SHARED / "runs-time"):
        history, window = load(path)
        plan = plans.get(Path(path).stem) if history.lr is None else None
        analysis = tp.analyze(history, [0.5], ema_token_window=window, model="lr-annealing", lr_schedule=plan, anneal_gain=0.0)
        name = Path(path).stem[:46]
        if isinstance(analysis.fit, tp.FitFailure) or analysis.fit is None:
            lines.append(f"{name:46s} no fit: {analysis.fit.reason if analysis.fit else 'no open target'}")
            continue
        gain = analysis.fit.params["G"]
        end = float(np.median(history.loss[-max(3, len(history.loss) // 20):]))
        lines.append(f"{name:46s} {gain:7.3f} {gain / end:7.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, help="the cases bench_calibration.py --cache wrote")
    parser.add_argument("--plan", choices=("log", "infer"), default="log")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--quantile", type=float, default=0.8)
    parser.add_argument("--whole-run-gains", action="store_true", help="the gain each whole run shows, beside the prior's")
    args = parser.parse_args()
    if args.whole_run_gains:
        print("\n".join(whole_run_gains()))
        return
    if args.cache is None or not args.cache.exists():
        raise SystemExit(f"no cases at {args.cache}: run benchmarks/bench_calibration.py --cache {args.cache} first")
    results = pickle.loads(args.cache.read_bytes())["results"]
    result = cross_family(results)
    for family, rule in result.rules:
        print("\n".join(family_report(result.replay, family, rule, args.plan, args.fraction, args.quantile)), "\n", sep="")


if __name__ == "__main__":
    main()
