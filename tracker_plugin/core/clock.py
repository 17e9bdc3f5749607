"""The run's clock: steps, tokens and summed learning rate on one grid, past the log too.

Schedule-aware loss laws measure progress in the summed learning rate ("lr area") rather
than in steps or tokens. A :class:`Timeline` holds, on a grid of steps from 0 to far past
the log: the lr (normalised to its peak), the batch, the tokens consumed and the lr area.

The clock decides what one unit of lr area is:

- ``tokens`` (default): each step adds ``lr * batch / reference batch``, so a step at twice
  the batch counts twice. It stays right across batch switches, where a step no longer
  stands for a fixed amount of data (below the critical batch size, loss follows tokens).
- ``steps``: each step adds ``lr``, as the published laws define it for a fixed batch.

For a fixed batch the two agree up to a constant factor, which the fits absorb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tracker_plugin.defaults import CLOCKS
from tracker_plugin.frame.history import History
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule

__all__ = ["CLOCKS", "DropCells", "Timeline", "TimelineBuilder", "build_timeline"]


# Grid points over the logged-and-planned range, and over the extension past it.
_GRID_POINTS = 2048
_EXTENSION_POINTS = 256
# The grid reaches this many times the longer of the log and the plan: a law fitted to a
# run says little about twenty times its length, so a target further out is unreachable.
HORIZON_FACTOR = 20.0


@dataclass(frozen=True, eq=False)
class DropCells:
    """Where the lr falls: each cell's drop (in peak units) and where it happens."""

    size: np.ndarray  # lr drop, as a fraction of the peak
    clock: np.ndarray  # clock steps at the drop (reference-batch steps for the tokens clock)
    area: np.ndarray  # lr area at the drop
    lr_after: np.ndarray  # the lr after the drop, as a fraction of the peak

    def __len__(self) -> int:
        return len(self.size)

    def before(self, clock: float) -> DropCells:
        """The cells that happen before ``clock``: what a fit up to there can see."""
        keep = self.clock < clock
        return DropCells(self.size[keep], self.clock[keep], self.area[keep], self.lr_after[keep])

    @property
    def total(self) -> float:
        return float(self.size.sum())


@dataclass(frozen=True, eq=False)
class Timeline:
    """A run on a grid of steps, from step 0 to ``HORIZON_FACTOR`` times its planned length.

    Between grid points the lr is linear and the batch constant. ``last_step`` is the last
    logged step; ``plan_end`` the planned last step when known. ``lr_assumed``: neither a
    logged lr nor a plan, so the lr is taken to be constant from step 0. ``first_step`` and
    ``first_loss``: the log's first row with a finite loss (a law's positive origin shift must
    not have the law start below it).
    """

    step: np.ndarray
    lr: np.ndarray  # normalised: 1 at the peak
    batch: np.ndarray  # tokens per step from this grid point to the next
    tokens: np.ndarray  # tokens consumed before the step
    area: np.ndarray  # lr area up to the step
    clock_steps: np.ndarray  # the clock up to the step, in reference-batch steps
    clock: str
    reference_batch: float
    last_step: float
    plan_end: float | None
    lr_assumed: bool = False
    first_step: float = 0.0
    first_loss: float = math.inf

    @property
    def horizon(self) -> float:
        return float(self.step[-1])

    def area_at(self, steps: np.ndarray | float) -> np.ndarray:
        """Lr area through the end of each step (so step 0 already counts its own update)."""
        return np.interp(np.asarray(steps, float) + 1.0, self.step, self.area)

    def clock_at(self, steps: np.ndarray | float) -> np.ndarray:
        return np.interp(np.asarray(steps, float) + 1.0, self.step, self.clock_steps)

    def tokens_at(self, steps: np.ndarray | float) -> np.ndarray:
        return np.interp(np.asarray(steps, float), self.step, self.tokens)

    def step_at_tokens(self, tokens: np.ndarray | float) -> np.ndarray:
        return np.interp(np.asarray(tokens, float), self.tokens, self.step)

    def lr_at(self, steps: np.ndarray | float) -> np.ndarray:
        return np.interp(np.asarray(steps, float), self.step, self.lr)

    def drops(self, max_cells: int = 48) -> DropCells:
        """Every fall of the lr on the grid, merged into at most ``max_cells`` cells.

        Cells are merged in order, each holding about the same share of the total drop, so
        a sharp step keeps a cell of its own and a long smooth decay is spread evenly.
        """
        fall = np.maximum(self.lr[:-1] - self.lr[1:], 0.0)
        where = np.flatnonzero(fall > 1e-12)
        if not len(where):
            empty = np.zeros(0)
            return DropCells(empty, empty, empty, empty)
        size = fall[where]
        clock = 0.5 * (self.clock_steps[where] + self.clock_steps[where + 1])
        area = 0.5 * (self.area[where] + self.area[where + 1])
        lr_after = self.lr[where + 1]
        if len(size) > max_cells:
            share = np.cumsum(size) / size.sum()
            group = np.minimum((share * max_cells - 1e-9).astype(np.int64), max_cells - 1)
            group = np.r_[0, np.cumsum(np.diff(group) != 0)]
            n = int(group[-1]) + 1
            total = np.bincount(group, size, n)

            def mean(values: np.ndarray) -> np.ndarray:
                return np.bincount(group, size * values, n) / total

            return DropCells(total, mean(clock), mean(area), mean(lr_after))
        return DropCells(size, clock, area, lr_after)


