"""The planned lr read from a live PyTorch scheduler (tracker_plugin.plan.scheduler).

The must-have: the plan read from the live scheduler equals the lr the scheduler then
really produced at every later step. Each test reads the plan, checks that the read left
the scheduler and its optimizer as they were, then really runs ``optimizer.step();
scheduler.step()`` to the end and compares ``optimizer.param_groups[0]["lr"]`` at every step
k (the lr optimizer step k uses) with ``plan.schedule.at(k)``: to 1e-9 relative where every
step is kept, to 1e-6 relative (the module's TOLERANCE) where the plan is thinned to
``max_knots`` knots.
"""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.optim import lr_scheduler as sched  # noqa: E402

from tracker_plugin.errors import ConfigError  # noqa: E402
from tracker_plugin.plan.scheduler import TOLERANCE, ScheduledPlan, plan_from_scheduler  # noqa: E402

TOTAL = 1_000
WARMUP = 100
LR = 3e-4
DENSE = 1e-9  # every step kept: the plan is the scheduler's own numbers


def _optimizer(kind: str = "adamw", groups: int = 1) -> Any:
    """An optimizer over a tiny model; with two groups, the second (the bias) at a tenth of the lr."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    params: Any = model.parameters()
    if groups == 2:
        params = [{"params": [model.weight]}, {"params": [model.bias], "lr": LR / 10}]
    if kind == "sgd":
        return torch.optim.SGD(params, lr=LR, momentum=0.9)
    return torch.optim.AdamW(params, lr=LR)


def _state(scheduler: Any, optimizer: Any) -> Any:
    """What a read must leave as it was: the scheduler's (and its parts') step and last lr,
    every hyperparameter of every param group, and the optimizer's state."""
    parts = getattr(scheduler, "_schedulers", [])
    return (
        getattr(scheduler, "last_epoch", None),
        getattr(scheduler, "_step_count", None),
        list(scheduler.get_last_lr()),
        [(part.last_epoch, list(part.get_last_lr())) for part in parts],
        [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups],
        [id(p) for group in optimizer.param_groups for p in group["params"]],
        dict(optimizer.state),
    )


def _read(scheduler: Any, optimizer: Any, total: int = TOTAL, **kwargs: Any) -> ScheduledPlan:
    """The plan, checked to have left the scheduler and the optimizer untouched, the
    warning filters as they were, and to have warned of nothing."""
    before = _state(scheduler, optimizer)
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = plan_from_scheduler(scheduler, total, **kwargs)
    assert not caught, [str(w.message) for w in caught]
    assert list(warnings.filters) == filters
    assert _state(scheduler, optimizer) == before
    return plan


def _run(scheduler: Any, optimizer: Any, until: int) -> list[float]:
    """Really train: the lr optimizer step k uses, for k from the scheduler's step to ``until``."""
    lrs = []
    for step in range(_at(scheduler), until + 1):
        lrs.append(float(optimizer.param_groups[0]["lr"]))
        if step < until:
            optimizer.step()
            scheduler.step()
    return lrs


def _at(scheduler: Any) -> int:
    position = getattr(scheduler, "last_epoch", None)
    return int(position if position is not None else scheduler._schedulers[0].last_epoch)


def _assert_matches(plan: ScheduledPlan, steps: np.ndarray, real: list[float], rel: float) -> None:
    assert plan.schedule is not None, plan.how
    planned = np.asarray(plan.schedule.at(steps), float)
    real_lr = np.asarray(real, float)
    off = np.abs(planned - real_lr) > rel * np.abs(real_lr) + 1e-300
    if off.any():
        k = int(np.flatnonzero(off)[0])
        pytest.fail(f"step {steps[k]}: {planned[k]!r} planned, {real_lr[k]!r} real ({plan.how})")


def _check_read_at_start(scheduler: Any, optimizer: Any, total: int = TOTAL) -> ScheduledPlan:
    plan = _read(scheduler, optimizer, total)
    assert plan.schedule is not None, plan.how
    assert plan.schedule.steps[0] == 0 and plan.schedule.steps[-1] == total
    assert len(plan.schedule.steps) == total + 1  # every step kept under max_knots
    assert plan.schedule.source == "scheduler" and plan.schedule.total_steps == total
    _assert_matches(plan, np.arange(total + 1), _run(scheduler, optimizer, total), DENSE)
    return plan


