"""``bench_law.py``'s other figures: today's sibling calibration, the error against the number
of siblings, the end-to-end analysis with the project's law, the cost, and the peak lr."""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np
from law_cases import BEYOND, CUTS, OWN_CUTS, Case, Run, log_at, siblings_of, targets_of

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.project_law.evidence import RunEvidence, run_evidence
from tracker_plugin.core.project_law.forecast import forecast_plan, forecast_run
from tracker_plugin.core.project_law.loso import evidence_member, leave_one_out
from tracker_plugin.core.project_law.pooled import Units, fit_pooled
from tracker_plugin.core.project_law.project import LawRules, fit_project
from tracker_plugin.core.siblings import calibrate, sibling_case
from tracker_plugin.core.status import Status
from tracker_plugin.frame.history import build_history
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run


def rules_of(rule: tuple) -> LawRules:
    (margin, join, own, prior, weight), loss_prior = rule
    return LawRules(gate_margin=margin, join_weight=join, own=own, error_prior=prior, error_weight=weight,
                    loss_prior=loss_prior)


def today_calibrated(runs: Sequence[Run], own) -> list[Case]:  # type: ignore[no-untyped-def]
    """Today's forecasts calibrated on the siblings' backtests at the same cut (core.siblings,
    its default rules), as ``annotate --calibrate-on`` does."""
    out = []
    for run in runs:
        sibs = siblings_of(run, runs)
        for c in own[run.name]:
            found = [x for s in sibs for b in own[s.name] if b.fit_fraction == c.fit_fraction and b.target_quantile < BEYOND
                     and b.reached_in_run and b.tokens is not None and b.draws
                     and (x := sibling_case(s.name, b.tokens, b.true_tokens, np.array(b.draws, float))) is not None]
            cal = calibrate(found)
            tokens, interval = c.tokens, c.interval
            if cal.active and tokens is not None:
                draws = np.sort(cal.draws(np.array(c.draws, float), tokens)) if c.draws else np.array([])
                tokens = cal.point(tokens)
                if len(draws):
                    top = len(draws) - 1
                    interval = (float(draws[math.floor(0.1 * top)]), float(draws[math.ceil(0.9 * top)]))
            out.append(Case(run.name, run.family, c.fit_fraction, c.target_quantile, (), c.true_tokens, tokens, None,
                            None, None if interval is None else interval[0], None if interval is None else interval[1],
                            c.p_reach, False, len(sibs), c.plan_end_tokens, 0.0,
                            answered=str(c.status) != "not_enough_data", status=str(c.status)))
    return out


COUNTS = (1, 2, 3, None)
_SEEDS = 3


def _count_job(job: tuple[Run, list[RunEvidence], LawRules, int | None, int, list]) -> tuple[str, str, int | None, dict]:  # type: ignore[type-arg]
    run, sibs, rules, k, seed, own = job
    if k is not None:
        rng = np.random.default_rng([zlib.crc32(run.name.encode()), k, seed])
        sibs = [sibs[i] for i in sorted(rng.choice(len(sibs), k, replace=False))]
    project = fit_project(sibs, run=run.history.run, rules=rules)
    targets, _ = targets_of(run.history, run.window)
    q8 = [t for t in targets if t[0] == 0.8][0]
    out = {}
    for cut in (0.0, 0.25, 0.5):
        if project.shared:
            mine = {c.target: c.tokens for c in own if c.fit_fraction == cut and c.target_quantile == 0.8} if cut else None
            found = forecast_run(project, log_at(run, cut), [q8[1]], mine)
            tokens = found.targets[0].tokens
        else:  # no shared law: the run alone (nothing before its first row)
            tokens = next((c.tokens for c in own if c.fit_fraction == cut and c.target_quantile == 0.8), None) if cut else None
            if not cut:
                continue
        out[cut] = 3.0 if tokens is None else min(abs(math.log(tokens / q8[2])), 3.0)
    return run.name, run.family, k, out