def build_timeline(
    history: History,
    plan: LrSchedule | None,
    *,
    clock: str = "tokens",
    batch_schedule: BatchSchedule | None = None,
    horizon_factor: float = HORIZON_FACTOR,
) -> Timeline:
    """The timeline of a run: its logged lr up to the last logged step, ``plan`` after it.

    Before the first logged step the lr rises linearly from 0 (a warmup). With no lr
    logged, ``plan`` covers the past too; with neither, the lr is constant. Past the plan's
    last knot its last lr continues. The logged lr and the plan are each normalised to
    their own peak, so a plan of multipliers joins an absolute logged lr.
    """
    return TimelineBuilder(history, clock=clock, batch_schedule=batch_schedule, horizon_factor=horizon_factor)(plan)


class TimelineBuilder:
    """:func:`build_timeline` of one run on any plan: what the timelines share whatever the
    plan (the thinned steps, the batch switches) is read from a long log once, however
    many plans are tried on it."""

    def __init__(
        self,
        history: History,
        *,
        clock: str = "tokens",
        batch_schedule: BatchSchedule | None = None,
        horizon_factor: float = HORIZON_FACTOR,
    ) -> None:
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        self.history = history
        self.clock = clock
        self.batch_schedule = batch_schedule
        self.horizon_factor = horizon_factor
        # The steps as floats and the logged lr's knots are the same on every plan: made
        # once (a few plausible plans on a million-row log made them again for each, a
        # tenth of a second), and dropped with the builder after the forecast.
        self.steps = history.step.astype(float)
        logged = _logged_lr(history, self.steps)
        self.logged = None if logged is None else _head_only(*_from_zero(*logged))
        self.thinned_steps = _thin(self.steps, _GRID_POINTS)
        self.switches = _batch_switches(history)
        finite = np.flatnonzero(np.isfinite(history.loss))
        first = int(finite[0]) if len(finite) else 0
        self.first_step = float(history.step[first])
        self.first_loss = float(history.loss[first]) if len(finite) else math.inf

    def __call__(self, plan: LrSchedule | None) -> Timeline:
        """The run's timeline on ``plan``."""
        history, horizon_factor = self.history, self.horizon_factor
        steps = self.steps
        last = float(steps[-1])
        knots = _lr_knots(self.logged, plan)
        plan_end = None if plan is None or plan.total_steps is None else float(plan.total_steps)
        span = max(last, plan_end or 0.0, knots.last, 1.0)
        horizon = span * horizon_factor
        grid = np.unique(
            np.concatenate(
                [
                    np.linspace(0.0, span, _GRID_POINTS),
                    self.thinned_steps,
                    knots.thinned(span, _GRID_POINTS),
                    self.switches,
                    span * np.geomspace(1.0, horizon_factor, _EXTENSION_POINTS),
                    [last, last + 1.0],
                ]
            )
        )
        grid = grid[(grid >= 0) & (grid <= horizon)]
        lr = knots.lr_at(grid)
        batch, tokens = _batch_and_tokens(history, steps, grid, self.batch_schedule)
        reference = float(history.batch[0])
        weight = batch / reference if self.clock == "tokens" else np.ones(len(grid))
        dstep = np.diff(grid)
        area = np.r_[0.0, np.cumsum(0.5 * (lr[1:] + lr[:-1]) * dstep * weight[:-1])]
        clock_steps = np.r_[0.0, np.cumsum(dstep * weight[:-1])]
        assumed = plan is None and (history.lr is None or not np.isfinite(history.lr).any())
        return Timeline(grid, lr, batch, tokens, area, clock_steps, self.clock, reference, last, plan_end, assumed,
                        self.first_step, self.first_loss)


