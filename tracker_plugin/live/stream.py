"""The forecast inside a training loop: rows in as the trainer logs them, forecasts off its thread.

:class:`LiveForecast` is the plain-loop API (a nanoGPT-style loop calls :meth:`~LiveForecast.update`
after each logged step); the Hugging Face and Lightning callbacks are built on it. The
trainer comes first:

- ``update`` appends a row and returns: it never fits, never blocks, never raises;
- forecasts run on one background thread, at most one in flight; a forecast that is due
  while the last is still running is skipped, never queued;
- the cadence is every ``every_logs`` logged rows *and* ``every_seconds`` seconds,
  whichever comes later (the defaults keep the cost of a forecast, about a second of
  CPU on a few thousand rows, well under 1% of a run's time);
- nothing is forecast before the lr warmup has ended and ``min_rows`` rows are in; the
  status says which it waits for;
- any exception inside a forecast is caught, kept in the status, and warned about once;
- on a rank other than 0 (``RANK`` from ``torchrun``), it does nothing.
"""

from __future__ import annotations

import math
import os
import threading
import time as clock
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.core.analysis import Analysis, AnalysisConfig, run_analysis
from tracker_plugin.core.status import Status
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.conventions import batch_from_tokens
from tracker_plugin.frame.history import Columns, History, build_history
from tracker_plugin.jobs.annotation import annotation_metrics
from tracker_plugin.keys import SERIES_LOSS, SERIES_TOKENS
from tracker_plugin.plan.schedule import STEPS_ONLY, LrSchedule
from tracker_plugin.report.plan_end_text import plan_end_line
from tracker_plugin.report.tables import interval
from tracker_plugin.report.timing import duration

__all__ = [
    "DEFAULT_EVERY_LOGS", "DEFAULT_EVERY_SECONDS", "MIN_ROWS", "LiveForecast", "LiveResult", "PlanLike", "warn_once",
]

DEFAULT_EVERY_LOGS = 10
DEFAULT_EVERY_SECONDS = 300.0
# Below this many logged rows a law has too little to fit (and the EMA too little to settle).
MIN_ROWS = 20
_WARMUP_SHARE = 0.999  # the warmup ends where the planned lr first reaches this share of its peak

# A plan: an LrSchedule, a spec string ('cosine:warmup=2000,total=50000'), or lr as a
# function of the optimizer step (evaluated up to total_steps).
PlanLike = LrSchedule | str | Callable[[int], float]


