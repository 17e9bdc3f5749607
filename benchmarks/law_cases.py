"""The cases ``bench_law.py`` scores: every run forecast by its project's law under each rule,
and by the run alone (today), cut at each share of its tokens.

For each run of a family, its siblings are the other runs of its family (the held-out
records: the runs of their family dated before them). The run is never among its own
siblings (:data:`BREACHES` counts it and must stay 0). Per run, per narrowing margin, the
project's law is fitted on the siblings' evidence; per cut and joining weight the law is
put on the run's log; per weighting and interval rule the targets are forecast. The run
alone is today's analysis at the same cuts (``backtest_run``, plan given): its own
forecasts, its errors as the siblings' own-log evidence, and today's sibling calibration.

Computed in worker processes and cached by the runs' content and the code's.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import pickle
import re
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import tracker_plugin
from tracker_plugin.core.analysis import AnalysisConfig, _crossing
from tracker_plugin.core.backtest import BacktestCase, backtest_run
from tracker_plugin.core.project_law.evidence import RunEvidence, run_evidence
from tracker_plugin.core.project_law.forecast import forecast_on, run_curve
from tracker_plugin.core.project_law.join import RunLog, log_of_history, log_of_plan
from tracker_plugin.core.project_law.project import LawRules, ProjectLaw, fit_project
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import LrSchedule

CUTS = (0.0, 0.1, 0.25, 0.5)
OWN_CUTS = (0.1, 0.25, 0.5)
QUANTILES = (0.6, 0.8)
BEYOND = 1.0  # the target quantile of a target the run never reached
# The rule grid: narrowing margins, joining weights, the own law beside the pooled one,
# the interval's prior spread and its weight, the end loss's prior spread.
MARGINS = (0.0, 0.1)
JOINS = (0.0, 6.0, 12.0)
OWNS = ("off", "blend", "switch")
ERROR_PRIORS = (0.05, 0.1, 0.2)
ERROR_WEIGHTS = (2.0, 4.0, 8.0)
LOSS_PRIORS = (0.005, 0.01, 0.02)


@dataclass(frozen=True)
class Grid:
    """The rules a run's cases are computed under."""

    margins: tuple[float, ...] = MARGINS
    joins: tuple[float, ...] = JOINS
    owns: tuple[str, ...] = OWNS
    priors: tuple[float, ...] = ERROR_PRIORS
    weights: tuple[float, ...] = ERROR_WEIGHTS
    loss_priors: tuple[float, ...] = LOSS_PRIORS

    @classmethod
    def of(cls, rule: tuple) -> Grid:
        """The grid of one rule, ``((margin, join, own, prior, weight), loss prior)``."""
        (margin, join, own, prior, weight), loss_prior = rule
        return cls((margin,), (join,), (own,), (prior,), (weight,), (loss_prior,))


QUICK = Grid((0.1,), (6.0,), OWNS, (0.1,), (4.0,), (0.01,))


@dataclass(frozen=True)
class Run:
    """One run of the benchmark: its history, family, plan and EMA window; ``dated``: its
    siblings are the runs of its family dated before it (held-out records)."""

    history: History
    family: str
    plan: LrSchedule
    window: float
    dated: bool = False

    @property
    def name(self) -> str:
        return Path(self.history.run).stem


@dataclass(frozen=True)
class Case:
    """One target of one run at one cut under one rule (``rule``: margin, join, own, error
    prior, error weight); ``tokens`` None: forecast never (within the law's horizon)."""

    run: str
    family: str
    cut: float
    quantile: float
    rule: tuple[float, float, str, float, float]
    true_tokens: float
    tokens: float | None
    spread: float | None
    dof: float | None
    low: float | None  # the 80% interval
    high: float | None
    p: float | None
    shared: bool
    siblings: int
    plan_end_tokens: float | None
    observed: float
    answered: bool = True  # False: no forecast at all (too few rows, or no law before the first row)
    status: str = ""  # the analysis's status (today's cases)


@dataclass(frozen=True)
class EndCase:
    """The smoothed loss at the plan's end forecast at one cut under one rule (``rule``:
    margin, join, loss prior, error weight)."""

    run: str
    family: str
    cut: float
    rule: tuple[float, float, float, float]
    loss: float
    low: float
    high: float
    true_loss: float


def stem_date(name: str) -> str | None:
    found = re.search(r"(\d{4}-\d{2}-\d{2})", name)
    return found.group(1) if found else None