# --- Hugging Face's schedules: LambdaLR, evaluated from their formula ---------------------------


def _hf(name: str, **specific: Any) -> Callable[[Any], Any]:
    def build(optimizer: Any) -> Any:
        from transformers import get_scheduler

        return get_scheduler(name, optimizer, num_warmup_steps=WARMUP, num_training_steps=TOTAL,
                             scheduler_specific_kwargs=specific or None)
    return build


def _wsd(optimizer: Any) -> Any:
    from transformers import get_wsd_schedule

    return get_wsd_schedule(optimizer, num_warmup_steps=WARMUP, num_decay_steps=200, num_training_steps=TOTAL,
                            decay_type="1-sqrt", min_lr_ratio=0.1)


HF_SCHEDULES = {
    "linear": _hf("linear"),
    "cosine": _hf("cosine"),
    "cosine_with_restarts": _hf("cosine_with_restarts", num_cycles=3),
    "constant_with_warmup": _hf("constant_with_warmup"),
    "warmup_stable_decay": _hf("warmup_stable_decay", num_decay_steps=300),
    "get_wsd_schedule": _wsd,
    "polynomial": _hf("polynomial", power=2.0, lr_end=1e-6),
    "cosine_with_min_lr": _hf("cosine_with_min_lr", min_lr_rate=0.1),
    "constant": _hf("constant"),
    "inverse_sqrt": _hf("inverse_sqrt"),
}


@pytest.mark.parametrize("name", list(HF_SCHEDULES))
def test_hf_schedules_plan_what_the_scheduler_then_does(name):
    pytest.importorskip("transformers")
    optimizer = _optimizer()
    plan = _check_read_at_start(HF_SCHEDULES[name](optimizer), optimizer)
    assert plan.how.startswith("read from the scheduler (LambdaLR(") and f"{TOTAL:,} steps" in plan.how


def test_a_plain_lambda_lr_is_planned_from_its_formula():
    optimizer = _optimizer("sgd")
    scheduler = sched.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / 50) * 0.5 ** (k // 300))
    plan = _check_read_at_start(scheduler, optimizer)
    assert plan.how == f"read from the scheduler (LambdaLR, {TOTAL:,} steps)"


# --- other schedulers: a copy, stepped --------------------------------------------------------


def _one_cycle(optimizer: Any) -> Any:
    # As a Lightning module configures it (interval "step"), momentum cycled through AdamW's betas.
    return sched.OneCycleLR(optimizer, max_lr=1e-3, total_steps=TOTAL, pct_start=0.25, cycle_momentum=True)


def _sequential(optimizer: Any, eta_min: float = LR / 100) -> Any:
    warmup = sched.LinearLR(optimizer, start_factor=0.01, total_iters=WARMUP)
    decay = sched.CosineAnnealingLR(optimizer, T_max=TOTAL - WARMUP, eta_min=eta_min)
    return sched.SequentialLR(optimizer, [warmup, decay], milestones=[WARMUP])


def _chained(optimizer: Any) -> Any:
    return sched.ChainedScheduler([sched.ConstantLR(optimizer, factor=0.2, total_iters=50),
                                   sched.ExponentialLR(optimizer, gamma=0.999)])


COPIED = {
    "OneCycleLR": _one_cycle,
    "SequentialLR": _sequential,
    "ChainedScheduler": _chained,
    "CosineAnnealingLR": lambda o: sched.CosineAnnealingLR(o, T_max=TOTAL),
    "StepLR": lambda o: sched.StepLR(o, step_size=150, gamma=0.5),
    "LinearLR": lambda o: sched.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=TOTAL),
    "PolynomialLR": lambda o: sched.PolynomialLR(o, total_iters=TOTAL, power=1.5),
    "CosineAnnealingWarmRestarts": lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=100, T_mult=2),
    "MultiplicativeLR": lambda o: sched.MultiplicativeLR(o, lambda k: 0.998),
    "CyclicLR": lambda o: sched.CyclicLR(o, base_lr=1e-5, max_lr=1e-3, step_size_up=70, cycle_momentum=False),
}


@pytest.mark.parametrize("name", list(COPIED))
def test_other_schedulers_are_planned_by_stepping_a_copy(name):
    optimizer = _optimizer("sgd" if name == "CyclicLR" else "adamw")
    plan = _check_read_at_start(COPIED[name](optimizer), optimizer)
    assert plan.how.startswith(f"read from a copy of the scheduler stepped to the end ({name}")


