"""Leave-one-family-out validation: no family is scored by a rule chosen on itself."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np
import pytest

from tracker_plugin.cli import main
from tracker_plugin.core.backtest import PLANS, BacktestCase
from tracker_plugin.core.cross_family import (
    FRACTIONS,
    GAINS,
    LAWS,
    MISS_SCORE,
    QUANTILES,
    TODAY,
    Cut,
    Replay,
    Scored,
    calibration_loss,
    choose,
    cross_family,
    family_of,
    family_rows,
    figures,
    lofo,
    matching_rows,
    point_loss,
)
from tracker_plugin.core.status import Status
from tracker_plugin.errors import ConfigError
from tracker_plugin.report.cross_family import cross_family_text
from tracker_plugin.testing import synthetic_run

# Minutes long: left out of the default run, run with --all (CI runs it).
pytestmark = pytest.mark.slow

# Each family's forecast error (ln predicted/true) under each gain prior: families a and b
# are exact with 0.05, family c only with 0.1.
ERRORS = {"a": {0.025: 0.2, 0.05: 0.0, 0.1: 0.2}, "b": {0.025: 0.2, 0.05: 0.0, 0.1: 0.2},
          "c": {0.025: 0.3, 0.05: 0.3, 0.1: 0.0}}


Results = dict[tuple[str, float], tuple[list[BacktestCase], list[Cut]]]


def _cases(families: Iterable[str], case: Callable[[str, str, str, float, float, str, float], BacktestCase]) -> Results:
    """Two runs per family, every plan, gain, cut, target quantile and law; ``case(run,
    family, law, fraction, quantile, plan, gain)`` makes each case (its truth ``_truth(q)``)."""
    out = {}
    for plan in PLANS:
        for gain in GAINS:
            cases, cuts = [], []
            for fam in families:
                for k in range(2):
                    run = f"{fam}-{k}"
                    for f in FRACTIONS:
                        cuts.append(Cut(run, fam, f, 0.0, 1e8, plan))
                        cases += [case(run, fam, law, f, q, plan, gain) for q in QUANTILES for law in LAWS]
            out[(plan, gain)] = (cases, cuts)
    return out


def _truth(q: float) -> float:
    return 1e9 * (1 + q)


def _results(errors: dict[str, dict[float, float]]) -> Results:
    """Cases of two runs per family whose error depends only on the family and the gain."""
    def case(run: str, fam: str, law: str, f: float, q: float, plan: str, gain: float) -> BacktestCase:
        tokens = _truth(q) * math.exp(errors[fam][gain])
        return BacktestCase(run, law, f, q, 3.0, _truth(q), Status.FORECAST_BEYOND_PLAN, tokens=tokens,
                            draws=(tokens / 2, tokens, tokens * 2), rows=100)

    return _cases(errors, case)

def test_a_family_is_scored_with_the_rule_the_other_families_chose():
    result = cross_family(_results(ERRORS))
    rules = dict(result.rules)
    # c's own optimum is 0.1; held out, it gets what a and b choose
    assert rules["c"].gain == 0.05
    # without a: on b and c the mean of the families' medians is 0.1 for gain 0.1, 0.15 for 0.05
    assert rules["a"].gain == rules["b"].gain == 0.1
    assert result.on_all.gain == 0.05
    # "today" here: a rule with the gain 0.05 that a and b are exact with
    today = dict.fromkeys(result.families, replace(TODAY, gain=0.05))
    rows = {(r.plan, r.family): r for r in family_rows(result.replay, today, rules)}
    # scored with the others' rule, c is 0.3 late, not the 0.0 its own rule would give
    assert rows[("log", "c")].signed_lofo == pytest.approx(0.3, abs=1e-12)
    assert rows[("log", "a")].signed_lofo == pytest.approx(0.2, abs=1e-12)
    assert rows[("log", "a")].signed_today == pytest.approx(0.0, abs=1e-12)


def test_a_familys_own_coverage_is_reported_beside_its_signed_error():
    # c held out gets the gain a and b choose (0.05), at which it misses by 0.9: past its
    # draws' 80% interval (a factor of 2 either way); today's gain (0.1) hits it.
    errors = {**ERRORS, "c": {0.025: 0.3, 0.05: 0.9, 0.1: 0.0}}
    result = cross_family(_results(errors))
    today = dict.fromkeys(result.families, replace(TODAY, gain=0.1))
    rows = {(r.plan, r.family): r for r in family_rows(result.replay, today, dict(result.rules))}
    assert dict(result.rules)["c"].gain == 0.05
    assert rows[("log", "c")].coverage_80_lofo == 0.0
    assert rows[("log", "c")].coverage_80_today == 1.0
    assert rows[("log", "a")].coverage_80_lofo == 1.0
    text = cross_family_text(result)
    (line,) = [x for x in text.splitlines() if x.startswith("  plan log   c ")]
    assert line.split("cov80")[1].split("Brier")[0].strip().endswith("-> 0.00")  # today's rule, then LOFO's


def test_the_figures_of_runs_matching_a_pattern_are_their_own():
    result = cross_family(_results(ERRORS))
    rows = matching_rows(result, r"^c-")
    # c's two runs alone, scored with the rule chosen without c (gain 0.05): 0.3 late each
    given = [r for r in rows if r.plan == "log"]
    assert {(r.fit_fraction, r.target_quantile) for r in given} == {(0.5, 0.8), (0.25, 0.6), (0.25, 0.8)}
    for r in given:
        assert r.cases == 2 and r.signed == pytest.approx(0.3, abs=1e-12) and r.group == "^c-"
    assert matching_rows(result, "no-such-run") == []


def test_choose_sees_only_the_families_it_is_given():
    replay = Replay(_results(ERRORS))
    assert choose(replay, ["c"]).gain == 0.1
    assert choose(replay, ["a", "b"]).gain == 0.05


def _spread(truth: float, rank: float) -> tuple[float, ...]:
    """40 crossings spaced evenly in log, ``truth`` between the ones at ``rank`` (a share)."""
    grid = np.exp(np.linspace(-1.0, 1.0, 40))
    return tuple(truth * grid / grid[int(rank * 40)] * math.exp(-0.02))


def _plan_results(covering: dict[str, str]) -> Results:
    """Cases with the plan inferred whose truth lies at the 15th percentile of the crossings
    of the central plan (``covering[family]`` "central") or of the plausible plans ("plans"),
    the other pool 100 times too late; an error prior worth a billion forecasts of scale
    1e-9, so the crossings are the draws as they are and the coverage is read off them."""
    def case(run: str, fam: str, law: str, f: float, q: float, plan: str, gain: float) -> BacktestCase:
        truth = _truth(q)
        near, late = _spread(truth, 0.15), tuple(100 * truth for _ in range(40))
        central, plans = (near, late) if covering[fam] == "central" else (late, near)
        return BacktestCase(run, law, f, q, 3.0, truth, Status.FORECAST_BEYOND_PLAN, tokens=truth, draws=tuple(sorted(central)),
                            rows=100, plan_source="inferred" if plan == "infer" else "log", raw_draws=central,
                            error_scale=1e-9, error_count=10**9, plan_draws=plans)

    return _cases(covering, case)


def test_a_familys_plan_share_is_chosen_on_the_other_families():
    covering = {"a": "plans", "b": "plans", "c": "central"}
    result = cross_family(_plan_results(covering))
    rules = dict(result.rules)
    # c's own choice is the central plan alone (its 80% intervals cover; with any share of
    # the plausible plans they miss), but held out it gets the plausible plans a and b choose
    assert choose(result.replay, ["c"]).plan_share == 0.0
    assert rules["c"].plan_share == 1.0
    assert rules["a"].plan_share == rules["b"].plan_share == 0.0  # b and c pooled: a tie, the first candidate
    assert result.on_all.plan_share == 1.0
    held = {s.case.run: s for s in lofo(result.replay, "infer", rules)}
    own = {s.case.run: s for s in result.replay.scored(choose(result.replay, ["c"]), "infer", ["c"])}
    assert held["c-0"].covered(0.95) is False
    assert own["c-0"].covered(0.8) is True


def _point_results(sources: dict[str, str]) -> Results:
    """Cases with the plan inferred from a source per family: an ``assumed`` plan's central
    crossings 10 times too late and its plausible plans' at the truth; an ``inferred`` one's
    central at the truth and its plausible plans' 10 times too late. Plan given: exact."""
    def case(run: str, fam: str, law: str, f: float, q: float, plan: str, gain: float) -> BacktestCase:
        truth = _truth(q)
        if plan == "log":
            return BacktestCase(run, law, f, q, 3.0, truth, Status.FORECAST_BEYOND_PLAN, tokens=truth, rows=100, plan_source="log")
        near, late = _spread(truth, 0.5), _spread(10 * truth, 0.5)
        central, plans = (late, near) if sources[fam] == "assumed" else (near, late)
        return BacktestCase(run, law, f, q, 3.0, truth, Status.FORECAST_BEYOND_PLAN, tokens=float(np.median(central)), rows=100,
                            plan_source=sources[fam], raw_draws=central, plan_draws=plans, error_scale=1e-9,
                            error_count=10**9)

    return _cases(sources, case)


