"""The project's law: a law pooled over a configuration's finished runs, and a run joining it.

Runs with a known answer: every synthetic run follows one multi-power law
(``tracker_plugin.testing.synthetic.multi_power_run``) on its own lr schedule, so a law
fitted on some of them must forecast the others' curves.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.core.models import FitFailure
from tracker_plugin.core.project_law import (
    LawRules,
    RunEvidence,
    Units,
    descriptors_from_params,
    fit_pooled,
    fit_project,
    forecast_plan,
    forecast_run,
    law_curve,
    log_of_evidence,
    log_of_history,
    run_evidence,
)
from tracker_plugin.core.project_law.loso import evidence_member
from tracker_plugin.core.status import Status
from tracker_plugin.frame.history import build_history
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.report.render import to_json, to_text
from tracker_plugin.testing.synthetic import MultiPowerLaw, multi_power_run

LAW = MultiPowerLaw()
BATCH = 262_144.0
WINDOW = 20 * BATCH  # twenty steps
SPECS = {
    "cosine-3000": "cosine:warmup=100,total=3000,final=0.1",
    "constant-3000": "constant:warmup=100,total=3000",
    "wsd-3000": "wsd:warmup=100,total=3000,decay=600,final=0",
    "cosine-2000": "cosine:warmup=100,total=2000,final=0.1",
    "wsd-4000": "wsd:warmup=100,total=4000,decay=800,final=0",
}
FAST = LawRules(laws=("lr-annealing",), shifts=(False,))


def _run(name: str, law: MultiPowerLaw = LAW, seed: int = 0, offset: float = 0.0):
    plan = LrSchedule.parse_spec(SPECS[name])
    total = int(plan.total_steps or 3000)
    frame = multi_power_run(plan, total, law, batch=BATCH, noise=0.005, log_every=10, seed=seed)
    frame["train_loss"] += offset
    return build_history(frame, run=name), plan


def _evidence(name: str, law: MultiPowerLaw = LAW, **kw) -> RunEvidence:
    history, plan = _run(name, law)
    return run_evidence(history, plan, ema_window=WINDOW, **kw)


@pytest.fixture(scope="module")
def siblings() -> list[RunEvidence]:
    return [_evidence(name) for name in ("cosine-3000", "constant-3000", "wsd-3000", "cosine-2000")]


def _truth(history, target: float) -> float:
    from tracker_plugin.core.analysis import _crossing
    from tracker_plugin.core.smoothing import token_window_ema

    smoothed = token_window_ema(history.loss, history.step, history.batch, WINDOW)
    found = _crossing(history, smoothed, target)
    assert found is not None
    return found[1]


def test_evidence_round_trips_as_json_and_is_small():
    evidence = _evidence("wsd-3000", descriptors={"layers": 12.0, "dataset": "fineweb"}, own=((0.1, 0.8, 0.05),))
    text = json.dumps(evidence.to_dict())
    back = RunEvidence.from_dict(json.loads(text))
    assert back.run == evidence.run and back.descriptors == evidence.descriptors and back.own == evidence.own
    assert np.allclose(np.array(back.bins), np.array(evidence.bins), rtol=1e-7)
    assert np.allclose(np.array(back.plan), np.array(evidence.plan), rtol=1e-7)
    assert len(text) < 16_000  # a few kilobytes: kept in the run's own tag
    # The WSD plan's drop is kept by its knots: the lr is at its peak until the decay, 0 at the end.
    plan = back.schedule()
    assert plan.at(2000) == pytest.approx(1.0) and plan.at(2990) == pytest.approx(10 / 600, rel=1e-3)


def test_evidence_of_another_version_is_refused():
    data = _evidence("wsd-3000").to_dict()
    with pytest.raises(Exception, match="version"):
        RunEvidence.from_dict({**data, "version": 0})


def test_the_pooled_law_forecasts_a_schedule_it_has_not_seen(siblings):
    """One law fitted on four schedules forecasts a fifth's whole curve before its first row."""
    units = Units(BATCH)
    pooled = fit_pooled([evidence_member(e, units) for e in siblings], "multi-power", units)
    assert not isinstance(pooled, FitFailure)
    history, plan = _run("wsd-4000")
    log = log_of_evidence(run_evidence(history, plan, ema_window=WINDOW), 0.0)
    curve = law_curve(pooled, log)
    for q in (0.6, 0.8, 0.95):
        target = float(np.interp(q * history.last_tokens, history.tokens, history.loss))
        truth = _truth(history, target + 0.01)
        found = curve.crossing(target + 0.01)
        assert found is not None and abs(math.log(found / truth)) < 0.05, (q, found, truth)


def test_a_project_forecasts_a_run_before_it_starts(siblings):
    project = fit_project(siblings, rules=FAST)
    assert project.shared, project.describe()
    history, plan = _run("wsd-4000")
    target = float(np.interp(0.8 * history.last_tokens, history.tokens, history.loss)) + 0.01
    found = forecast_plan(project, "wsd-4000", plan, [target, 1.0], batch=BATCH, ema_window=WINDOW)
    near, far = found.targets
    truth = _truth(history, target)
    assert near.tokens is not None and abs(math.log(near.tokens / truth)) < 0.06
    assert near.interval is not None and near.interval[0] < near.tokens < near.interval[1]
    assert near.p_within_plan is not None and near.p_within_plan > 0.5
    assert far.tokens is None and far.p_within_plan is not None and far.p_within_plan < 0.05  # a loss of 1.0: never
    end = found.plan_end
    assert end is not None and end.step == 4000 and end.loss_interval is not None
    assert end.loss_interval[0] < end.loss < end.loss_interval[1]
    assert abs(end.loss - float(history.loss[-5:].mean())) < 0.03