def test_one_cycle_momentum_is_cycled_on_the_copy_only():
    optimizer = _optimizer()
    scheduler = _one_cycle(optimizer)
    betas = optimizer.param_groups[0]["betas"]
    plan = _read(scheduler, optimizer)
    assert optimizer.param_groups[0]["betas"] == betas  # OneCycleLR writes betas on the stand-in
    assert plan.schedule is not None and plan.schedule.peak == pytest.approx(1e-3)


# --- which step is which: read mid-run ------------------------------------------------------


MID_RUN = {
    "SequentialLR": (_sequential, "copied from step 37"),
    "hf cosine": (_hf("cosine"), "from 0"),
    "OneCycleLR": (_one_cycle, "from 0"),
}


@pytest.mark.parametrize("name", list(MID_RUN))
def test_a_scheduler_read_mid_run_plans_the_steps_still_to_come(name):
    if name.startswith("hf"):
        pytest.importorskip("transformers")
    build, covers = MID_RUN[name]
    optimizer = _optimizer()
    scheduler = build(optimizer)
    before = _run(scheduler, optimizer, 37)[:-1]  # the lr of steps 0..36; the scheduler is now at 37
    assert _at(scheduler) == 37
    plan = _read(scheduler, optimizer)
    assert plan.schedule is not None, plan.how
    _assert_matches(plan, np.arange(37, TOTAL + 1), _run(scheduler, optimizer, TOTAL), DENSE)
    if covers == "from 0":
        # LambdaLR is evaluated from its formula and OneCycleLR rewound: the steps run are planned too.
        assert plan.schedule.steps[0] == 0
        _assert_matches(plan, np.arange(37), before, DENSE)
    else:
        # Nothing in the scheduler says what came before: the plan starts at 37 and holds that lr before it.
        assert plan.schedule.steps[0] == 37
        assert "the steps before 37 are not in the scheduler" in plan.how
        assert np.all(plan.schedule.at(np.arange(37)) == plan.schedule.at(37))


# --- long runs: at most max_knots knots -------------------------------------------------------


def test_a_million_step_hf_cosine_stays_under_max_knots_and_within_the_tolerance():
    pytest.importorskip("transformers")
    from transformers import get_scheduler

    total = 1_000_000
    optimizer = _optimizer()
    scheduler = get_scheduler("cosine", optimizer, num_warmup_steps=2_000, num_training_steps=total)
    plan = _read(scheduler, optimizer, total)
    assert plan.schedule is not None, plan.how
    steps = np.asarray(plan.schedule.steps)
    assert len(steps) <= 100_000 and steps[0] == 0 and steps[-1] == total and 2_000 in steps
    assert f"within {TOLERANCE:.0e} of the lr" in plan.how
    # The lr torch really gives at 1,000 random steps (and the ends and the warmup's end):
    # a scheduler of the same kind, put at the step before and stepped once.
    probe_optimizer = _optimizer()
    probe = get_scheduler("cosine", probe_optimizer, num_warmup_steps=2_000, num_training_steps=total)
    where = np.concatenate([[0, 1, 1_999, 2_000, 2_001, total - 1, total],
                            np.random.default_rng(7).integers(0, total + 1, 1_000)])
    real = []
    for k in where:
        probe.last_epoch = int(k) - 1
        probe_optimizer.step()
        probe.step()
        real.append(float(probe_optimizer.param_groups[0]["lr"]))
    _assert_matches(plan, where, real, TOLERANCE)


def test_a_stepped_copy_is_thinned_to_max_knots_keeping_every_drop():
    optimizer = _optimizer()
    warmup = sched.LinearLR(optimizer, start_factor=0.1, total_iters=200)
    drops = sched.StepLR(optimizer, step_size=700, gamma=0.3)
    scheduler = sched.SequentialLR(optimizer, [warmup, drops], milestones=[200])
    total = 5_000
    plan = _read(scheduler, optimizer, total, max_knots=60)
    assert plan.schedule is not None, plan.how
    steps = set(plan.schedule.steps)
    assert len(steps) <= 60 and {0, 200, total} <= steps
    drop_at = [200 + 700 * i for i in range(1, 7)]
    assert all(k in steps and k - 1 in steps for k in drop_at)  # both sides of each drop
    _assert_matches(plan, np.arange(total + 1), _run(scheduler, optimizer, total), TOLERANCE)