def test_the_points_share_from_the_plausible_plans_is_chosen_apart_per_plan_source():
    result = cross_family(_point_results({"a": "assumed", "b": "assumed", "c": "inferred"}))
    # the plausible plans alone for an lr of unknown shape, the central plan for an inferred decay
    # (the crossings are spaced 0.05 apart in log, so the median is within 0.06 of the truth)
    assert (result.on_all.point_unknown, result.on_all.point_inferred) == (1.0, 0.0)
    scored = {s.case.run: s for s in result.replay.scored(result.on_all, "infer", result.families)}
    assert scored["a-0"].error == pytest.approx(0.0, abs=0.06) and scored["c-0"].error == pytest.approx(0.0, abs=0.06)
    # the central plan's point for the unknown shape would be 10 times too late
    late = result.replay.scored(replace(result.on_all, point_unknown=0.0), "infer", ["a"])
    assert late[0].error == pytest.approx(math.log(10), abs=0.06)


def test_cuts_with_no_inner_forecast_weigh_as_a_group_in_the_calibration_loss():
    """Two runs with a track record whose intervals hold the truth at every level, two with
    none whose draws are 100 times too late: the loss is the mean of the two groups', not
    of the four cases pooled (where half hold at every level and the misses nearly cancel)."""
    def case(run: str, fam: str, law: str, f: float, q: float, plan: str, gain: float) -> BacktestCase:
        truth = _truth(q)
        draws, count = (_spread(truth, 0.5), 10**9) if fam == "a" else (tuple(100 * truth for _ in range(40)), 0)
        return BacktestCase(run, law, f, q, 3.0, truth, Status.FORECAST_BEYOND_PLAN, tokens=truth, rows=100, plan_source="log",
                            raw_draws=draws, draws=tuple(sorted(draws)), error_scale=1e-9, error_count=count)

    replay = Replay(_cases(["a", "b"], case))
    rule = replace(TODAY, inflation=1.0, unknown_inflation=1.0, error_scale=1e-9, error_weight=1.0)
    covered = [(1 - level) ** 2 for level in (0.5, 0.8, 0.95)]  # every level held: the excesses
    missed = [3.0 * level**2 for level in (0.5, 0.8, 0.95)]  # none held, a shortfall weighing 3x
    assert calibration_loss(replay, rule, ["a", "b"]) == pytest.approx(np.mean(covered + missed), rel=1e-9)


