"""The planned lr of a whole run, read from its live PyTorch lr scheduler without stepping it.

:func:`plan_from_scheduler` gives the lr of one param group at every optimizer step from 0
to the run's last as an :class:`~tracker_plugin.plan.schedule.LrSchedule` (source
``scheduler``), and a sentence that says how it was read, or why it could not be:

- a ``LambdaLR`` (every Hugging Face ``get_scheduler`` schedule but ``reduce_lr_on_plateau``
  and ``greedy``: linear, cosine, cosine_with_restarts, polynomial, constant,
  constant_with_warmup, inverse_sqrt, cosine_with_min_lr, cosine_warmup_with_min_lr,
  warmup_stable_decay) is evaluated from its formula, ``base_lr * lr_lambda(k)``, at every
  step from 0 (a copy of the lambda, so a stateful one keeps its state);
- any other scheduler is deep-copied onto a stand-in optimizer that holds copies of the real
  param groups' hyperparameters (never their parameters), and the copy is stepped to the
  end. ``OneCycleLR`` and ``CyclicLR``, whose lr is a function of the step count alone, are
  stepped from 0; the others from the step they are at (the steps before are not in the
  scheduler, and the plan then starts there);
- a scheduler that follows a metric (``ReduceLROnPlateau``, HF's ``GreedyLR``), or reports
  an lr it does not plan (HF's ``AdafactorSchedule``), gives no plan.

The step numbering is the trainer's optimizer step, 0-based: the lr the scheduler holds
after ``k`` calls of its ``step()`` is the lr of optimizer step ``k``. The Hugging Face
Trainer and Lightning (``interval="step"``) call ``step()`` once after each optimizer step,
so the plan's step ``k`` is the lr used by the optimizer step after which HF's
``state.global_step`` is ``k + 1``. With Lightning's ``interval="epoch"`` the steps are epochs.

Neither the real scheduler nor the real optimizer is changed: nothing is stepped but the
copy, and the copy never reaches the real optimizer, its param groups or its parameters.
torch is imported only when a plan is read; nothing here imports a tracker client. The lr
read at every step is thinned to a plan's knots by :mod:`.lr_knots`.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tracker_plugin.errors import ConfigError
from tracker_plugin.plan.lr_knots import TOLERANCE, _knots
from tracker_plugin.plan.schedule import LrSchedule

__all__ = ["TOLERANCE", "ScheduledPlan", "plan_from_scheduler"]

# Steps evaluated (or stepped) at a time: memory stays bounded for any run's length.
_CHUNK = 1 << 18
# Steps at which the param groups' lr are compared for their shape.
_SHAPE_SAMPLES = 1025
_INFERRED = "the plan is inferred from the log"
# torch's warnings on a scheduler stepped before its optimizer, silenced while the copy steps.
_STEP_ORDER_WARNINGS = (
    r"Detected call of `lr_scheduler\.step\(\)` before",
    r"Seems like `optimizer\.step\(\)` has been overridden",
)
# Schedulers whose lr follows a metric passed to step(): torch's, and Hugging Face's.
_METRIC_FOLLOWERS = ("ReduceLROnPlateau", "GreedyLR")


@dataclass(frozen=True)
class ScheduledPlan:
    """What :func:`plan_from_scheduler` read: the planned lr, or None, and how (or why not),
    in one sentence."""

    schedule: LrSchedule | None
    how: str


@dataclass
class _Reading:
    """What reading the values noticed on the way: where and why it stopped early, and the
    lr of every param group at a few steps (for their shape)."""

    stopped: str | None = None
    samples: list[tuple[int, list[float]]] = field(default_factory=list)


def plan_from_scheduler(
    scheduler: Any, total_steps: int, *, group: int = 0, max_knots: int = 100_000
) -> ScheduledPlan:
    """The planned lr of param group ``group`` at optimizer steps 0 to ``total_steps``, read
    from a live PyTorch lr scheduler without changing it or its optimizer.

    See the module's docstring for how each kind of scheduler is read and which step is
    which. ``total_steps`` is the run's planned number of optimizer steps (HF's
    ``state.max_steps``, Lightning's ``estimated_stepping_batches``).

    When steps 0 to ``total_steps`` are at most ``max_knots``, the plan keeps the lr of every
    step. Past that, it keeps at
    most ``max_knots`` of them: step 0, the last, every step where the lr's slope changes
    sharply, and enough others that the plan is within :data:`TOLERANCE` of the lr at every
    step, relative (an lr below 1e-12 of the peak counts as 0); when the lr changes too often
    for that, the tolerance is loosened (up to 25%, then the knots are spread evenly) and
    ``how`` says so. Reading a ``LambdaLR`` takes about 0.6 s per million steps; stepping a
    copy of another scheduler 3 to 4 s per million.

    Before its first knot an :class:`LrSchedule` gives the first knot's lr (``np.interp``
    holds the end values), and past the last the last: a plan that starts at a resumed
    scheduler's step holds that step's lr before it.

    A scheduler wrapped by accelerate (``AcceleratedScheduler``) or in Lightning's
    ``LRSchedulerConfig`` is read unwrapped. Accelerate steps the scheduler once per process
    at each optimizer step (unless ``split_batches``, or not ``step_with_optimizer``): its
    own steps are then read to ``total_steps`` x the processes, and the plan is on the
    optimizer's steps (the scheduler's step ``k`` is optimizer step ``k / processes``).

    Returns
    -------
    ScheduledPlan
        The plan and one sentence on how it was read: "read from the scheduler (LambdaLR(...),
        1,000 steps)". Its ``schedule`` is None, and the sentence says why, when the
        scheduler follows a metric, is not one, or could not be read: an odd scheduler never
        raises here.

    Raises
    ------
    ConfigError
        ``total_steps`` is not a whole number above 0, ``group`` is not a whole number
        >= 0, or ``max_knots`` is below 2.
    """
    total = _whole(total_steps, "total_steps", "the planned number of optimizer steps", least=1)
    index = _whole(group, "group", "the index of a param group", least=0)
    cap = _whole(max_knots, "max_knots", "the most knots the plan keeps", least=2)
    try:
        per_step = _stepped_per_optimizer_step(scheduler)
        return _on_optimizer_steps(_read(scheduler, total * per_step, index, cap), per_step, total)
    except Exception as exc:  # an odd scheduler must not stop the run that asked
        return _none(f"the scheduler could not be read ({_said(exc)})")


def _stepped_per_optimizer_step(scheduler: Any) -> int:
    """How many times the scheduler is stepped at each optimizer step: accelerate's
    ``AcceleratedScheduler`` steps it once per process (accelerate/scheduler.py ``step``:
    ``for _ in range(AcceleratorState().num_processes)``) unless ``split_batches`` or not
    ``step_with_optimizer``; anything else once."""
    if type(scheduler).__name__ != "AcceleratedScheduler":
        return 1
    if not getattr(scheduler, "step_with_optimizer", True) or getattr(scheduler, "split_batches", False):
        return 1
    try:
        from accelerate.state import AcceleratorState
    except ImportError:
        return 1
    processes = getattr(AcceleratorState(), "num_processes", 1)
    return processes if isinstance(processes, int) and processes > 1 else 1


def _on_optimizer_steps(plan: ScheduledPlan, per_step: int, total: int) -> ScheduledPlan:
    """``plan`` read in a scheduler's own steps, ``per_step`` of them to an optimizer step,
    on the optimizer's steps."""
    if per_step == 1 or plan.schedule is None:
        return plan
    schedule = replace(plan.schedule, steps=tuple(s / per_step for s in plan.schedule.steps), total_steps=float(total))
    return ScheduledPlan(schedule, f"{plan.how}; stepped {per_step} times per optimizer step (once per process, by "
                                   f"accelerate): read on the optimizer's {total:,} steps")


