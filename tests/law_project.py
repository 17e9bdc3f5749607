"""A project of real runs that share one law, for the tests of ``annotate`` over a project.

Four runs of the multi-power law paper's 25M model at peak lr 3e-4 for 24,000 steps
(``tests/data/mpl-25M-*.csv``): a constant, a WSD and a WSD with linear decay finished,
and the cosine run cut at step 9,712 (40% of its plan) as the one still running. The runs
log no batch size, so they are read on steps (``--batch-size 1``) with a 200-step EMA.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from tracker_plugin.core.analysis import Analysis, AnalysisConfig, run_analysis
from tracker_plugin.core.project_law import RunEvidence, descriptors_from_history, fit_project
from tracker_plugin.frame.history import History

DATA = Path(__file__).parent / "data"
TARGET = 3.4  # the running run's smoothed loss reaches it at about 55% of its plan
ARGS = ("-t", f"{TARGET}", "--batch-size", "1", "--ema-token-window", "200")
CONFIG = AnalysisConfig(targets=(TARGET,), ema_token_window=200.0)
RUNNING_SPEC = "cosine:warmup=2160,total=24000,final=0.1"
RUNNING_ROWS = 60  # steps 2,160 to 9,712
FINISHED = {"constant": "mpl-25M-constant-24000", "wsd": "mpl-25M-wsd-20000-24000",
            "wsdld": "mpl-25M-wsdld-20000-24000"}
RUNNING = ("cosine", "mpl-25M-cosine-24000")


def frame(stem: str, rows: int | None = None) -> pd.DataFrame:
    """The run's rows (its first ``rows`` where given): ``step``, ``lr``, ``train_loss``."""
    found = pd.read_csv(DATA / f"{stem}.csv")
    return found if rows is None else found.iloc[:rows]


def params(stem: str) -> dict[str, object]:
    """What the run's trainer would log of its plan: its length, and the shape where it is
    running (a finished run's lr is in its log)."""
    if stem == RUNNING[1]:
        return {"lr_schedule": RUNNING_SPEC, "learning_rate": 3e-4}
    return {"max_steps": 24000, "learning_rate": 3e-4}


def by_law(history: History, evidences: list[RunEvidence], config: AnalysisConfig = CONFIG) -> Analysis:
    """The running run forecast by the law of ``evidences``, as the jobs should make it."""
    law = fit_project(evidences, run=history.run, descriptors=descriptors_from_history(history))
    assert law.shared, law.describe()
    return run_analysis(history, replace(config, project_law=law))


def steps_of(analysis: Analysis) -> float:
    return float(analysis.targets[0].step)


def truth() -> float:
    """The step where the whole cosine run's smoothed loss reached the target."""
    import tracker_plugin as tp

    whole = tp.analyze(tp.load_csv(DATA / f"{RUNNING[1]}.csv", batch_size=1.0), [TARGET], ema_token_window=200.0)
    return float(whole.targets[0].step)


def assert_law_answer(annotated_step: float, law: Analysis, alone: Analysis) -> None:
    """The annotated step is the law's (to the key's 4 digits), which moved the answer off
    the run alone's and nearer the truth."""
    assert annotated_step == pytest.approx(steps_of(law), rel=1e-3)
    moved = math.log(steps_of(law) / steps_of(alone))
    assert abs(moved) > 0.01, (steps_of(law), steps_of(alone))
    true = truth()
    assert abs(math.log(steps_of(law) / true)) < abs(math.log(steps_of(alone) / true)), (steps_of(law), steps_of(alone), true)