def test_an_lr_too_busy_for_max_knots_is_spread_and_said():
    optimizer = _optimizer("sgd")
    scheduler = sched.CyclicLR(optimizer, base_lr=1e-5, max_lr=1e-3, step_size_up=5, cycle_momentum=False)
    plan = _read(scheduler, optimizer, 20_000, max_knots=100)
    assert plan.schedule is not None and len(plan.schedule.steps) == 100
    assert plan.how.endswith("the lr changes too often for 100 knots, which are spread evenly over the steps")
    assert plan.schedule.steps[0] == 0 and plan.schedule.steps[-1] == 20_000


# --- param groups --------------------------------------------------------------------------


def test_groups_differing_by_a_factor_share_the_shape_and_others_are_named():
    pytest.importorskip("transformers")
    optimizer = _optimizer(groups=2)
    scheduler = HF_SCHEDULES["cosine"](optimizer)
    plan = _read(scheduler, optimizer, group=1)
    assert plan.schedule is not None and "shape" not in plan.how
    assert plan.schedule.peak == pytest.approx(LR / 10)

    optimizer = _optimizer(groups=2)
    scheduler = _sequential(optimizer, eta_min=0.0)
    plan = _read(scheduler, optimizer, group=1)
    assert plan.schedule is not None and "shape" not in plan.how
    assert plan.schedule.peak == pytest.approx(LR / 10)
    # eta_min is an lr, not a share: both groups end at it, and their shapes differ.
    optimizer = _optimizer(groups=2)
    plan = _read(_sequential(optimizer), optimizer)
    assert "param group 1 has a different shape from group 0's" in plan.how

    optimizer = _optimizer(groups=2)
    scheduler = sched.LambdaLR(optimizer, [lambda k: 1.0, lambda k: 1.0 / (1 + k)])
    plan = _read(scheduler, optimizer)
    assert "; param group 1 has a different shape from group 0's, and the plan is group 0's" in plan.how
    assert plan.schedule is not None and plan.schedule.peak == LR

    optimizer = _optimizer("sgd", groups=2)
    scheduler = sched.CyclicLR(optimizer, base_lr=[1e-5, 1e-4], max_lr=[1e-3, 1e-3], step_size_up=70)
    plan = _read(scheduler, optimizer, group=1)
    assert "; param group 0 has a different shape from group 1's, and the plan is group 1's" in plan.how
    _assert_matches(plan, np.arange(TOTAL + 1), [lrs[1] for lrs in _run_groups(scheduler, optimizer)], DENSE)

    plan = _read(scheduler, optimizer, group=5)
    assert plan.schedule is None
    assert plan.how.startswith("the optimizer has 2 param group(s), and group 5 is not one")


def _run_groups(scheduler: Any, optimizer: Any) -> list[list[float]]:
    lrs = []
    for step in range(TOTAL + 1):
        lrs.append([float(group["lr"]) for group in optimizer.param_groups])
        if step < TOTAL:
            optimizer.step()
            scheduler.step()
    return lrs


# --- what gives no plan, and what is refused ---------------------------------------------------


def test_reduce_on_plateau_gives_no_plan_and_says_why():
    optimizer = _optimizer()
    scheduler = sched.ReduceLROnPlateau(optimizer, patience=3)
    plan = _read(scheduler, optimizer)
    assert plan.schedule is None
    assert plan.how == "ReduceLROnPlateau follows the loss, not the step: the plan is inferred from the log"


def test_hf_schedules_that_plan_no_lr_say_so():
    pytest.importorskip("transformers")
    from transformers import get_scheduler
    from transformers.optimization import AdafactorSchedule

    optimizer = _optimizer()
    plan = _read(get_scheduler("greedy", optimizer), optimizer)
    assert plan.schedule is None and plan.how.startswith("GreedyLR follows the loss, not the step")
    plan = plan_from_scheduler(AdafactorSchedule(_optimizer()), TOTAL)
    assert plan.schedule is None
    assert plan.how.startswith("AdafactorSchedule reports Adafactor's own relative step size")


