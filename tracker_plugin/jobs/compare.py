"""Compare: analyse every run the run strings name, without writing, and line them up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.compare import Compared, ComparisonRow, compare
from tracker_plugin.jobs.runner import process_runs
from tracker_plugin.jobs.runs import opened_runs
from tracker_plugin.trackers import SourceOptions

__all__ = ["Comparison", "compare_runs"]


@dataclass(frozen=True)
class Comparison:
    """The runs compared (with their analyses, or why they have none) and the rows."""

    runs: tuple[Compared, ...]
    rows: tuple[ComparisonRow, ...]

    @property
    def failed(self) -> bool:
        """Whether some run could not be analysed."""
        return any(run.analysis is None for run in self.runs)


def compare_runs(
    specs: Sequence[str], options: SourceOptions, config: AnalysisConfig, sort: str = "tokens"
) -> Comparison:
    """Every run's analysis, and per target the runs sorted by tokens (or hours) to reach it."""
    outcomes = []
    with opened_runs(specs, options) as opened:
        for source, runs in opened:
            outcomes += process_runs(source, runs, config, write=False, workers=options.workers)
    compared = tuple(Compared(o.run.name, o.run.ref, o.analysis, o.error) for o in outcomes)
    return Comparison(compared, tuple(compare(compared, config.targets, sort)))
