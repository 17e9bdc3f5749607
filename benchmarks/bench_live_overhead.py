"""What the live forecast costs a training run: step time with and without the callback.

    python benchmarks/bench_live_overhead.py [--size 4] [--steps 1000] [--repeats 5] [--every-seconds 0.5]

A small GPT-2 (``tests.doubles.tiny_trainers``, ``--size`` 4: four layers of width
64, about 10 ms a step here; size 1 is the tests' model, 2.6 ms a step) trains ``--steps``
steps with the real Hugging Face ``Trainer`` on the CPU, logging every 10 steps, reporting to no tracker (the
trackers' own cost is theirs), alternately without the callback and with
``LossEtaCallback`` at the default cadence (every 10 logged rows and 300 s), ``--repeats``
times each, in this one process; the order alternates so that warm-up and drift fall on
both. The step time is the mean wall time between consecutive steps' ends (the first 10
left out), what the loop itself feels; the whole ``train()`` is printed beside it, which
also holds the forecast and the annotation at the end of training (a fixed cost that a
real run's hours dilute). Beside them, measured directly: the share of ``train()`` spent
inside the callback's events on the training thread, and the forecasts' own time on their
thread. On the tests' 2.6 ms step (``--size 1``) the step time measured 0.9-1.1% longer
with the callback, of which 0.2% is inside its events: the rest is outside them (the
Trainer dispatching every event to one more callback, and run-to-run noise of about 1%),
a fixed cost per step that a 10 ms step dilutes. Printed: the median step time of
each and the overhead (the median over back-to-back pairs of their ratio), which must be
at most 1%; then the same with a cadence of
``--every-seconds`` (a forecast twice a second, far more than the default), and from the
forecasts' own time the share one forecast every 300 s takes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import parser

from tests.doubles.tiny_trainers import train_hf
from tracker_plugin.live.stream import DEFAULT_EVERY_LOGS, DEFAULT_EVERY_SECONDS

# Time spent inside the callback's events, on the training thread (measured, not estimated).
INSIDE = {"seconds": 0.0}


def _timed(event: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return event(*args, **kwargs)
        finally:
            INSIDE["seconds"] += time.perf_counter() - started

    return wrapper


def time_the_callback() -> None:
    from tracker_plugin.live.hf import LossEtaCallback

    for name in ("on_train_begin", "on_log", "on_evaluate", "on_train_end"):
        setattr(LossEtaCallback, name, _timed(getattr(LossEtaCallback, name)))


def per_step(steps: int, *, callback: bool, every_seconds: float, size: int) -> tuple[float, dict]:
    INSIDE["seconds"] = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        seen = train_hf(Path(tmp), schedule="cosine", steps=steps, report_to=[], targets=[2.0],
                        every_logs=DEFAULT_EVERY_LOGS, every_seconds=every_seconds, callback=callback,
                        logging_steps=10, size=size)
    return seen["step_seconds"], {**seen, "inside": INSIDE["seconds"]}


def compare(steps: int, repeats: int, every_seconds: float, size: int) -> tuple[float, float, float, list[dict], float, float]:
    """Median step times without and with the callback, and the median of each pair's ratio
    (a pair runs back to back, so slow drift of the machine cancels), less 1."""
    bare, timed, seen, bare_total, timed_total = [], [], [], [], []
    for k in range(repeats):
        for callback in ((False, True) if k % 2 == 0 else (True, False)):
            seconds, what = per_step(steps, callback=callback, every_seconds=every_seconds, size=size)
            (timed if callback else bare).append(seconds)
            (timed_total if callback else bare_total).append(what["train_seconds"])
            if callback:
                seen.append(what)
    overhead = statistics.median(t / b for t, b in zip(timed, bare)) - 1
    medians = statistics.median(bare_total), statistics.median(timed_total)
    return statistics.median(bare), statistics.median(timed), overhead, seen, *medians


def main() -> int:
    options = parser(__doc__, quick="the tests' GPT-2 (--size 1), 300 steps, two runs each")
    options.sized("--size", 4, 1, "layers of the GPT-2", type=int)
    options.sized("--steps", 1000, 300, "training steps", type=int)
    options.sized("--repeats", 5, 2, "runs with and without the callback", type=int)
    options.add_argument("--every-seconds", type=float, default=0.5)
    args = options.parse_args()
    started = time.perf_counter()
    print(f"GPT-2 of size {args.size}, HF Trainer, {args.steps} steps, logging every 10, {args.repeats} runs each, medians")
    time_the_callback()
    print(f"{'cadence':<26} {'s/step without':>15} {'s/step with':>12} {'overhead':>9} {'forecasts/run':>14}"
          f" {'whole train() without / with':>30} {'in the callback':>16} {'forecasting':>12}")
    rows = [("default (10 logs, 300 s)", DEFAULT_EVERY_SECONDS), (f"every {args.every_seconds:g} s", args.every_seconds)]
    cost: float | None = None
    for label, every in rows:
        bare, timed, overhead, seen, bare_total, timed_total = compare(args.steps, args.repeats, every, args.size)
        forecasts = statistics.median(s["forecasts"] for s in seen)
        whole = f"{bare_total:.2f} s / {timed_total:.2f} s"
        inside = statistics.median(s["inside"] / s["train_seconds"] for s in seen)
        off = statistics.median(s["forecast_seconds"] for s in seen)
        print(f"{label:<26} {bare:>15.5f} {timed:>12.5f} {overhead:>8.2%} {forecasts:>14g} {whole:>30}"
              f" {inside:>16.3%} {off:>10.3f} s")
        if every != DEFAULT_EVERY_SECONDS and forecasts:
            cost = off / forecasts
    print("target at the default cadence: overhead <= 1%. 'in the callback' is the share of train() spent inside")
    print("its events on the training thread; 'forecasting' the forecasts' wall time per run, on their own thread")
    if cost is not None:
        print(f"one forecast takes {cost * 1000:.1f} ms on its thread; at one per {DEFAULT_EVERY_SECONDS:g} s that is "
              f"{cost / DEFAULT_EVERY_SECONDS:.4%} of a run's time (the rows of a long run make it longer)")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