def _none(why: str) -> ScheduledPlan:
    """No plan, and why."""
    return ScheduledPlan(None, f"{why}: {_INFERRED}")


def _whole(value: Any, name: str, what: str, *, least: int) -> int:
    """``value`` as an int when it is a whole number >= ``least``.

    Raises
    ------
    ConfigError
        It is not.
    """
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value))
    if ok and float(value).is_integer() and float(value) >= least:
        return int(value)
    bound = "above 0" if least == 1 else f">= {least}"
    raise ConfigError(f"{name} is {what}, a whole number {bound}, got {value!r}")


# --- which scheduler -------------------------------------------------------------------------


def _read(scheduler: Any, total: int, group: int, cap: int) -> ScheduledPlan:
    inner, wrapper = _unwrap(scheduler)
    name = _describe(inner)
    kind = type(inner).__name__
    if kind == "AdafactorSchedule":
        return _none(f"{kind} reports Adafactor's own relative step size, which it does not plan")
    if not callable(getattr(inner, "step", None)):
        return _none(f"{kind} is not an lr scheduler (it has no step())")
    if any(cls.__name__ in _METRIC_FOLLOWERS for cls in type(inner).__mro__):
        return _none(f"{kind} follows the loss, not the step")
    if _needs_an_argument(inner):
        return _none(f"{kind}.step() needs an argument (a metric or a step), so it cannot be stepped here")
    try:
        import torch
        from torch.optim.lr_scheduler import CyclicLR, LambdaLR, LRScheduler, OneCycleLR
    except ImportError:
        return _none(f"torch is not installed, so {kind} cannot be read")
    optimizer = getattr(inner, "optimizer", None)
    if not isinstance(optimizer, torch.optim.Optimizer):
        return _none(f"{kind} holds no torch optimizer to read its param groups from")
    groups = len(optimizer.param_groups)
    if group >= groups:
        return _none(f"the optimizer has {groups} param group(s), and group {group} is not one")
    origin = f", {wrapper}" if wrapper else ""
    base = type(inner)
    plain = (
        isinstance(inner, LambdaLR)
        and base.get_lr is LambdaLR.get_lr
        and base.step is LRScheduler.step
        and getattr(base, "_update_lr", None) is getattr(LRScheduler, "_update_lr", None)
    )
    if plain:
        lambdas = _copied(list(inner.lr_lambdas))
        if lambdas is not None:
            base_lrs = [float(lr) for lr in inner.base_lrs]
            return _from_lambdas(lambdas, base_lrs, total, group, cap, f"{name}, {total:,} steps{origin}")
    rewind = type(inner) in (OneCycleLR, CyclicLR)
    return _from_copy(inner, optimizer, total, group, cap, name, origin, rewind, torch)