def targets_of(history: History, window: float) -> tuple[list[tuple[float, float, float]], float]:
    """``(quantile, target, true tokens)`` as the backtest makes them (the last never
    reached), and the smoothed loss at the last row."""
    smoothed = token_window_ema(history.loss, history.step, history.batch, window)
    final = history.last_tokens
    out = []
    for q in QUANTILES:
        target = float(np.interp(q * final, history.tokens, smoothed))
        truth = _crossing(history, smoothed, target)
        assert truth is not None
        out.append((q, target, truth[1]))
    end = float(smoothed[-1])
    out.append((BEYOND, end - max(out[-1][1] - end, 1e-3 * abs(end)), math.inf))
    return out, end


def baseline(run: Run) -> list[BacktestCase]:
    """Today's analysis of the run alone at the cuts, plan given."""
    config = AnalysisConfig(targets=(1.0,), ema_token_window=run.window, lr_schedule=run.plan)
    return backtest_run(run.history, config, fit_fractions=OWN_CUTS, target_quantiles=QUANTILES, models=("auto",),
                        plan="log", beyond=True)


def evidence(run: Run, own: Sequence[BacktestCase]) -> RunEvidence:
    errors = tuple((c.fit_fraction, c.target_quantile, max(min(c.error, 3.0), -3.0) if c.error is not None else 3.0)
                   for c in own if c.target_quantile < BEYOND)
    return run_evidence(run.history, run.plan, ema_window=run.window, own=errors, plan_end=run.plan.total_steps)


def siblings_of(run: Run, runs: Sequence[Run]) -> list[Run]:
    out = []
    for other in runs:
        if other.family != run.family or other.name == run.name:
            continue
        if run.dated and (stem_date(other.name) or "") >= (stem_date(run.name) or ""):
            continue
        out.append(other)
    return out


def log_at(run: Run, cut: float) -> RunLog:
    history = run.history
    rows = int(np.searchsorted(history.tokens, cut * history.last_tokens, side="right")) if cut > 0 else 0
    if rows == 0:  # before the run's first row (a log that starts late may have none at a cut)
        return log_of_plan(run.name, run.plan, batch=float(history.batch[0]), ema_window=run.window,
                           unit=history.unit)
    return log_of_history(history.head(rows), run.plan, ema_window=run.window)


def project_cases(job: tuple[Run, list[RunEvidence], list[BacktestCase], Grid]
                  ) -> tuple[list[Case], list[EndCase], dict[float, ProjectLaw]]:
    """Every rule's forecasts of one run by its project's law (see the module's docstring)."""
    run, sibling_evidence, own, grid = job
    targets, end_loss = targets_of(run.history, run.window)
    memo: dict = {}
    cases, ends, projects = [], [], {}
    for margin in grid.margins:
        rules = LawRules(gate_margin=margin)
        project = fit_project(sibling_evidence, run=run.history.run, rules=rules, memo=memo)
        projects[margin] = project
        for cut in CUTS:
            log = log_at(run, cut)
            mine = {t: c.tokens for (q, t, _), c in _own_at(own, cut, targets)}
            for join in grid.joins:
                curve = run_curve(replace(project, rules=replace(rules, join_weight=join)), log) if project.shared else None
                for use_own, prior, weight in itertools.product(grid.owns, grid.priors, grid.weights):
                    variant = replace(rules, join_weight=join, own=use_own, error_prior=prior, error_weight=weight)
                    key = (margin, join, use_own, prior, weight)
                    cases += _cases(run, project, log, curve, variant, key, targets, mine, cut, own)
                    if curve is not None and use_own == grid.owns[0] and prior == grid.priors[0]:
                        for loss_prior in grid.loss_priors:
                            found = forecast_on(project, log, curve, (), rules=replace(variant, loss_prior=loss_prior))
                            if found.plan_end is not None and found.plan_end.loss_interval is not None:
                                ends.append(EndCase(run.name, run.family, cut, (margin, join, loss_prior, weight),
                                                    found.plan_end.loss, *found.plan_end.loss_interval, end_loss))
    return cases, ends, projects


def _own_at(own: Sequence[BacktestCase], cut: float, targets: Sequence[tuple[float, float, float]]):  # type: ignore[no-untyped-def]
    by = {(c.fit_fraction, c.target_quantile): c for c in own}
    return [(t, by[(cut, t[0])]) for t in targets if (cut, t[0]) in by]