class _LightningConfig:
    """Shaped as Lightning's LRSchedulerConfig, the dataclass that holds a LightningModule's
    scheduler (importing Lightning itself takes seconds)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler, self.interval, self.frequency = scheduler, "step", 1


def test_a_wrapped_scheduler_is_read_unwrapped():
    optimizer = _optimizer()
    scheduler = _sequential(optimizer)
    before = _state(scheduler, optimizer)
    plan = plan_from_scheduler(_LightningConfig(scheduler), TOTAL)
    assert _state(scheduler, optimizer) == before
    assert "unwrapped from _LightningConfig, which steps it every step" in plan.how
    _assert_matches(plan, np.arange(TOTAL + 1), _run(scheduler, optimizer, TOTAL), DENSE)


class _Broken(sched.LRScheduler):
    """A scheduler whose lr cannot be computed past step 10."""

    def get_lr(self) -> list[Any]:
        if self.last_epoch > 10:
            raise RuntimeError("no lr past step 10")
        return list(self.base_lrs)


class _NoCopy(sched.LambdaLR):
    """A LambdaLR with its own step() (so it is stepped on a copy) that cannot be copied."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("cannot be copied")

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda o: object(), "object is not an lr scheduler"),
        (lambda o: _NoCopy(o, lambda k: 1.0), "could not be copied"),
        (lambda o: sched.LambdaLR(o, lambda k: float("nan") if k > 5 else 1.0),
         "the lr is not a finite number at step 6: the plan ends at step 5"),
        (lambda o: sched.LambdaLR(o, lambda k: 1.0 / (10 - k)),
         "the lr_lambda failed at step 10 (ZeroDivisionError"),
        (_Broken, "stepping stopped at step 11 (RuntimeError: no lr past step 10)"),
    ],
)
def test_an_odd_scheduler_never_raises_and_says_what_happened(build, says):
    optimizer = _optimizer()
    plan = plan_from_scheduler(build(optimizer), TOTAL)
    assert says in plan.how
    assert plan.how.count(". ") == 0  # one sentence


@pytest.mark.parametrize("bad", [0, -5, 10.5, math.nan, math.inf, "1000", True, None])
def test_a_bad_total_steps_is_refused(bad):
    with pytest.raises(ConfigError, match="total_steps is the planned number of optimizer steps"):
        plan_from_scheduler(object(), bad)


@pytest.mark.parametrize(
    ("kwargs", "says"), [({"group": -1}, "group is the index"), ({"max_knots": 1}, "max_knots is the most")]
)
def test_a_bad_group_or_max_knots_is_refused(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        plan_from_scheduler(object(), TOTAL, **kwargs)


def test_the_plan_layer_imports_without_torch_or_a_tracker():
    code = (
        "import sys, tracker_plugin.plan.scheduler; "
        "print(sorted(m for m in ('torch', 'mlflow', 'wandb', 'matplotlib', 'click') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_accelerates_scheduler_stepped_once_per_process_is_planned_on_optimizer_steps(monkeypatch):
    """accelerate steps a prepared scheduler once per process at each optimizer step (as
    run_clm_no_trainer.py plans it: num_training_steps x num_processes): the plan is on
    the optimizer's steps, the lr each optimizer step then uses."""
    accelerate_scheduler = pytest.importorskip("accelerate.scheduler")
    import accelerate.state

    class TwoProcesses:
        num_processes = 2

    monkeypatch.setattr(accelerate.state, "AcceleratorState", TwoProcesses)
    monkeypatch.setattr(accelerate_scheduler, "AcceleratorState", TwoProcesses)
    optimizer = _optimizer()
    optimizer.step_was_skipped = False  # what accelerate's AcceleratedOptimizer says after a step
    cosine = sched.LambdaLR(optimizer, lambda k: 0.5 * (1 + math.cos(math.pi * min(k, 2 * TOTAL) / (2 * TOTAL))))
    wrapped = accelerate_scheduler.AcceleratedScheduler(cosine, [optimizer], step_with_optimizer=True,
                                                        split_batches=False)
    plan = plan_from_scheduler(wrapped, TOTAL)
    assert plan.schedule is not None and plan.schedule.total_steps == TOTAL
    assert "stepped 2 times per optimizer step (once per process, by accelerate)" in plan.how
    used = []
    for _ in range(TOTAL + 1):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()  # no gradients: nothing moves, and the scheduler steps after it, in order
        wrapped.step()
    np.testing.assert_allclose(plan.schedule.at(np.arange(TOTAL + 1)), used, rtol=1e-9)
