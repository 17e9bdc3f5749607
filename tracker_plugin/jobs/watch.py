"""Watch: annotate runs pass after pass until every one has finished."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.jobs.annotate import annotate_runs
from tracker_plugin.jobs.runner import Outcome
from tracker_plugin.trackers import SourceOptions

__all__ = ["Pass", "watch_runs"]


@dataclass(frozen=True)
class Pass:
    """One annotation pass of a watch: its number (from 1) and what it did to each run."""

    number: int
    outcomes: tuple[Outcome, ...]

    @property
    def running(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.run.finished]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def final(self) -> bool:
        """Every run has finished and carries its final annotation: nothing left to watch."""
        return not self.running and not self.failed

    def summary(self) -> str:
        """``2 annotated, 1 unchanged; 1 still running``."""
        counts = ", ".join(f"{n} {action}" for action, n in Counter(o.action for o in self.outcomes).items())
        return f"{counts or 'no runs'}; {len(self.running)} still running"


def watch_runs(
    specs: Sequence[str],
    options: SourceOptions,
    config: AnalysisConfig,
    *,
    every: float,
    max_cycles: int | None = None,
    sleep: Callable[[float], None] | None = None,
    executor: Executor | None = None,
    plot: bool = True,
    series: bool = True,
) -> Iterator[Pass]:
    """Annotate every ``every`` minutes; yield each pass as it ends.

    Stops after the pass where :attr:`Pass.final` holds, or after ``max_cycles`` passes.
    Each pass reconnects and lists the runs again. ``sleep`` waits between passes
    (default: :func:`time.sleep`, looked up when called). ``executor`` runs every pass's
    runs (see :func:`~tracker_plugin.jobs.runner.process_runs`); ``plot`` as
    :func:`~tracker_plugin.jobs.annotate.annotate_runs` takes it.
    """
    # After the first pass, list every run and keep the ones watched so far: a run that
    # was picked while running must be seen again once it has finished.
    later = replace(options, states=())
    watched: frozenset[str] = frozenset()
    number = 0
    while True:
        number += 1
        if number == 1:
            outcomes = annotate_runs(specs, options, config, executor=executor, plot=plot, series=series)
        else:
            outcomes = annotate_runs(specs, later, config, keep=watched, states=options.states, executor=executor,
                                     plot=plot, series=series)
        watched |= {o.run.ref for o in outcomes}
        done = Pass(number, tuple(outcomes))
        yield done
        if done.final or (max_cycles is not None and number >= max_cycles):
            return
        (sleep or time.sleep)(every * 60)