def count_lines(runs: Sequence[Run], evidences, own, rule: tuple, workers: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The error against the number of siblings (seeded draws of k of them), the default rules."""
    rules = rules_of(rule)
    jobs = []
    for run in runs:
        sibs = [evidences[s.name] for s in siblings_of(run, runs)]
        for k in COUNTS:
            if k is not None and k > len(sibs):
                continue
            for seed in range(_SEEDS if k is not None else 1):
                jobs.append((run, sibs, rules, k, seed, own[run.name]))
    with ProcessPoolExecutor(workers) as pool:
        results = list(pool.map(_count_job, jobs))
    families = sorted({f for _, f, _, _ in results})
    lines = ["", "error against the number of siblings (q=0.8, median |ln| over runs and draws; 1 sibling confirms no "
             "law: the run alone, nothing before its first row):",
             "  " + f"{'family':12s}{'cut':>5s}" + "".join(f"{'all' if k is None else k:>9}" for k in COUNTS)]
    for fam in families:
        for cut in (0.0, 0.25, 0.5):
            cells = []
            for k in COUNTS:
                e = [r[3][cut] for r in results if r[1] == fam and r[2] == k and cut in r[3]]
                cells.append(f"{np.median(e):9.3f}" if e else f"{'-':>9s}")
            lines.append(f"  {fam:12s}{cut:5g}" + "".join(cells))
    return lines


def _end_to_end(job: tuple[Run, list[RunEvidence]]) -> list[tuple]:  # type: ignore[type-arg]
    run, sibs = job
    project = fit_project(sibs, run=run.history.run)
    targets, end_loss = targets_of(run.history, run.window)
    out = []
    if project.shared:
        found = forecast_plan(project, run.name, run.plan, [t for _, t, _ in targets], batch=float(run.history.batch[0]),
                              ema_window=run.window, unit=run.history.unit)
        end = found.plan_end
        out.append((run.name, run.family, 0.0, "forecast", project.shared, end is not None,
                    None if end is None else end.loss - end_loss, None))
    for cut in OWN_CUTS:
        rows = int(np.searchsorted(run.history.tokens, cut * run.history.last_tokens, side="right"))
        config = AnalysisConfig(targets=tuple(t for _, t, _ in targets), ema_token_window=run.window,
                                lr_schedule=run.plan, project_law=project)
        analysis = run_analysis(run.history.head(rows), config)
        end = analysis.plan_end
        for (q, _, _), result in zip(targets, analysis.targets):
            out.append((run.name, run.family, cut, str(result.status), project.shared, end is not None,
                        None if end is None else end.loss - end_loss, q))
    return out


def end_to_end_lines(runs: Sequence[Run], evidences, own, workers: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The analysis itself with the project's law (the library's defaults): statuses, plan_end."""
    jobs = [(run, [evidences[s.name] for s in siblings_of(run, runs)]) for run in runs]
    with ProcessPoolExecutor(workers) as pool:
        rows = [r for part in pool.map(_end_to_end, jobs) for r in part]
    reachable = [r for r in rows if r[7] is not None and r[7] < BEYOND]
    early_no = sum(1 for r in reachable if r[3] in (Status.NOT_REACHED, Status.UNREACHABLE))
    unlikely = sum(1 for r in reachable if r[3] == Status.UNLIKELY)
    with_end = sum(1 for r in rows if r[5])
    lines = ["", "end to end (run_analysis with the project's law, the library's defaults; cuts 10, 25, 50%):",
             f"  reachable targets called not_reached or unreachable: {early_no} of {len(reachable)} "
             f"({unlikely} 'unlikely within the plan')",
             f"  forecasts with a plan_end: {with_end} of {len(rows)}"]
    for cut in CUTS:
        errs = [abs(r[6]) for r in rows if r[2] == cut and r[6] is not None and (r[7] is None or r[7] == 0.8)]
        shared = [abs(r[6]) for r in rows if r[2] == cut and r[6] is not None and r[4] and (r[7] is None or r[7] == 0.8)]
        if errs:
            lines.append(f"  f={cut:g}: plan_end smoothed loss median |error| {np.median(errs):.4f} over {len(errs)} runs"
                         + (f" ({np.median(shared):.4f} over the {len(shared)} with a shared law)" if shared else ""))
    return lines


def _synthetic_runs(n: int, rows: int, peaks: Sequence[float] = (3e-4,), law: MultiPowerLaw | None = None,
                    carry: bool = True) -> list[RunEvidence]:
    """``n`` runs of ``rows`` steps on lr schedules of several shapes and lengths (and peak
    lrs), following one multi-power law in the absolute lr (``carry``), or with a level and
    slope that move with the peak lr (not)."""
    shapes = ["cosine:warmup=500,total={t},final=0.1", "constant:warmup=500", "wsd:warmup=500,total={t},decay={d},final=0"]
    out = []
    for i in range(n):
        total = int(rows * (0.6 + 0.4 * ((i * 7) % 5) / 4))
        spec = shapes[i % 3].format(t=total, d=total // 5)
        plan = LrSchedule.parse_spec(spec)
        peak = peaks[i % len(peaks)]
        base = law or MultiPowerLaw()
        ratio = peak / peaks[0]
        this = base if carry else replace(base, l0=base.l0 + 0.05 * math.log(ratio) ** 2 + 0.02 * math.log(ratio))
        frame = multi_power_run(plan, total, this, log_every=max(1, total // rows), lr_peak=peak, seed=i, noise=0.02)
        if carry and ratio != 1.0:  # the law in the absolute lr: area and drops scale with the peak
            shape = plan.at(np.arange(total)) / plan.peak
            at = frame["step"].to_numpy()
            frame["train_loss"] = this.loss(shape * ratio, at) + np.random.default_rng(i).normal(0, 0.02, len(at))
        history = build_history(frame, run=f"synthetic-{i}")
        out.append(run_evidence(history, plan, ema_window=2e7, peak_lr=peak))
    return out


def cost_lines() -> list[str]:
    """A pooled fit on 10 siblings of 50,000 rows each: CPU seconds (target <= 2 s)."""
    t0 = time.process_time()
    evidences = _synthetic_runs(10, 50_000)
    made = time.process_time() - t0
    lines = ["", f"cost: 10 synthetic siblings of 50,000 rows: their evidence {made:.1f} s CPU (once per finished run)"]
    units = Units(float(np.array(evidences[0].batch)[0, 2]))
    members = [evidence_member(e, units) for e in evidences]
    for law in ("lr-annealing", "multi-power"):
        t0 = time.process_time()
        fit_pooled(members, law, units)
        lines.append(f"  pooled {law} fit: {time.process_time() - t0:.2f} s CPU (target <= 2 s)")
    t0 = time.process_time()
    project = fit_project(evidences)
    lines.append(f"  the whole project (both laws and shifts chosen leave-one-out, narrowed): "
                 f"{time.process_time() - t0:.1f} s CPU, once per project and cached ({project.describe()[:80]}...)")
    return lines


def peak_lr_lines(evidences, projects) -> list[str]:  # type: ignore[no-untyped-def]
    """Whether a law with the peak lr in it carries across peak lrs."""
    lines = ["", "the peak lr: no public sweep of one configuration over peak lrs was found (the MultiPowerLaw "
             "repository's runs all train at 3e-4); measured on what there is, labelled:"]
    for carry in (True, False):
        sweep = _synthetic_runs(9, 3_000, peaks=(1e-4, 3e-4, 1e-3), carry=carry)
        runs = [replace(e, finished=True) for e in sweep]
        project = fit_project(runs[1:], run=runs[0].run, peak_lr=runs[0].peak_lr)
        label = "one law in the absolute lr" if carry else "a level that moves with the peak lr"
        lines.append(f"  synthetic sweep (1e-4, 3e-4, 1e-3; {label}): {project.describe()[:260]}")
    olmo = [e for name, e in evidences.items() if name.startswith("olmo-ladder-") and name.endswith("-2xC")]
    if len(olmo) >= 3:
        units = Units(float(np.median([np.array(e.batch)[0, 2] for e in olmo])),
                      float(np.median([e.peak_lr for e in olmo if e.peak_lr])))
        errors, _ = leave_one_out(olmo, "lr-annealing", units, cuts=(0.0,))
        same, _ = leave_one_out(olmo, "lr-annealing", Units(units.batch), cuts=(0.0,))
        lines.append("  real, not a sweep: the OLMo ladder's 2xC runs at 190M, 370M and 760M (peak lrs "
                     + ", ".join(f"{e.peak_lr:.2g}" for e in olmo) + "; sizes differ too), each forecast before its "
                     f"first row from the other two: mean |ln| {np.mean([abs(e.error) for e in errors]):.3f} with the "
                     f"peak lr in the law, {np.mean([abs(e.error) for e in same]):.3f} without")
    narrowed = [p.narrowed for ps in projects.values() for p in ps.values() if p.narrowed]
    lines.append(f"  projects narrowed by the peak lr among the families: {len(narrowed)} (their runs share one peak lr)")
    return lines