def _cases(run: Run, project: ProjectLaw, log: RunLog, curve, rules: LawRules, key, targets, mine, cut: float,  # type: ignore[no-untyped-def]
           own: Sequence[BacktestCase]) -> list[Case]:
    end_tokens = log.plan_end_tokens
    out = []
    if curve is None:  # no shared law: the run alone (none before its first row)
        by = {(c.fit_fraction, c.target_quantile): c for c in own}
        for q, _, truth in targets:
            c = by.get((cut, q))
            tokens = None if c is None else c.tokens
            interval = None if c is None else c.interval
            out.append(Case(run.name, run.family, cut, q, key, truth, tokens, None, None,
                            None if interval is None else interval[0], None if interval is None else interval[1],
                            None if c is None else c.p_reach, False, len(project.evidence), end_tokens, log.last_tokens,
                            answered=c is not None and str(c.status) != "not_enough_data"))
        return out
    found = forecast_on(project, log, curve, [t for _, t, _ in targets], mine if rules.own != "off" else None,
                        rules=rules)
    by = {(c.fit_fraction, c.target_quantile): c for c in own}
    for (q, _, truth), t in zip(targets, found.targets):
        if t.own_share >= 1.0:  # the run's own forecast stands
            c = by[(cut, q)]
            out.append(Case(run.name, run.family, cut, q, key, truth, c.tokens, None, None,
                            None if c.interval is None else c.interval[0], None if c.interval is None else c.interval[1],
                            c.p_reach, True, len(project.siblings), end_tokens, log.last_tokens,
                            answered=str(c.status) != "not_enough_data"))
            continue
        out.append(Case(run.name, run.family, cut, q, key, truth, t.tokens, t.spread, t.dof,
                        None if t.interval is None else t.interval[0], None if t.interval is None else t.interval[1],
                        t.p_within_plan, True, len(project.siblings), end_tokens, log.last_tokens))
    return out


def code_key(*, law: bool) -> str:
    """The code the cases are computed by: the core (without the project's law for today's
    cases, which it does not touch) and this file."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    code = Path(tracker_plugin.__file__).parent / "core"
    for path in sorted(code.rglob("*.py")):
        if law or "project_law" not in path.parts:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def run_key(run: Run, *extra: object) -> str:
    digest = hashlib.sha256(repr(extra).encode())
    digest.update(run.history.run.encode())
    digest.update(np.ascontiguousarray(run.history.loss).tobytes())
    digest.update(run.plan.fingerprint().encode())
    return digest.hexdigest()[:24]


def per_run(pool: ProcessPoolExecutor, folder: Path | None, keys: Sequence[str], fn, jobs: Sequence):  # type: ignore[no-untyped-def]
    """``fn`` over ``jobs``, each result kept in ``folder`` under its key and read back from
    there (a run's cases survive a later run's failure)."""
    out: dict[int, object] = {}
    todo = []
    for i, key in enumerate(keys):
        path = None if folder is None else folder / f"{key}.pkl"
        if path is not None and path.exists():
            try:
                out[i] = pickle.loads(path.read_bytes())
                continue
            except Exception:  # noqa: BLE001 - an unreadable entry is computed again
                pass
        todo.append(i)
    for i, value in zip(todo, pool.map(fn, [jobs[i] for i in todo])):
        out[i] = value
        if folder is not None:
            (folder / f"{keys[i]}.pkl").write_bytes(pickle.dumps(value))
    return [out[i] for i in range(len(keys))]


def all_cases(runs: Sequence[Run], workers: int, grid: Grid, folder: Path | None = None,  # type: ignore[no-untyped-def]
              scored: Sequence[Run] | None = None):
    """Today's cases per run, then the cases of the project's law of the ``scored`` runs
    (default: all) under each rule of ``grid`` (each run's kept in ``folder``, keyed by its
    content, its siblings, the grid and the code)."""
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    today, law = code_key(law=False), code_key(law=True)
    with ProcessPoolExecutor(workers) as pool:
        own = dict(zip([r.name for r in runs], per_run(pool, folder, [f"own-{run_key(r, today)}" for r in runs],
                                                       baseline, runs)))
        evidences = dict(zip([r.name for r in runs], pool.map(evidence, runs, [own[r.name] for r in runs])))
        scored = list(runs if scored is None else scored)
        jobs = [(run, [evidences[s.name] for s in siblings_of(run, runs)], own[run.name], grid) for run in scored]
        keys = [f"law-{run_key(run, law, grid, [e.run for e in job[1]])}" for run, job in zip(scored, jobs)]
        results = per_run(pool, folder, keys, project_cases, jobs)
        runs = scored
    cases = [c for r in results for c in r[0]]
    ends = [e for r in results for e in r[1]]
    projects = {run.name: r[2] for run, r in zip(runs, results)}
    # A run among its own siblings would score the law on itself: counted (must be 0).
    breaches = sum(any(e.run == run.history.run for e in job[1]) for run, job in zip(runs, jobs))
    return own, evidences, cases, ends, projects, breaches