def _logged_lr(history: History, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The logged lr's steps and values (normalised to its peak); None when none is logged."""
    lr = history.lr
    if lr is None:
        return None
    logged = np.isfinite(lr) & (lr >= 0)
    if not logged.any():
        return None
    if logged.all():  # a long log's every row: no copies of the steps and the lr
        return steps, lr / _positive(float(np.max(lr)))
    peak = float(np.max(lr[logged]))
    return steps[logged], lr[logged] / _positive(peak)


def _positive(peak: float) -> float:
    return peak if peak > 0 else 1.0


def _from_zero(s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knots from step 0: before the first, a linear warmup from 0."""
    if s[0] > 0:
        return np.r_[0.0, s], np.r_[0.0, v]
    return s, v


@dataclass(frozen=True, eq=False)
class _Knots:
    """The lr's knots (steps, lr in peak units): the logged ones or a whole plan (``head``),
    then a plan's after the log (``tail``). The two are kept apart, so a long log's million
    knots are not copied for every plan; read together they are one piecewise-linear lr."""

    head_s: np.ndarray
    head_v: np.ndarray
    tail_s: np.ndarray
    tail_v: np.ndarray
    head_max: float  # the head's last step, or its largest were it not sorted

    @property
    def last(self) -> float:
        return float(self.tail_s[-1] if len(self.tail_s) else self.head_s[-1])

    def thinned(self, span: float, at_most: int) -> np.ndarray:
        """At most ``at_most`` of the knots up to ``span``, evenly spaced in the list of them."""
        head = self.head_s if self.head_max <= span else self.head_s[self.head_s <= span]
        tail = self.tail_s[self.tail_s <= span]
        n_head, n = len(head), len(head) + len(tail)
        if n <= at_most:
            return np.r_[head, tail]
        index = np.linspace(0, n - 1, at_most).round().astype(np.int64)
        in_head = index < n_head
        out = np.empty(at_most)
        out[in_head] = head[index[in_head]]
        out[~in_head] = tail[index[~in_head] - n_head]
        return out

    def lr_at(self, steps: np.ndarray) -> np.ndarray:
        """The lr at sorted ``steps``, linear between knots."""
        if not len(self.tail_s):
            return np.interp(steps, self.head_s, self.head_v)
        # Linear between knots, so the head and the tail (from the head's last knot) each
        # give the lr over their own stretch.
        split = int(np.searchsorted(steps, self.head_s[-1], side="right"))
        return np.r_[
            np.interp(steps[:split], self.head_s, self.head_v),
            np.interp(steps[split:], np.r_[self.head_s[-1], self.tail_s], np.r_[self.head_v[-1], self.tail_v]),
        ]


def _lr_knots(logged_lr: _Knots | None, plan: LrSchedule | None) -> _Knots:
    """The knots of the logged lr (from step 0) and, after it, the plan; or the plan's alone."""
    if logged_lr is not None:
        if plan is None:
            return logged_lr
        # The plan takes over one step after the last logged lr.
        join = logged_lr.head_s[-1] + 1.0
        future = np.asarray(plan.steps) > join
        return replace(logged_lr, tail_s=np.r_[join, np.asarray(plan.steps)[future]],
                       tail_v=np.r_[plan.at(join) / plan.peak, np.asarray(plan.lr)[future] / plan.peak])
    if plan is not None:
        return _head_only(*_from_zero(np.asarray(plan.steps, float), np.asarray(plan.lr, float) / plan.peak))
    return _head_only(np.array([0.0, 1.0]), np.array([1.0, 1.0]))


def _head_only(s: np.ndarray, v: np.ndarray) -> _Knots:
    none = np.zeros(0)
    return _Knots(s, v, none, none, float(np.max(s)))


def _thin(values: np.ndarray, at_most: int) -> np.ndarray:
    if len(values) <= at_most:
        return values
    return values[np.linspace(0, len(values) - 1, at_most).round().astype(np.int64)]


def _batch_switches(history: History) -> np.ndarray:
    change = np.flatnonzero(history.batch[1:] != history.batch[:-1]) + 1
    return history.step[change].astype(float)


def _batch_and_tokens(
    history: History, steps: np.ndarray, grid: np.ndarray, schedule: BatchSchedule | None
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens per step after each grid point, and tokens consumed before it.

    Inside the log both follow the history (a gap takes the batch of the row before it);
    before the first row the first batch runs back to step 0; past the log the last batch
    continues, or each later stage of ``schedule`` once its start is reached. ``steps``:
    the history's steps as floats.
    """
    last = steps[-1]
    row = np.clip(np.searchsorted(steps, grid, side="right") - 1, 0, len(steps) - 1)
    batch = history.batch[row].astype(float)
    tokens = np.interp(grid, steps, history.tokens)
    before = grid < steps[0]
    tokens[before] = np.maximum(history.tokens[0] - (steps[0] - grid[before]) * history.batch[0], 0.0)
    after = np.flatnonzero(grid > last)
    if len(after) and schedule is None:
        tokens[after] = history.tokens[-1] + (grid[after] - last) * history.batch[-1]
        batch[after] = history.batch[-1]
    elif len(after):
        consumed, step, size = float(history.tokens[-1]), last, float(history.batch[-1])
        stages = [] if schedule is None else [st for st in schedule.stages if st[0] > consumed]
        for i in after:
            consumed += (grid[i] - step) * size
            step = grid[i]
            while stages and consumed >= stages[0][0]:
                size = stages.pop(0)[1]
            tokens[i], batch[i] = consumed, size
    return batch, tokens


def tokens_to_step(tokens: float, history: History, schedule: BatchSchedule | None = None) -> float:
    """The step at which ``tokens`` tokens have been consumed.

    Inside the logged range it is interpolated from the log. Past it, steps are counted
    on from the last logged row at its batch, or at each later stage's batch once the
    schedule's stage starts (a trainer may round a stage's batch to a multiple of its
    micro-batch, so steps there are approximate).
    """
    if tokens <= history.tokens[-1]:
        return float(np.interp(tokens, history.tokens, history.step))
    step, consumed, batch = float(history.step[-1]), float(history.tokens[-1]), float(history.batch[-1])
    for start, next_batch in schedule.stages if schedule else ():
        if start <= consumed:
            continue
        steps_at_batch = math.ceil((start - consumed) / batch)
        if tokens <= consumed + steps_at_batch * batch:
            break
        step, consumed, batch = step + steps_at_batch, consumed + steps_at_batch * batch, next_batch
    return step + (tokens - consumed) / batch