@dataclass(frozen=True)
class LiveResult:
    """One live forecast: where the run stood, what the analysis said, and the keys to log.

    ``metrics`` holds the ``when_<target>_...`` numbers (every per-target key with a finite
    value) and the smoothed loss and its tokens (see :mod:`tracker_plugin.keys`), ready
    for a tracker's ``log``.
    """

    step: int
    rows: int
    analysis: Analysis
    metrics: Mapping[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # how long the forecast took

    def lines(self) -> list[str]:
        """One line per target for a console or a progress bar:
        ``3.30 forecast at step 15,490 (80%: 8,855–19,460), in 52 min (19–72 min)``; a target
        the plan ends before: ``3.20 not_reached: best 3.262 at step 5,000, the run ends at
        step 9,536, P(within plan) 0.45``; then the smoothed loss forecast at the plan's end:
        ``end 3.289 (80%: 3.277–3.300) at step 24,000``."""
        lines = [_line(self.analysis, k) for k in range(len(self.analysis.targets))]
        end = self.analysis.plan_end
        return lines if end is None else [*lines, plan_end_line(end, self.analysis.config.interval)]


class LiveForecast:
    """Forecast a target loss while the run trains.

    Parameters
    ----------
    targets:
        The target losses.
    plan:
        The planned lr of the whole run: an :class:`LrSchedule`, a spec string, or a
        function of the optimizer step (then ``total_steps`` is needed). None: the plan is
        inferred from the logged lr, as for a finished log.
    total_steps:
        The planned last optimizer step, when known.
    tokens_per_step:
        Tokens per optimizer step, when ``update`` is not given ``tokens``. With neither,
        the analysis runs on steps (its EMA window is ``config.ema_steps``).
    config:
        Further analysis settings (:class:`AnalysisConfig`); its targets and plan are
        replaced by those given here.
    every_logs, every_seconds:
        The cadence: a forecast is due when both have passed since the last one.
    min_rows:
        No forecast with fewer logged rows.
    name:
        The run's name in the analysis and its messages.
    background:
        Forecast on a background thread (the default); False forecasts in ``update``
        itself, for tests and replays.
    rank:
        This process's rank; None reads ``RANK`` from the environment (0 when unset).
        Only rank 0 forecasts.
    siblings:
        The finished runs of the run's configuration: run strings (a CSV folder,
        ``mlflow:experiment/NAME``, ``wandb:ENTITY/PROJECT``, ...) or their evidence already
        read. Their law is fitted off the training thread before the first forecast, what it
        forecasts for the plan is said once (:attr:`before`, and on the console), and the
        forecasts join it (see :mod:`tracker_plugin.live.siblings`).

    Raises
    ------
    ConfigError
        A target that is not a positive finite number, a plan function without
        ``total_steps``, a bad spec, or a cadence that is not positive.
    """

    def __init__(
        self,
        targets: Sequence[float],
        *,
        plan: PlanLike | None = None,
        total_steps: int | None = None,
        tokens_per_step: float | None = None,
        config: AnalysisConfig | None = None,
        every_logs: int = DEFAULT_EVERY_LOGS,
        every_seconds: float = DEFAULT_EVERY_SECONDS,
        min_rows: int = MIN_ROWS,
        name: str = "live",
        background: bool = True,
        rank: int | None = None,
        siblings: Any = None,
    ) -> None:
        if every_logs < 1 or not (math.isfinite(every_seconds) and every_seconds >= 0) or min_rows < 2:
            raise ConfigError("every_logs and min_rows must be at least 1 and 2, every_seconds a number >= 0")
        schedule = plan_schedule(plan, total_steps)
        base = config or AnalysisConfig(targets=tuple(targets))
        self.config = replace(base, targets=tuple(float(t) for t in targets), lr_schedule=schedule)
        self.tokens_per_step = tokens_per_step
        self.every_logs, self.every_seconds, self.min_rows = every_logs, every_seconds, min_rows
        self.name = name
        self.enabled = (_env_rank() if rank is None else rank) == 0
        self._warmup_end = _warmup_end(schedule)
        self._rows: dict[str, list[float]] = {k: [] for k in ("step", "loss", "tokens", "lr", "time")}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loss-eta") if background else None
        self._in_flight: Future[None] | None = None
        self._since_logs = 0
        self._last_at = -math.inf
        self._latest: LiveResult | None = None
        self._error: str | None = None
        self._warned: set[str] = set()
        self.plan_note: str | None = None  # how a callback read the plan (or why it could not)
        self.skipped = 0  # forecasts that were due while one was still running
        self.forecasts = 0  # forecasts made
        self.forecast_seconds = 0.0  # their wall time, in all
        self.before: list[str] = []  # what the siblings' law forecast before the first step
        if siblings is not None and self.enabled:
            self._siblings(siblings)

    # -- the trainer's side ------------------------------------------------------------
    def update(
        self,
        step: int,
        loss: float,
        *,
        tokens: float | None = None,
        lr: float | None = None,
        time: float | None = None,
    ) -> None:
        """Record one logged step (``time``: Unix seconds, now by default) and start a
        forecast if one is due. Never raises."""
        if not self.enabled:
            return
        try:
            self._append(step, loss, tokens, lr, clock.time() if time is None else time)
            if self._due():
                self._start()
        except Exception as exc:  # noqa: BLE001 - the trainer comes first
            self._fail(exc)

    def forecast(self) -> LiveResult | None:
        """Forecast now, on the rows so far, in this thread (waiting for a forecast in
        flight first); None while :attr:`status` says it waits. Never raises."""
        if not self.enabled or self._waiting() is not None:
            return None
        in_flight = self._in_flight
        if in_flight is not None:
            in_flight.result()
        self._run()
        return self._latest

    @property
    def rows(self) -> int:
        """Rows logged so far."""
        return len(self._rows["step"])

    @property
    def latest(self) -> LiveResult | None:
        """The last forecast that finished, or None."""
        return self._latest

    @property
    def status(self) -> str:
        """What the live forecast is doing, in a few words (and how the plan was read, when a
        callback read it)."""
        said = self._doing()
        return said if self.plan_note is None or not self.enabled else f"{said}; plan: {self.plan_note}"

    def _doing(self) -> str:
        if not self.enabled:
            return "off: not rank 0"
        waiting = self._waiting()
        if waiting is not None:
            return f"waiting: {waiting}"
        if self._error is not None:
            return f"failed: {self._error}"
        latest = self._latest
        if latest is None:
            return "no forecast yet"
        return f"forecast at step {latest.step} ({latest.rows} rows)"

    def snapshot(self) -> dict[str, list[float]]:
        """The rows so far, to keep in a checkpoint (:meth:`restore` puts them back)."""
        with self._lock:
            return {key: list(values) for key, values in self._rows.items()}

    def restore(self, rows: Mapping[str, Sequence[float]]) -> None:
        """Put back rows a checkpoint kept, before the rows this run logs from here on: a run
        resumed from a checkpoint picks its history back up, and its smoothing does not
        restart from nothing. Rows at steps the resumed run logs again are replaced then."""
        columns = [list(rows.get(key, ())) for key in self._rows]
        if len({len(c) for c in columns}) != 1:
            raise ConfigError("the rows to restore differ in length between columns")
        with self._lock:
            for key, values in zip(self._rows, columns):
                self._rows[key][:0] = [float(v) for v in values]

    def close(self) -> None:
        """Wait for a forecast in flight and stop the background thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # -- internals -------------------------------------------------------------------------
    def _siblings(self, siblings: Any) -> None:
        """Fit the siblings' law off the training thread, ahead of the first forecast (which
        is skipped, not queued, while it runs)."""
        def fit() -> None:
            from tracker_plugin.live.siblings import before_the_run  # the law's modules load here too

            self.before = before_the_run(self, siblings)

        if self._pool is None:
            fit()
        else:
            self._in_flight = self._pool.submit(fit)

    def _append(self, step: int, loss: float, tokens: float | None, lr: float | None, time: float) -> None:
        with self._lock:
            for key, value in (("step", step), ("loss", loss), ("tokens", tokens), ("lr", lr), ("time", time)):
                self._rows[key].append(math.nan if value is None else float(value))
            self._since_logs += 1

    def _due(self) -> bool:
        now = clock.monotonic()
        if self._since_logs < self.every_logs or now - self._last_at < self.every_seconds:
            return False
        return self._waiting() is None

    def _start(self) -> None:
        self._since_logs = 0
        self._last_at = clock.monotonic()
        if self._pool is None:
            self._run()
            return
        if self._in_flight is not None and not self._in_flight.done():
            self.skipped += 1  # never queued: the next due forecast sees newer rows
            return
        self._in_flight = self._pool.submit(self._run)

    def _run(self) -> None:
        try:
            started = clock.perf_counter()
            frame = self._frame()
            history = self._history(frame)
            analysis = run_analysis(history, self.config)
            took = clock.perf_counter() - started
            self._latest = LiveResult(int(history.step[-1]), len(frame), analysis, live_metrics(analysis), took)
            self.forecasts += 1
            self.forecast_seconds += took
            self._error = None
        except Exception as exc:  # noqa: BLE001 - reported in the status, warned about once
            self._fail(exc)

    def _history(self, frame: pd.DataFrame) -> History:
        """The frame as a validated history; with no tokens and no tokens per step, on steps."""
        on_steps = "tokens" not in frame and self.tokens_per_step is None
        # Every row was logged with a loss: a NaN there is a logged NaN, dropped and counted.
        history = build_history(frame, run=self.name, columns=_COLUMNS, batch_size=1.0 if on_steps else self.tokens_per_step,
                                logged_nan_loss=np.isnan(frame["loss"].to_numpy(float)))
        return replace(history, on_steps=True, batch_source="none: the analysis is on steps") if on_steps else history

    def _frame(self) -> pd.DataFrame:
        with self._lock:
            columns = {key: np.asarray(values, float) for key, values in self._rows.items()}
        # A key never given (no tokens, no lr) is left out, not passed as a column of blanks.
        frame = pd.DataFrame({k: v for k, v in columns.items() if k in ("step", "loss") or not np.isnan(v).all()})
        if "tokens" in frame and self.tokens_per_step is None:
            frame["batch"] = batch_from_tokens(frame["step"], frame["tokens"])
        return frame

    def _waiting(self) -> str | None:
        """What the first forecast still waits for, or None."""
        rows = len(self._rows["step"])
        if rows < self.min_rows:
            return f"{rows} of {self.min_rows} logged rows"
        last = self._rows["step"][-1]
        if self._warmup_end is not None and last < self._warmup_end:
            return f"the lr warmup, which ends at step {self._warmup_end:g} (now {last:g})"
        return None

    def _fail(self, exc: BaseException) -> None:
        self._error = warn_once(exc, self._warned)


def warn_once(exc: BaseException, warned: set[str]) -> str:
    """Warn about ``exc`` once per kind of exception (``warned`` keeps the kinds); the message."""
    message = str(exc) if isinstance(exc, TrackerPluginError) else f"{type(exc).__name__}: {exc}"
    kind = type(exc).__name__
    if kind not in warned:
        warned.add(kind)
        warnings.warn(f"tracker_plugin live forecast: {message} (training goes on)", RuntimeWarning, stacklevel=3)
    return message


# The live frame's own names. The optional ones stay among the defaults (which hold
# "tokens", "lr" and "time"): a frame without them is read without them, not refused.
_COLUMNS = Columns().with_overrides(step="step", loss="loss", batch=("batch", *Columns().batch))


def _line(analysis: Analysis, k: int) -> str:
    result = analysis.targets[k]
    head = f"{result.target:.2f} {result.status}"
    if result.status in (Status.NOT_REACHED, Status.UNLIKELY) and result.best_loss is not None and result.end_step is not None:
        # No crossing to say: the best smoothed loss so far, where the run ends, the chance.
        ends = "ended" if result.run_finished else "ends"
        chance = "" if result.p_reach_within_plan is None else f", P(within plan) {result.p_reach_within_plan:.2f}"
        return (f"{head}: best {result.best_loss:.3f} at step {result.best_step:,.0f}, "
                f"the run {ends} at step {result.end_step:,.0f}{chance}")
    if result.step is None or not math.isfinite(result.step):
        return head
    text = f"{head} at step {result.step:,.0f}"
    if result.step_interval is not None:
        # As every table writes an interval: 7,854–∞ (7,854-inf where the output cannot say ∞).
        text += f" ({analysis.config.interval:.0%}: {interval(result.step_interval, lambda v: f'{v:,.0f}')})"
    when = None if analysis.timing is None else analysis.timing.targets[k]
    if when is not None and when.seconds_left is not None and when.seconds_left > 0:
        text += f", in {duration(when.seconds_left)}"
        if when.seconds_left_interval is not None:
            text += f" ({interval(when.seconds_left_interval, duration)})"
    return text


def plan_schedule(plan: PlanLike | None, total_steps: int | None) -> LrSchedule | None:
    """The plan as an :class:`LrSchedule`: as given, parsed from a spec, or a function of
    the step evaluated at every step up to ``total_steps``; None stays None (then a
    ``total_steps`` alone gives a plan that knows its end and not its shape).

    Raises
    ------
    ConfigError
        A function without ``total_steps``, or a spec that does not parse.
    """
    if isinstance(plan, LrSchedule):
        return plan
    if isinstance(plan, str):
        return LrSchedule.parse_spec(plan)
    if plan is None:
        return None if total_steps is None else LrSchedule.steps_only(total_steps, name="total_steps")
    if total_steps is None:
        raise ConfigError("a plan given as a function of the step needs total_steps")
    steps = np.arange(int(total_steps) + 1)
    return LrSchedule.from_table(steps.tolist(), [float(plan(int(s))) for s in steps], source="plan function")


def live_metrics(analysis: Analysis) -> dict[str, float]:
    """The numbers a live forecast logs: the annotation's ``when_<target>_...`` (finite
    only), and the smoothed loss at the run's last step with its tokens
    (:data:`~tracker_plugin.keys.SERIES`, rounded as ``annotate`` writes them), so the
    trackers draw the smoothed curve as the run trains."""
    metrics = annotation_metrics(analysis)
    found = {key: float(value) for key, value in metrics.items() if value is not None and math.isfinite(value)}
    smoothed = float(analysis.smoothed[-1])
    if math.isfinite(smoothed) and analysis.history.step[-1] >= analysis.fit_start_step:
        found[SERIES_LOSS] = float(f"{smoothed:.6g}")
        if not analysis.on_steps:
            found[SERIES_TOKENS] = float(round(float(analysis.history.tokens[-1])))
    return found


def _warmup_end(schedule: LrSchedule | None) -> float | None:
    if schedule is None or schedule.source == STEPS_ONLY:
        return None
    lr = np.asarray(schedule.lr, float)
    first = int(np.argmax(lr >= _WARMUP_SHARE * lr.max()))
    return float(schedule.steps[first]) if first > 0 else None


def _env_rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