def _unwrap(scheduler: Any) -> tuple[Any, str]:
    """The scheduler inside accelerate's ``AcceleratedScheduler`` or Lightning's
    ``LRSchedulerConfig``, and a phrase naming the wrapper; or the scheduler itself and ""."""
    inner = getattr(scheduler, "scheduler", None)
    kind = type(scheduler).__name__
    wrapped = kind == "AcceleratedScheduler" or not callable(getattr(scheduler, "step", None))
    if inner is None or not wrapped or not callable(getattr(inner, "step", None)):
        return scheduler, ""
    interval, frequency = getattr(scheduler, "interval", None), getattr(scheduler, "frequency", None)
    if isinstance(interval, str) and isinstance(frequency, int):
        every = interval if frequency == 1 else f"{frequency:,} {interval}s"
        return inner, f"unwrapped from {kind}, which steps it every {every}"
    return inner, f"unwrapped from {kind}, in the scheduler's own steps"


def _needs_an_argument(scheduler: Any) -> bool:
    """Whether the scheduler's step() needs an argument (a metric, or timm's epoch)."""
    try:
        parameters = inspect.signature(scheduler.step).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.default is inspect.Parameter.empty and p.kind in positional for p in parameters)


def _describe(scheduler: Any) -> str:
    """``SequentialLR(LinearLR, CosineAnnealingLR)``, ``LambdaLR(_get_cosine_..._lr_lambda)``."""
    kind = type(scheduler).__name__
    parts = getattr(scheduler, "_schedulers", None)
    if isinstance(parts, (list, tuple)) and parts:
        return f"{kind}({', '.join(_describe(part) for part in parts)})"
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if isinstance(lambdas, (list, tuple)) and lambdas:
        names = sorted({_function_name(fn) for fn in lambdas} - {""})
        return f"{kind}({', '.join(names)})" if names else kind
    return kind


def _function_name(fn: Any) -> str:
    inner = getattr(fn, "func", fn)  # functools.partial
    name = getattr(inner, "__name__", "") or type(inner).__name__
    return "" if name == "<lambda>" else str(name)


def _copied(items: list[Any]) -> list[Any] | None:
    """Deep copies of ``items`` (a stateful callable then keeps its state), or None."""
    try:
        return copy.deepcopy(items)
    except Exception:
        return None