def test_one_family_is_refused():
    with pytest.raises(ConfigError, match="at least two families; found a"):
        cross_family(_results({"a": ERRORS["a"]}))


def test_family_rule():
    assert family_of("olmo-ladder-190M-1xC") == "olmo"
    assert family_of("run-7-gpt2", r"-(gpt\d)") == "gpt2"
    with pytest.raises(ConfigError, match="needs a group"):
        family_of("a-1", "a")
    with pytest.raises(ConfigError, match="finds no family in the run name 'b_1'"):
        family_of("b_1", r"^(a)-")


@pytest.fixture(scope="module")
def three_families(tmp_path_factory):
    """One short run in each of three families, with different schedules and annealing gains."""
    folder = tmp_path_factory.mktemp("families")
    shapes = {"alpha": ("wsd:warmup=40,total=800,decay=0.3", 0.05), "beta": ("cosine:warmup=40,total=800,final=0.1", 0.1),
              "gamma": ("linear:warmup=40,total=800,final=0.0", 0.02)}
    for k, (name, (spec, gain)) in enumerate(shapes.items()):
        frame = synthetic_run(800, batch=131072.0, log_every=4, lr_schedule=spec, anneal_gain=gain, noise=0.01, seed=k)
        frame.to_csv(folder / f"{name}-run.csv", index=False)
    return folder


def test_the_cross_family_command(capsys, three_families, tmp_path):
    cache = tmp_path / "cases.pkl"
    argv = ["backtest", str(three_families), "--cross-family", "--ema-token-window", "2e7", "--cases-cache", str(cache)]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["family"] for f in doc["families"]] == ["alpha", "beta", "gamma"]
    assert [r["family"] for r in doc["rules"]["without"]] == ["alpha", "beta", "gamma"]
    assert {r["rules"] for r in doc["figures"]} == {"before", "today", "LOFO"}
    assert cache.exists()
    # the table reads the same cases from the cache
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "3 runs (alpha 1, beta 1, gamma 1)" in out
    assert "Rules chosen with each family held out:" in out and "without gamma" in out


