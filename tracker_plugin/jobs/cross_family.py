"""Leave-one-family-out backtest over runs (see :mod:`tracker_plugin.core.cross_family`).

The cases are the costly part (every run backtested under each law, gain prior and plan:
minutes for some fifty runs), so they run in worker processes and can be kept in a cache
file, reused while the runs, their families, plans and settings and the analysis's code
(every module the cases are computed by, byte for byte) are the same: a rule's default
moved in the code is a new cache, not a stale one replayed.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tracker_plugin
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import PLANS, BacktestCase, Skipped
from tracker_plugin.core.cross_family import GAINS, CrossFamily, Cut, cross_family, family_of, run_cases
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.history import History
from tracker_plugin.jobs.runner import progress_bar
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.trackers import SourceOptions

__all__ = ["Member", "cross_family_cases", "cross_family_runs"]

Results = dict[tuple[str, float], tuple[list[BacktestCase], list[Cut]]]


@dataclass(frozen=True)
class Member:
    """One run of the validation: its history, its family, its settings (the EMA window,
    chiefly) and its planned lr where it logs none (the plan ``log`` forecasts get it)."""

    history: History
    family: str
    config: AnalysisConfig
    given: LrSchedule | None = None


def _one(job: tuple[Member, str, float]) -> tuple[list[BacktestCase], list[Cut]]:
    member, plan, gain = job
    return run_cases(member.history, member.family, member.config, plan, gain, member.given)


def cross_family_cases(
    members: Sequence[Member],
    *,
    processes: int = 1,
    cache: Path | None = None,
    progress: bool = True,
    on_done: Callable[[], None] | None = None,
) -> Results:
    """Every member's cases and cuts per ``(plan, gain)``, computed in ``processes`` worker
    processes, or read from ``cache`` when it was written for the same members and settings
    (else computed and written there)."""
    key = _cache_key(members)
    if cache is not None and cache.exists():
        try:
            stored = pickle.loads(cache.read_bytes())
        except Exception:  # noqa: BLE001 - a cache that cannot be read is recomputed
            stored = None
        if isinstance(stored, dict) and stored.get("key") == key:
            return stored["results"]
    jobs = [(m, plan, gain) for plan in PLANS for gain in GAINS for m in members]
    # The longest logs first, so the pool does not end waiting on one.
    order = sorted(range(len(jobs)), key=lambda k: -len(jobs[k][0].history))
    out: dict[int, tuple[list[BacktestCase], list[Cut]]] = {}
    with progress_bar(len(jobs), "backtesting", progress) as bar:
        for k, got in zip(order, _mapped([jobs[k] for k in order], processes)):
            out[k] = got
            bar.update(1)
            if on_done is not None:
                on_done()
    results: Results = {}
    for k, (_member, plan, gain) in enumerate(jobs):
        entry = results.setdefault((plan, gain), ([], []))
        entry[0].extend(out[k][0])
        entry[1].extend(out[k][1])
    if cache is not None:
        cache.write_bytes(pickle.dumps({"key": key, "results": results}))
    return results


def _mapped(jobs: list[tuple[Member, str, float]], processes: int) -> Iterator[tuple[list[BacktestCase], list[Cut]]]:
    """The jobs' results in order: in this process for one, else in a pool of worker processes."""
    if processes <= 1:
        yield from map(_one, jobs)
        return
    with ProcessPoolExecutor(processes) as pool:
        yield from pool.map(_one, jobs)


def _cache_key(members: Sequence[Member]) -> str:
    """What the cases depend on: each run's content, family, settings and plan, and the code."""
    digest = hashlib.sha256(_code_digest().encode())
    for m in members:
        h = m.history
        digest.update(f"{h.run}|{m.family}|{m.config!r}|{None if m.given is None else m.given.fingerprint()}".encode())
        for column in (h.step, h.tokens, h.batch, h.loss, h.lr):
            if column is not None:
                digest.update(np.ascontiguousarray(column, float).tobytes())
    return digest.hexdigest()


def _code_digest() -> str:
    """The package's version and the bytes of the modules the cases are computed by."""
    digest = hashlib.sha256(tracker_plugin.__version__.encode())
    root = Path(tracker_plugin.__file__).parent
    for package in ("plan", "frame", "core"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cross_family_runs(
    specs: Sequence[str],
    options: SourceOptions,
    config: AnalysisConfig,
    *,
    family_rule: str,
    processes: int = 1,
    cache: Path | None = None,
    progress: bool = True,
) -> tuple[CrossFamily, tuple[Skipped, ...]]:
    """The leave-one-family-out validation of the runs ``specs`` name, each run's family the
    first group of ``family_rule`` in its name; a run that cannot be read is skipped with its
    error. A run's planned lr, where its source gives one (its params), is the plan given.

    Raises
    ------
    ConfigError
        A run name the family rule finds no family in, or fewer than two families.
    """
    members: list[Member] = []
    skipped: list[Skipped] = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            for run in runs:
                fam = family_of(run.name, family_rule)
                try:
                    history = source.read(run)
                except TrackerPluginError as exc:
                    skipped.append(Skipped(run.ref, exc.problem))
                    continue
                members.append(Member(history, fam, config))
    if not members:
        raise ConfigError("no run could be read for the cross-family backtest")
    results = cross_family_cases(members, processes=processes, cache=cache, progress=progress)
    return cross_family(results), tuple(skipped)
