"""What every trainer's callback does, whatever the trainer: one live session of a training run.

A :class:`LiveSession` holds the settings a callback is made with, starts the
:class:`~tracker_plugin.live.LiveForecast` once the trainer says where the plan and the
tokens come from, logs each new forecast (and stops the run when asked), forecasts and
annotates at the end, and keeps every exception out of the training loop. The Hugging Face
and Lightning callbacks only translate their trainer's events into these calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.live.sinks import TrackerSinks, say_progress, should_stop
from tracker_plugin.live.stream import (
    DEFAULT_EVERY_LOGS,
    DEFAULT_EVERY_SECONDS,
    MIN_ROWS,
    LiveForecast,
    LiveResult,
    warn_once,
)
from tracker_plugin.plan.schedule import LrSchedule

__all__ = ["LiveSession", "SessionView", "Settings", "callback_settings"]

# Log a forecast's metrics at a step, to whatever the trainer logs to.
LogMetrics = Callable[[dict[str, float], int], None]


@dataclass(frozen=True)
class Settings:
    """How a callback forecasts (see the callbacks' parameters)."""

    targets: tuple[float, ...]
    config: AnalysisConfig | None = None
    every_logs: int = DEFAULT_EVERY_LOGS
    every_seconds: float = DEFAULT_EVERY_SECONDS
    min_rows: int = MIN_ROWS
    stop_when_unreachable: bool = False
    min_fraction: float = 0.5
    progress: bool = False
    annotate_at_end: bool = True
    background: bool = True  # False: forecast inside the logging call (tests, replays)
    siblings: Any = None  # the finished runs of the run's configuration (see LiveForecast)


@dataclass
class LiveSession:
    """One training run's live forecast, driven by a trainer's callback."""

    settings: Settings
    live: LiveForecast | None = None
    plan_note: str = "no plan read yet"
    sinks: TrackerSinks = field(default_factory=TrackerSinks)
    _logged: LiveResult | None = None
    _warned: set[str] = field(default_factory=set)

    def start(
        self,
        *,
        rank_zero: bool,
        scheduler: Any,
        total_steps: int | None,
        tokens_per_step: float | None,
        name: str,
        on_trainer_steps: Callable[[LrSchedule | None, int], LrSchedule | None] = lambda plan, total: plan,
    ) -> LiveForecast:
        """Start forecasting: the plan read from ``scheduler`` up to ``total_steps`` (put on the
        trainer's step numbering by ``on_trainer_steps``), else inferred from the log."""
        if not rank_zero:  # rank 0 forecasts for all
            self.live = LiveForecast(self.settings.targets, rank=1, background=False)
            return self.live
        schedule = None
        if scheduler is not None and total_steps is not None:
            from tracker_plugin.plan.scheduler import plan_from_scheduler

            read = plan_from_scheduler(scheduler, total_steps)
            schedule, self.plan_note = on_trainer_steps(read.schedule, total_steps), read.how
        else:
            self.plan_note = "no scheduler stepped every step, or no planned steps: the plan is inferred from the log"
        s = self.settings
        self.live = LiveForecast(
            s.targets, plan=schedule, total_steps=total_steps if schedule is None else None,
            tokens_per_step=tokens_per_step, config=s.config, every_logs=s.every_logs,
            every_seconds=s.every_seconds, min_rows=s.min_rows, rank=0, name=name, background=s.background,
            siblings=s.siblings,
        )
        self.live.plan_note = self.plan_note
        return self.live

    def emit(self, step: int, max_steps: int | None, log: LogMetrics) -> bool:
        """Log the newest forecast, once; True when the run should stop (when asked to)."""
        latest = None if self.live is None or not self.live.enabled else self.live.latest
        if latest is None or latest is self._logged:
            return False
        self._logged = latest
        log(dict(latest.metrics), step)
        if self.settings.progress:
            say_progress(latest)
        s = self.settings
        return s.stop_when_unreachable and should_stop(latest, step, max_steps, s.min_fraction)

    def finish(self, step: int, log: LogMetrics, annotate: Callable[[AnalysisConfig, LiveResult | None, float | None], None]) -> None:
        """The last forecast, logged, and the annotation written (when asked)."""
        if self.live is None or not self.live.enabled:
            return
        self.live.close()  # a forecast in flight lands first
        latest = self.live.latest
        result = latest if latest is not None and latest.rows == self.live.rows else self.live.forecast()
        if result is not None and result is not self._logged:
            self._logged = result
            log(dict(result.metrics), step)
        if self.settings.annotate_at_end:
            annotate(self.live.config, result, self.live.tokens_per_step)

    def guarded(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, any exception warned about once per kind: training goes on."""
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - the trainer comes first
            warn_once(exc, self._warned)
            return None


def callback_settings(targets: Sequence[float], **given: Any) -> Settings:
    """The settings of a callback made with ``targets`` and its keyword arguments."""
    return Settings(targets=tuple(float(t) for t in targets), **given)


class SessionView:
    """What a callback shows of its session: the forecast, how the plan was read, the sinks."""

    session: LiveSession

    @property
    def live(self) -> LiveForecast | None:
        """The live forecast, once training has begun."""
        return self.session.live

    @property
    def plan_note(self) -> str:
        """How the plan was read from the trainer's scheduler, or why it could not be."""
        return self.session.plan_note

    @property
    def sinks(self) -> TrackerSinks:
        """The trackers the forecasts went to, and what the end-of-training annotation did."""
        return self.session.sinks