def test_cross_family_options_are_checked(capsys, three_families):
    code = main(["backtest", str(three_families), "--cross-family", "--fit-fractions", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and "--fit-fractions does not go with --cross-family" in err
    code = main(["backtest", str(three_families), "--cross-family", "--family", "([a-z]"])
    err = capsys.readouterr().err
    assert code == 2 and "is not a regular expression" in err and len(err.strip().splitlines()) == 1


def test_a_plan_given_to_a_run_without_lr_opens_the_gate_as_the_forecast_does():
    """A run that logs no lr: with its plan given, the decay it has shed by the cut comes
    from the plan (the forecast's own gate reads the plan too); inferred, nothing is seen."""
    import tracker_plugin as tp
    from tracker_plugin.core.analysis import AnalysisConfig
    from tracker_plugin.core.cross_family import run_cases
    from tracker_plugin.plan.schedule import LrSchedule

    spec = "wsd:warmup=20,total=600,decay=0.8,final=0"  # the decay starts at step 120
    frame = synthetic_run(600, batch=131072.0, log_every=4, lr_schedule=spec, anneal_gain=0.05, noise=0.01, seed=3)
    history = tp.build_history(frame.drop(columns=["lr"]), run="no-lr")
    config = AnalysisConfig(targets=(1.0,), ema_token_window=2e7)
    plan = LrSchedule.parse_spec(spec)
    cases, cuts = run_cases(history, "x", config, "log", 0.05, given=plan)
    by_cut = {c.fraction: c.seen_decay for c in cuts}
    # at f=0.5 (step ~300) the plan has shed (300 - 120) / 480 of its peak
    assert by_cut[0.5] == pytest.approx(180 / 480, abs=0.02)
    assert {c.plan_source for c in cases if c.plan_source} == {"spec"}
    _, inferred = run_cases(history, "x", config, "infer", 0.05, given=plan)
    assert all(c.seen_decay == 0.0 for c in inferred)


def test_a_reached_target_forecast_never_to_be_is_a_counted_miss():
    """A forecast of never for a target the run reached is the worst miss, not a case
    dropped from the figures (which would reward a rule for giving up on hard cases)."""
    def scored(tokens: float | None, status: Status) -> Scored:
        case = BacktestCase("r", LAWS[0], 0.5, 0.8, 3.0, 1e9, status, tokens=tokens, rows=100)
        draws = np.array([] if tokens is None else [tokens / 2, tokens, tokens * 2])
        return Scored(case, "a", tokens, draws, False, None)

    hits = [scored(1e9 * math.exp(e), Status.FORECAST_BEYOND_PLAN) for e in (0.1, -0.2, 0.3)]
    never = scored(None, Status.UNREACHABLE)
    failed = scored(None, Status.NOT_ENOUGH_DATA)
    assert never.error == math.inf and never.covered(0.8) is False
    assert failed.error is None and failed.covered(0.8) is None
    x = figures([*hits, never, failed])
    assert x["never"] == 1 and x["failed"] == 1 and x["n"] == 5
    # |ln| 0.1, 0.2, 0.3, inf: the median between 0.2 and 0.3, the p90 among the misses
    assert x["median"] == pytest.approx(0.25, abs=1e-12)
    assert x["p90"] == math.inf
    assert x["signed"] == pytest.approx((0.1 - 0.2 + 0.3) / 3, abs=1e-12)
    assert x["cov80%"] == pytest.approx(3 / 4, abs=1e-12)


def test_the_point_loss_holds_a_rule_to_its_tail():
    """Per family, plan and setting the mean of the median and the p90 |ln|: run 0 exact, run
    1 forecast never (a miss scored MISS_SCORE). The median alone, MISS_SCORE / 2, would not
    tell this rule from one that is half as far off on both runs."""
    def case(run: str, fam: str, law: str, f: float, q: float, plan: str, gain: float) -> BacktestCase:
        if run.endswith("-1"):
            return BacktestCase(run, law, f, q, 3.0, _truth(q), Status.UNREACHABLE, rows=100)
        return BacktestCase(run, law, f, q, 3.0, _truth(q), Status.FORECAST_BEYOND_PLAN, tokens=_truth(q), rows=100,
                            draws=(_truth(q),))

    replay = Replay(_cases(["a", "b"], case))
    # |ln| 0 and MISS_SCORE: median MISS_SCORE / 2, p90 0.9 MISS_SCORE
    assert point_loss(replay, TODAY, ["a", "b"]) == pytest.approx(0.7 * MISS_SCORE, rel=1e-12)


def test_held_out_rows_of_a_visible_familys_name_say_they_are_held_out():
    # later runs of visible family a, scored as held out: their rows must not read as a's own
    result = cross_family(_results(ERRORS), held_out_results=_results({"a": ERRORS["a"]}))
    visible, held = cross_family_text(result).split("\nHeld-out runs, scored only")
    family_lines = [line for line in held.splitlines() if line.startswith("  plan ") and " Brier " in line]
    assert family_lines and all("(held out)" in line or "all held out" in line for line in family_lines)
    assert any(" a (held out) " in line for line in family_lines)
    assert "held out)" not in visible and "all held out" not in visible
