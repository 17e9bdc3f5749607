"""The project's law, measured leave-one-family-out, beside today's forecasts.

    python benchmarks/bench_law.py [--quick [--held-out]] [--workers 2] [--cache /tmp/bench_law]

Families (each a project whose runs are one configuration): MPL 25M and MPL 100M (nine lr
schedules each), the OLMo ladder at 190M, 370M and 760M (five horizons each), from
``../shared/data/runs``; the GPT-2-small speedrun records of ``../shared/data/runs-time``
(different recipes: the family expected to share no law; the two records with no plan in
``data/speedrun_plans.csv`` are left out, the plan being given here); held out, scored only:
the GPT-2-medium records (``data/heldout``) and the 2025 GPT-2-small records
(``data/heldout-time``), each forecast from the records of its family dated before it.

Every run is forecast from its siblings (the other runs of its family; never itself: the
count of breaches is printed) at 0 (before its first row, its plan given), 10, 25 and 50%
of its tokens, for the targets its smoothed loss reached at 60% and 80% of its tokens and
one it never reached (its last smoothed loss less the gap to the 80% one), as
``backtest_run`` makes them. The rules (the narrowing margin, the run's joining weight, the
run's own law beside the pooled one, the interval's prior spread and weight, the end loss's
prior spread) are chosen for each family on the other visible families (the point rules by
the mean of the median and p90 |ln|, then the interval rules by the coverage misses at 50,
80 and 95%, under-coverage weighing three times), and the held-out runs are scored with the
rule all visible families choose, which is the library's default. Today's figures are the
run alone (``backtest_run``, plan given) and calibrated on its siblings
(``core.siblings``, its defaults), measured in the same run.

``--quick`` scores one rule (the defaults) and skips the held-out runs, the end-to-end
pass and the cost: about 17 minutes on 2 cores. ``--quick --held-out`` scores the
held-out runs too, with that rule.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import HELD_OUT, speedrun_plans  # noqa: E402
from bench_forecast import load  # noqa: E402
from harness import RUNS, RUNS_TIME, csv_logs  # noqa: E402
from law_cases import BEYOND, CUTS, QUICK, Case, EndCase, Grid, Run, all_cases  # noqa: E402
from law_extra import cost_lines, count_lines, end_to_end_lines, peak_lr_lines, today_calibrated  # noqa: E402

from tracker_plugin.core.backtest import logged_plan  # noqa: E402
from tracker_plugin.core.cross_family import reliability  # noqa: E402

LAW_FAMILIES = ("mpl-25M", "mpl-100M", "olmo-190M", "olmo-370M", "olmo-760M")
NO_LAW = "speedrun"
VISIBLE = (*LAW_FAMILIES, NO_LAW)
LEVELS = (0.5, 0.8, 0.95)
MISS = 3.0
DEFAULT_INTERVAL = (0.1, 4.0)


def family_of(name: str) -> str:
    for size in ("25M", "100M", "190M", "370M", "760M"):
        if f"-{size}-" in name:
            return ("mpl-" if name.startswith("mpl") else "olmo-") + size
    if name.startswith("medium"):
        return "medium"
    return "speedrun-2025" if name.startswith("modded-short-2025") else NO_LAW


def read_runs(quick: bool) -> list[Run]:
    plans = speedrun_plans()
    files = [f for f in csv_logs(RUNS, RUNS_TIME) if not Path(f).name.startswith("nanogpt")]
    if not quick:
        files += csv_logs(*HELD_OUT)
    runs = []
    for path in files:
        history, window = load(path)
        name = Path(path).stem
        plan = logged_plan(history) if history.lr is not None else plans.get(name)
        if plan is None:
            continue  # a speedrun record with no plan known: the plan is given here
        family = family_of(name)
        runs.append(Run(history, family, plan, window, dated=family in ("medium", "speedrun-2025")))
    # The 2025 records' siblings are every GPT-2-small record dated before them.
    return [replace(r, family="speedrun", dated=True) if r.family == "speedrun-2025" else r for r in runs]


def held_label(run: Run) -> str:
    return "speedrun-2025" if run.name.startswith("modded-short-2025") else run.family


# ---- scoring ----------------------------------------------------------------------


def errors(cases: Sequence[Case]) -> np.ndarray:
    """|ln(predicted / true)| of the reached targets (a forecast of never: MISS); cases with
    no forecast at all (no law before a run's first row) are left out."""
    out = []
    for c in cases:
        if c.quantile >= BEYOND or not c.answered:
            continue
        out.append(MISS if c.tokens is None else min(abs(math.log(c.tokens / c.true_tokens)), MISS))
    return np.array(out)


def covered(c: Case, level: float) -> bool | None:
    if c.quantile >= BEYOND or not c.answered:
        return None
    if c.tokens is None:
        return False
    if c.spread is not None and c.dof is not None:
        z = float(student_t(c.dof).ppf(0.5 + level / 2))
        low = max(c.tokens * math.exp(-z * c.spread), c.observed)
        return low <= c.true_tokens <= c.tokens * math.exp(z * c.spread)
    if level == 0.8 and c.low is not None and c.high is not None:
        return c.low <= c.true_tokens <= c.high
    return None


def coverage(cases: Sequence[Case], level: float) -> float | None:
    held = [x for c in cases if (x := covered(c, level)) is not None]
    return float(np.mean(held)) if held else None


def point_loss(cases: Sequence[Case], families: Sequence[str]) -> float:
    values = []
    for fam in families:
        for cut in CUTS:
            for q in (0.6, 0.8):
                e = errors([c for c in cases if c.family == fam and c.cut == cut and c.quantile == q])
                if len(e):
                    values.append(float(np.mean(np.percentile(e, [50, 90]))))
    return float(np.mean(values)) if values else math.inf


def coverage_loss(cases: Sequence[Case], families: Sequence[str]) -> float:
    values = []
    for fam in families:
        part = [c for c in cases if c.family == fam and c.cut > 0]
        for level in LEVELS:
            cov = coverage(part, level)
            if cov is not None:
                miss = level - cov
                values.append(3.0 * miss if miss > 0 else -miss)
    return float(np.mean(values)) if values else math.inf


def choose(cases: Sequence[Case], ends: Sequence[EndCase], families: Sequence[str]) -> tuple:
    """The rule ``families`` choose: point rules, then interval rules, then the end loss's."""
    by_rule: dict[tuple, list[Case]] = {}
    for c in cases:
        if c.family in families:
            by_rule.setdefault(c.rule, []).append(c)
    points = {r[:3] for r in by_rule}
    point = min(sorted(points), key=lambda r: round(point_loss(by_rule.get((*r, *DEFAULT_INTERVAL), []), families), 6))
    intervals = sorted({r[3:] for r in by_rule if r[:3] == point})
    interval = min(intervals, key=lambda r: (round(coverage_loss(by_rule[(*point, *r)], families), 6), -r[0], r[1]))
    end_rules = sorted({e.rule[2] for e in ends if e.rule[:2] == point[:2] and e.rule[3] == interval[1]})
    loss_prior = min(end_rules or [0.01], key=lambda p: round(_end_miss(
        [e for e in ends if e.family in families and e.rule == (*point[:2], p, interval[1])]), 6))
    return (*point, *interval), loss_prior


def _end_miss(ends: Sequence[EndCase]) -> float:
    if not ends:
        return math.inf
    cov = float(np.mean([e.low <= e.true_loss <= e.high for e in ends]))
    return 3.0 * (0.8 - cov) if cov < 0.8 else cov - 0.8


# ---- printing ---------------------------------------------------------------------


def row(label: str, cases: Sequence[Case]) -> str:
    e = errors(cases)
    never = sum(1 for c in cases if c.quantile < BEYOND and c.answered and c.tokens is None)
    none = sum(1 for c in cases if c.quantile < BEYOND and not c.answered)
    cov = coverage(cases, 0.8)
    med = f"{np.median(e):7.3f}" if len(e) else "      -"
    p90 = f"{np.percentile(e, 90):7.3f}" if len(e) else "      -"
    return f"  {label:34s} {len(e):4d} {med} {p90} {never:6d} {none:5d} {'     -' if cov is None else f'{cov:6.2f}'}"


HEADER = f"  {'':34s} {'n':>4s} {'median':>7s} {'p90':>7s} {'never':>6s} {'none':>5s} {'cov80':>6s}"


def lofo_cases(cases: Sequence[Case], rules: dict[str, tuple]) -> list[Case]:
    return [c for c in cases if c.family in rules and c.rule == rules[c.family][0]]


def report(runs: Sequence[Run], own, cases: list[Case], ends: list[EndCase], breaches: int, quick: bool) -> list[str]:  # type: ignore[no-untyped-def]
    visible = [f for f in VISIBLE if any(r.family == f for r in runs)]
    rules = {fam: choose(cases, ends, [f for f in visible if f != fam]) for fam in visible}
    everyone = choose(cases, ends, visible)
    lines = ["rules chosen without each family (margin, join weight, own law, error prior, its weight; end-loss prior):"]
    lines += [f"  without {fam:14s} {rule}" for fam, rule in rules.items()]
    lines += [f"  all visible families     {everyone}   <- the library's defaults", ""]
    scored = lofo_cases(cases, rules)
    today = _today(runs, own)
    calibrated = today_calibrated(runs, own)
    lines += ["targets forecast, each family with the rules chosen without it; today beside it "
              "(|ln(predicted/true tokens)|; never: forecast never reached)", HEADER]
    for cut in CUTS:
        for q in (0.8, 0.6):
            law = [c for c in scored if c.cut == cut and c.quantile == q]
            lines.append(row(f"f={cut:g} q={q:g} law, law families", [c for c in law if c.family in LAW_FAMILIES]))
            if cut > 0:
                lines.append(row(f"f={cut:g} q={q:g} today alone", [c for c in today if c.cut == cut and c.quantile == q
                                                                    and c.family in LAW_FAMILIES]))
                lines.append(row(f"f={cut:g} q={q:g} today calibrated", [c for c in calibrated if c.cut == cut
                                                                         and c.quantile == q and c.family in LAW_FAMILIES]))
    lines += ["", "per family at q=0.8 (law / today alone):", HEADER]
    for fam in visible:
        for cut in CUTS:
            lines.append(row(f"{fam} f={cut:g} law", [c for c in scored if c.family == fam and c.cut == cut and c.quantile == 0.8]))
            if cut > 0:
                lines.append(row(f"{fam} f={cut:g} today", [c for c in today if c.family == fam and c.cut == cut and c.quantile == 0.8]))
    lines += ["", *_no_early(scored, today), "", *_coverage(scored, visible), "", *_chances(scored, today), ""]
    lines += [*_ends(ends, rules), ""]
    lines.append(f"scored runs found among their own siblings: {breaches} (must be 0)")
    return lines


def _today(runs: Sequence[Run], own) -> list[Case]:  # type: ignore[no-untyped-def]
    out = []
    for run in runs:
        for c in own[run.name]:
            out.append(Case(run.name, run.family, c.fit_fraction, c.target_quantile, (), c.true_tokens, c.tokens, None,
                            None, None if c.interval is None else c.interval[0],
                            None if c.interval is None else c.interval[1], c.p_reach, False, 0, c.plan_end_tokens, 0.0,
                            answered=str(c.status) != "not_enough_data", status=str(c.status)))
    return out


def _no_early(scored: Sequence[Case], today: Sequence[Case]) -> list[str]:
    lines = ["reachable targets called no before the run's end (law: forecast past the plan's end, said as a chance, "
             "never not_reached or unreachable; today: not_reached or unreachable):"]
    for cut in CUTS:
        law = [c for c in scored if c.cut == cut and c.quantile < BEYOND and c.shared]
        past = sum(1 for c in law if c.tokens is None or (c.plan_end_tokens is not None and c.tokens > c.plan_end_tokens))
        old = [c for c in today if c.cut == cut and c.quantile < BEYOND]
        # Today's words before this change: a target past the plan's end, or never, was not_reached or unreachable.
        called = sum(1 for c in old if c.status in ("unlikely", "not_reached", "unreachable"))
        lines.append(f"  f={cut:g}: law: 0 not_reached/unreachable ({past} of {len(law)} 'unlikely within the plan')"
                     + (f"; today: {called} of {len(old)}" if cut > 0 else ""))
    return lines


def _coverage(scored: Sequence[Case], families: Sequence[str]) -> list[str]:
    lines = ["interval coverage at f >= 0.25 (50 / 80 / 95%; families of fewer than 10 cases printed, not judged):"]
    late = [c for c in scored if c.cut >= 0.25]
    groups: list[tuple[str, Sequence[Case]]] = [("pooled", late)] + [(f, [c for c in late if c.family == f]) for f in families]
    for label, part in groups:
        n = sum(1 for c in part if covered(c, 0.8) is not None)
        cov = [coverage(part, level) for level in LEVELS]
        text = " / ".join("-" if v is None else f"{v:.2f}" for v in cov)
        lines.append(f"  {label:12s} {n:4d} cases  {text}" + ("" if n >= 10 else "  (fewer than 10: not judged)"))
    return lines


def _chances(scored: Sequence[Case], today: Sequence[Case]) -> list[str]:
    lines = ["P(reach within plan), every target (the one never reached too): Brier per cut, law / today; "
             "reliability (bins of the chance: cases, mean chance, share reached)"]
    for cut in CUTS:
        pairs = [(c.p, math.isfinite(c.true_tokens)) for c in scored if c.cut == cut and c.p is not None]
        old = [(c.p, math.isfinite(c.true_tokens)) for c in today if c.cut == cut and c.p is not None]
        brier = float(np.mean([(p - o) ** 2 for p, o in pairs])) if pairs else None
        before = float(np.mean([(p - o) ** 2 for p, o in old])) if old else None
        table = " ".join(f"[{b.low:.1f},{b.high:.1f}) {b.cases}:{_f(b.mean_p)}/{_f(b.reached)}" for b in reliability(pairs))
        lines.append(f"  f={cut:g}: Brier {_f(brier, 3)} ({len(pairs)}) / {_f(before, 3)} ({len(old)})   {table}")
    return lines


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _ends(ends: Sequence[EndCase], rules: dict[str, tuple]) -> list[str]:
    lines = ["smoothed loss at the plan's end (law families, each with its rule): median |error|, 80% coverage"]
    for cut in CUTS:
        part = [e for e in ends if e.family in rules and e.family in LAW_FAMILIES and e.cut == cut
                and e.rule == (*rules[e.family][0][:2], rules[e.family][1], rules[e.family][0][4])]
        if part:
            err = np.median([abs(e.loss - e.true_loss) for e in part])
            cov = np.mean([e.low <= e.true_loss <= e.high for e in part])
            lines.append(f"  f={cut:g}: {len(part)} runs, median |error| {err:.4f}, coverage {cov:.2f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one rule, no held-out runs, no end-to-end pass or cost")
    parser.add_argument("--held-out", action="store_true",
                        help="with --quick: the held-out runs too, scored with the one rule (the defaults)")
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 2, 2))
    parser.add_argument("--cache", type=Path, help="a folder to keep each run's cases in and reuse them from "
                                                   "(while its content, its siblings and the code are the same)")
    args = parser.parse_args()
    start = time.perf_counter()
    runs = read_runs(args.quick and not args.held_out)
    visible = [r for r in runs if r.family in VISIBLE and not r.name.startswith("modded-short-2025")]
    held = [r for r in runs if r not in visible]
    own, evidences, cases, ends, projects, breaches = all_cases(runs, args.workers, QUICK if args.quick else Grid(),
                                                                args.cache, scored=visible)
    print(f"{len(runs)} runs, cases in {time.perf_counter() - start:.0f} s\n")
    print("\n".join(report(visible, own, [c for c in cases if c.run in {r.name for r in visible}],
                           [e for e in ends if e.run in {r.name for r in visible}], breaches, args.quick)))
    rule = choose([c for c in cases if c.family in VISIBLE], ends, [f for f in VISIBLE])
    print("\n".join(count_lines(visible, evidences, own, rule, args.workers)))
    if held:
        # Held out: scored with the rule all visible families chose, and only with it.
        _, _, held_cases, _, held_projects, held_breaches = all_cases(runs, args.workers, Grid.of(rule), args.cache,
                                                                      scored=held)
        projects.update(held_projects)
        print("\n".join(_held_out(held, own, held_cases, rule)))
        print(f"held-out runs found among their own siblings: {held_breaches} (must be 0)")
    if not args.quick:
        print("\n".join(end_to_end_lines(runs, evidences, own, args.workers)))
        print("\n".join(cost_lines()))
    print("\n".join(peak_lr_lines(evidences, projects)))


def _held_out(held: Sequence[Run], own, cases: Sequence[Case], rule: tuple) -> list[str]:  # type: ignore[no-untyped-def]
    names = {r.name: held_label(r) for r in held}
    scored = [c for c in cases if c.run in names and c.rule == rule[0]]
    today = [c for c in _today(held, own)]
    lines = ["", f"held-out runs ({len(held)}), the rule all visible families chose {rule}; siblings dated before each:",
             HEADER]
    for label in sorted(set(names.values())):
        for cut in CUTS:
            part = [c for c in scored if names[c.run] == label and c.cut == cut and c.quantile == 0.8]
            lines.append(row(f"{label} f={cut:g} law", part))
            if cut > 0:
                lines.append(row(f"{label} f={cut:g} today", [c for c in today if names[c.run] == label and c.cut == cut
                                                              and c.quantile == 0.8]))
    return lines


Scorer = Callable[[Sequence[Case]], float]

if __name__ == "__main__":
    main()