def test_a_run_joins_the_fit_and_its_level_comes_from_its_rows(siblings):
    """A run sitting 0.05 above its siblings' law: with a level prior its level is read
    from its first rows (shrunk by how few they are), without one it is the configuration's."""
    project = fit_project(siblings, rules=replace(FAST, level_floor=0.05, join_weight=0.0))
    history, plan = _run("wsd-4000", offset=0.05, seed=3)
    rows = int(np.searchsorted(history.tokens, 0.3 * history.last_tokens))
    log = log_of_history(history.head(rows), plan, ema_window=WINDOW)
    early = log_of_history(history.head(4), plan, ema_window=WINDOW)
    from tracker_plugin.core.project_law import run_level

    assert project.pooled is not None
    level = run_level(project.pooled, log, floor=0.05)
    assert 0.03 < level < 0.06
    assert abs(run_level(project.pooled, early, floor=0.05)) < level  # fewer rows: shrunk more
    assert run_level(project.pooled, log, floor=0.0) == 0.0


def test_configuration_descriptors_and_their_differences():
    described = descriptors_from_params({"model": {"n_layer": 12, "n_embd": 768}, "block_size": "1024",
                                         "optimizer": "AdamW", "learning_rate": "6e-4"})
    assert described == {"layers": 12.0, "width": 768.0, "seq_len": 1024.0, "optimizer": "adamw", "peak_lr": 6e-4}
    evidences = [_evidence("cosine-3000", descriptors={"layers": 12.0}), _evidence("constant-3000", descriptors={"layers": 24.0}),
                 _evidence("wsd-3000", descriptors={"layers": 24.0})]
    project = fit_project(evidences, descriptors={"layers": 12.0}, rules=FAST)
    left = dict(project.left_out)
    assert "layers is 24" in left["constant-3000"]
    assert not project.shared and "confirmed on at least 2" in (project.reason or "")


def test_runs_of_different_recipes_share_no_law_and_the_report_says_why(siblings):
    """Runs whose losses follow laws of another shape (a different exponent and floor) are
    left out one by one, and with too few left the project has no shared law."""
    other = [_evidence(name, replace(LAW, alpha=0.15 + 0.3 * k, l0=2.0 + 0.4 * k))
             for k, name in enumerate(("cosine-3000", "constant-3000", "wsd-3000"))]
    own = ((0.1, 0.6, 0.01), (0.1, 0.8, 0.01), (0.25, 0.6, 0.01), (0.25, 0.8, 0.01), (0.5, 0.6, 0.01), (0.5, 0.8, 0.01))
    other = [replace(e, own=own) for e in other]
    project = fit_project(other, rules=FAST)
    assert not project.shared
    assert "do not share a law" in (project.reason or "")
    assert any("own log 0.010" in why for _, why in project.left_out)


def test_a_project_round_trips_as_json(siblings):
    project = fit_project(siblings, rules=FAST)
    back = type(project).from_dict(json.loads(json.dumps(project.to_dict())))
    assert back.siblings == project.siblings and back.rules == project.rules and back.errors == project.errors
    history, plan = _run("wsd-4000")
    log = log_of_history(history.head(len(history) // 4), plan, ema_window=WINDOW)
    a, b = forecast_run(project, log, [3.0]), forecast_run(back, log, [3.0])
    assert a.targets[0].tokens == pytest.approx(b.targets[0].tokens, rel=1e-6)


def test_a_run_is_never_its_own_sibling(siblings):
    project = fit_project(siblings, run="wsd-3000", rules=FAST)
    assert "wsd-3000" not in project.siblings
    assert dict(project.left_out)["wsd-3000"] == "the forecast run itself"


def test_the_analysis_with_a_project_law_gives_every_running_run_a_plan_end(siblings):
    project = fit_project(siblings, rules=FAST)
    history, plan = _run("wsd-4000", seed=5)
    for share in (0.01, 0.3):
        rows = max(int(share * len(history)), 2)
        config = AnalysisConfig(targets=(3.0, 1.0), ema_token_window=WINDOW, lr_schedule=plan, project_law=project)
        analysis = run_analysis(history.head(rows), config)
        assert analysis.plan_end is not None and analysis.plan_end.source == "project law"
        assert analysis.project is not None
        near, far = analysis.targets
        assert near.status in (Status.FORECAST, Status.REACHED)
        assert far.status == Status.UNLIKELY and far.p_reach_within_plan is not None
        doc = to_json(analysis)
        assert doc["plan_end"]["loss"] == pytest.approx(analysis.plan_end.loss)
        assert doc["project_law"]["shared"] is True and len(doc["project_law"]["siblings"]) == 4
        assert "NOT REACHED" not in to_text(analysis)


def test_a_running_run_alone_gets_a_plan_end_and_no_early_no():
    """No siblings: the run's own law gives the plan's end; a target past it is a chance."""
    history, plan = _run("cosine-2000", seed=7)
    rows = len(history) // 2
    config = AnalysisConfig(targets=(1.0,), ema_token_window=WINDOW, lr_schedule=plan)
    analysis = run_analysis(history.head(rows), config)
    assert analysis.plan_end is not None and analysis.plan_end.source == "this run's law"
    low, high = analysis.plan_end.loss_interval or (math.nan, math.nan)
    assert low <= analysis.plan_end.loss <= high
    (result,) = analysis.targets
    assert result.status == Status.UNLIKELY and result.p_reach_within_plan is not None
    finished = run_analysis(history, config)
    assert finished.targets[0].status == Status.NOT_REACHED
    assert finished.plan_end is not None and finished.plan_end.source == "logged"