def _said(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 120 else text[:117] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- a LambdaLR: its formula ------------------------------------------------------------------


def _from_lambdas(
    lambdas: list[Any], base_lrs: list[float], total: int, group: int, cap: int, what: str
) -> ScheduledPlan:
    """The plan of a plain LambdaLR: ``base_lrs[group] * lambdas[group](k)`` at k = 0..total."""
    reading = _Reading()
    fn, base = lambdas[group], base_lrs[group]
    size = _chunk_size(total + 1, cap)

    def chunks() -> Iterator[np.ndarray]:
        for start in range(0, total + 1, size):
            stop = min(start + size, total + 1)
            try:
                yield base * np.fromiter(map(fn, range(start, stop)), float, stop - start)
            except Exception as exc:
                # The step it fails at, and the steps before it.
                good: list[float] = []
                for k in range(start, stop):
                    try:
                        good.append(base * float(fn(k)))
                    except Exception:
                        break
                reading.stopped = f"the lr_lambda failed at step {start + len(good):,} ({_said(exc)})"
                if good:
                    yield np.asarray(good, float)
                return

    steps, lr, tolerance = _knots(_finite(chunks(), 0, reading), 0, total + 1, cap)
    others = [g for g in range(len(lambdas)) if g != group and lambdas[g] is not fn]
    differ: list[int] = []
    if others and len(steps):
        last = int(steps[-1])
        at = np.unique(np.linspace(0, last, min(last + 1, _SHAPE_SAMPLES)).round().astype(np.int64))
        mine = _lambda_at(fn, base, at)
        differ = [g for g in others if not _same_shape(mine, _lambda_at(lambdas[g], base_lrs[g], at))]
    return _plan(steps, lr, tolerance, reading, differ, group, f"read from the scheduler ({what})", what)


def _lambda_at(fn: Callable[[int], Any], base: float, steps: np.ndarray) -> np.ndarray | None:
    try:
        return base * np.asarray([float(fn(int(k))) for k in steps], float)
    except Exception:
        return None


# --- any other scheduler: a copy, stepped --------------------------------------------------------


def _from_copy(
    scheduler: Any, optimizer: Any, total: int, group: int, cap: int, name: str, origin: str, rewind: bool,
    torch: Any,
) -> ScheduledPlan:
    """The plan of any other scheduler: a deep copy on a stand-in optimizer, stepped to ``total``."""
    first = 0 if rewind else _position(scheduler)
    if first is None:
        return _none(f"{name} does not say which step it is at (no last_epoch)")
    if first >= total:
        return _none(f"{name} is at step {first:,} already, not before the planned last step {total:,}")
    stand_in = _stand_in(optimizer, torch)
    try:
        twin = copy.deepcopy(scheduler, _memo(optimizer, stand_in))
    except Exception as exc:
        return _none(f"{name} could not be copied to be stepped ({_said(exc)})")
    reading = _Reading()
    stride = max(1, (total - first) // (_SHAPE_SAMPLES - 1))
    size = _chunk_size(total - first + 1, cap)
    with warnings.catch_warnings():
        # Only the copy is stepped, and its stand-in optimizer never is.
        for message in _STEP_ORDER_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        values = _stepped(twin, stand_in.param_groups, group, first, total, size, rewind, stride, reading)
        steps, lr, tolerance = _knots(_finite(values, first, reading), first, total - first + 1, cap)
    others = range(len(stand_in.param_groups))
    differ = [g for g in others if g != group and not _same_shape(*_sampled(reading, group, g))]
    span = f"{total:,} steps" if first == 0 else f"steps {first:,} to {total:,}"
    what = f"{name}, {span}{origin}"
    how = f"read from a copy of the scheduler stepped to the end ({what})"
    if first > 0:
        how += (f": the steps before {first:,} are not in the scheduler, and the plan holds the lr of step "
                f"{first:,} before it")
    return _plan(steps, lr, tolerance, reading, differ, group, how, what)


def _position(scheduler: Any) -> int | None:
    """How many times the scheduler has been stepped (its ``last_epoch``; a
    ``ChainedScheduler``'s is its parts'), or None when it does not say."""
    position = getattr(scheduler, "last_epoch", None)
    if isinstance(position, numbers.Integral) and not isinstance(position, bool):
        return int(position) if int(position) >= 0 else None
    parts = getattr(scheduler, "_schedulers", None)
    if isinstance(parts, (list, tuple)) and parts:
        found = {_position(part) for part in parts}
        if len(found) == 1:
            return found.pop()
    return None


def _stand_in(optimizer: Any, torch: Any) -> Any:
    """A tiny SGD whose param groups hold copies of every hyperparameter of the real ones
    (``lr``, ``initial_lr``, ``max_lr``, ``betas``, ``momentum``, ...), each over one zero."""
    stand_in = torch.optim.SGD([torch.zeros(1)], lr=0.0)
    stand_in.param_groups = [
        {"params": [torch.zeros(1)], **{key: _copy(value) for key, value in real.items() if key != "params"}}
        for real in optimizer.param_groups
    ]
    stand_in.defaults = {key: _copy(value) for key, value in dict(optimizer.defaults).items()}
    return stand_in


def _copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception:
        return value


def _memo(optimizer: Any, stand_in: Any) -> dict[int, Any]:
    """deepcopy's memo: the real optimizer (and the one it wraps, if any), its param groups
    and their list are the stand-in's; parameters are never copied."""
    memo: dict[int, Any] = {id(optimizer): stand_in, id(optimizer.param_groups): stand_in.param_groups}
    wrapped = getattr(optimizer, "optimizer", None)
    if wrapped is not None and hasattr(wrapped, "param_groups"):
        memo[id(wrapped)] = stand_in
        memo[id(wrapped.param_groups)] = stand_in.param_groups
    for real, mine in zip(optimizer.param_groups, stand_in.param_groups):
        memo[id(real)] = mine
        for parameter in real.get("params", ()):
            memo[id(parameter)] = parameter
    return memo


def _stepped(
    twin: Any, groups: list[dict[str, Any]], group: int, first: int, total: int, size: int,
    rewind: bool, stride: int, reading: _Reading,
) -> Iterator[np.ndarray]:
    """The stand-in's lr of ``group`` at steps ``first`` to ``total``, ``size`` at a time, as
    the copy is stepped (from a rewound start when ``rewind``); every group's lr every
    ``stride`` steps into ``reading.samples``."""
    buffer = np.empty(size)
    filled, step = 0, first
    try:
        if rewind:
            twin.last_epoch = -1
            twin.step()
        while True:
            buffer[filled] = float(groups[group]["lr"])
            filled += 1
            if (step - first) % stride == 0 or step == total:
                reading.samples.append((step, [float(g["lr"]) for g in groups]))
            if filled == size:
                yield buffer.copy()
                filled = 0
            if step >= total:
                break
            step += 1
            twin.step()
    except Exception as exc:
        reading.stopped = f"stepping stopped at step {step:,} ({_said(exc)})"
    if filled:
        yield buffer[:filled].copy()


def _sampled(reading: _Reading, mine: int, other: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    if not reading.samples:
        return None, None
    rows = np.asarray([lrs for _, lrs in reading.samples], float)
    return rows[:, mine], rows[:, other]


def _same_shape(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether two groups' lr differ only by a constant factor (at the same steps)."""
    if a is None or b is None:
        return False
    peak_a, peak_b = float(np.max(np.abs(a))), float(np.max(np.abs(b)))
    if peak_a == 0.0 or peak_b == 0.0:
        return peak_a == peak_b
    return bool(np.allclose(a / peak_a, b / peak_b, rtol=0.0, atol=1e-9))


# --- the values, thinned to knots --------------------------------------------------------------


def _chunk_size(points: int, cap: int) -> int:
    """Steps at a time: at least _CHUNK, and few enough chunks (at most a quarter of the
    knots) that the knot each chunk's end costs leaves the budget room."""
    return max(_CHUNK, math.ceil(points / max(1, cap // 4)))


def _finite(chunks: Iterable[np.ndarray], first: int, reading: _Reading) -> Iterator[np.ndarray]:
    """The chunks up to the first lr that is not a finite number (noted in ``reading``)."""
    done = first
    for chunk in chunks:
        bad = np.flatnonzero(~np.isfinite(chunk))
        if len(bad):
            reading.stopped = f"the lr is not a finite number at step {done + int(bad[0]):,}"
            if bad[0]:
                yield chunk[: bad[0]]
            return
        done += len(chunk)
        yield chunk


# --- the plan ----------------------------------------------------------------------------------


def _plan(
    steps: np.ndarray, lr: np.ndarray, tolerance: float, reading: _Reading, differ: list[int],
    group: int, how: str, what: str,
) -> ScheduledPlan:
    """The ScheduledPlan of the knots, ``how`` completed with what reading them noticed."""
    notes: list[str] = []
    if reading.stopped:
        ends = f": the plan ends at step {int(steps[-1]):,} and holds its lr after" if len(steps) > 1 else ""
        notes.append(reading.stopped + ends)
    if differ:
        named = ", ".join(str(g) for g in differ)
        groups = f"param group {named} has" if len(differ) == 1 else f"param groups {named} have"
        notes.append(f"{groups} a different shape from group {group}'s, and the plan is group {group}'s")
    if tolerance == math.inf:
        notes.append(f"the lr changes too often for {len(steps):,} knots, which are spread evenly "
                     "over the steps")
    elif tolerance > 0:
        notes.append(f"kept as {len(steps):,} knots, within {tolerance:.0e} of the lr at every step")
    try:
        schedule = LrSchedule.from_table(steps.tolist(), lr.tolist(), source="scheduler", name=what)
    except ConfigError as exc:
        why = "; ".join([exc.problem, *notes])
        return _none(f"the scheduler gave no usable plan ({why})")
    schedule = replace(schedule, description=f"read from the live scheduler ({what})", notes=tuple(notes))
    return ScheduledPlan(schedule, "; ".join([how, *notes]))
