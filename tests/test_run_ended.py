"""No forecast where none is asked: a run whose log reached its plan's end fits no law for
its targets, and its answers are those the fitted law gave.

The law is fitted all the same where a forecast is asked for: a run still going, a
stability sweep, a backtest (``replays``, which scores the law past the plan's end). The
answers are compared field by field with the analysis that fits the law (``replays``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tracker_plugin as tp
from tracker_plugin.core import analysis_forecasts
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.models import LawFit
from tracker_plugin.core.status import Status

OLMO = Path(__file__).resolve().parent / "data" / "olmo-ladder-370M-5xC.csv"
# What an answer is: the fields a user reads, the keys written back and the JSON's answer.
ANSWER = ("target", "status", "tokens", "step", "tokens_interval", "step_interval", "p_reach_within_plan",
          "best_loss", "best_step", "end_step", "end_tokens", "run_finished", "extrapolation_factor")


@pytest.fixture(scope="module")
def olmo() -> tp.History:
    """A finished OLMo ladder run: its logged lr shows a cosine to 0.1x that the log reaches."""
    return tp.load_csv(OLMO, columns=tp.Columns().with_overrides(loss="val_loss"))


def answers(analysis: tp.Analysis) -> list[tuple[object, ...]]:
    return [tuple(getattr(t, name) for name in ANSWER) for t in analysis.targets]


def test_a_finished_run_fits_no_law_and_answers_as_the_fitted_law_did(olmo, monkeypatch):
    config = AnalysisConfig(targets=(3.3, 3.1, 2.9))
    fitted = run_analysis(olmo, config, replays=True)
    assert isinstance(fitted.fit, LawFit)  # the comparison is with a fitted law's answers
    assert [t.status for t in fitted.targets] == [Status.REACHED, Status.NOT_REACHED, Status.NOT_REACHED]

    def no_fit(*args, **kwargs):
        raise AssertionError("a law was chosen for a run that has ended")

    monkeypatch.setattr(analysis_forecasts, "choose_law", no_fit)
    ended = run_analysis(olmo, config)
    assert ended.fit is None and ended.selection is None
    assert answers(ended) == answers(fitted)
    assert ended.plan == fitted.plan  # the report still says which plan the run ended on
    assert [t.note for t in ended.targets][1].startswith("the run ended its plan at step")


def test_a_run_still_going_is_forecast(olmo):
    running = olmo.head(len(olmo) * 2 // 5)  # 3.3 is reached at about half the run
    analysis = run_analysis(running, AnalysisConfig(targets=(3.3,)))
    assert isinstance(analysis.fit, LawFit)
    assert analysis.targets[0].status == Status.FORECAST and analysis.targets[0].tokens is not None


def test_a_run_whose_targets_are_all_reached_fits_no_law(olmo):
    assert run_analysis(olmo.head(len(olmo) // 2), AnalysisConfig(targets=(3.6,))).fit is None


@pytest.mark.slow
def test_a_stability_sweep_still_fits_the_law_of_a_finished_run(olmo):
    analysis = run_analysis(olmo, AnalysisConfig(targets=(3.1,), stability_sweep=True, sweep_step=5000,
                                                 sweep_min_window=5000))
    assert isinstance(analysis.fit, LawFit)
    assert analysis.targets[0].status == Status.NOT_REACHED and analysis.targets[0].sweep is not None
