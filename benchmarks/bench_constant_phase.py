"""Why forecasts inside a long constant-lr stretch come out early: the origin of the lr area.

    python benchmarks/bench_constant_phase.py [--quick] [--runs ../shared/data/runs] [--runs-time ../shared/data/runs-time]

At constant lr the schedule-aware laws reduce to ``L0 + A * (S / S_ref) ** -alpha``, with
``S`` the lr area summed from step 0 (warmup included). That origin is an assumption: a run
whose progress per unit of lr area early on differs (a warmup that counts for more or less
than its area, a log that starts later) bends the fitted curve to make up for it, and the
fit trades ``alpha`` against ``L0``, which moves long extrapolations. The diagnosis fits
the law by least squares (scipy's ``curve_fit``, the raw loss, the logged lr) with the
origin fixed and with a free shift ``S + s0 * S_ref``, and prints the mean signed
``ln(predicted / true tokens)`` of the law's crossing under the protocol of the backtest,
on a synthetic run of a known power law in tokens (a 500-step warmup, sparse and dense
evals, fitted from step 1000) and on the visible MPL constant-lr runs.

Beside it, the same cuts forecast by the product's own laws (``backtest_run``, the plan
given, from the analysis's own fit start), whose power term takes the shift as a fitted
parameter (``shift`` in a fit's params; see ``core/models/schedule_law.py``).

Last, the speedruns' lateness a quarter of the way in (their records' plans given, the
train loss): at the cut, the same power law is fitted with ``L0`` free and with ``L0`` held
at what a fit of the whole constant phase finds, from the analysis's own fit start and from
half-way to the cut. Printed: both fits' ``L0`` and ``alpha``, the held fit's mean squared
residual over the free one's, ``n_eff * ln`` of that ratio (a likelihood ratio, ``n_eff``
the rows discounted by the residuals' lag-1 autocorrelation; above 2.7 the data prefer the
free fit at 90%), and the signed error of each fit's crossing of the target at 60% of the
steps (inside the constant phase).
"""

from __future__ import annotations

import glob
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_calibration import load, speedrun_plans
from harness import RUNS, RUNS_TIME, parser
from scipy.optimize import curve_fit

import tracker_plugin as tp
from tracker_plugin.core.analysis import AnalysisConfig
from tracker_plugin.core.backtest import backtest_run, logged_plan
from tracker_plugin.core.clock import build_timeline
from tracker_plugin.core.smoothing import token_window_ema
from tracker_plugin.plan.schedule import LrSchedule
from tracker_plugin.testing.synthetic import synthetic_run

CUTS = ((0.25, 0.6), (0.25, 0.8), (0.25, 0.95), (0.5, 0.6), (0.5, 0.8), (0.5, 0.95))


def errors(history: tp.History, window: float, free: bool, start_step: float = 0.0) -> np.ndarray:
    """Signed ln(predicted / true tokens) at each cut and target of :data:`CUTS`."""
    smoothed = token_window_ema(history.loss, history.step, history.batch, window)
    timeline = build_timeline(history, logged_plan(history), clock="tokens", batch_schedule=None)
    area, tokens = timeline.area_at(history.step.astype(float)), history.tokens
    out = []
    for f, q in CUTS:
        rows = int(np.searchsorted(tokens, f * tokens[-1], side="right"))
        begin = int(np.searchsorted(history.step, start_step))
        x, y = area[begin:rows], history.loss[begin:rows]
        ref = x[-1]

        def law(s: np.ndarray, l0: float, a: float, alpha: float, s0: float = 0.0, ref: float = ref) -> np.ndarray:
            return l0 + a * ((s + s0 * ref) / ref) ** -alpha

        p0 = [y.min() * 0.8, y[0] - y.min(), 0.3] + ([0.01] if free else [])
        lower = [-np.inf, 0.0, 0.01] + ([-x[0] / ref * 0.99] if free else [])
        upper = [np.inf, np.inf, 3.0] + ([1.0] if free else [])
        params, _ = curve_fit(law, x, y, p0=p0, bounds=(lower, upper), maxfev=20000)
        target = float(np.interp(q * tokens[-1], tokens, smoothed))
        truth = tokens[np.flatnonzero(smoothed <= target)[0]]
        grid = np.linspace(ref, area[-1] * 3, 200_000)
        below = np.flatnonzero(law(grid, *params) <= target)
        if not len(below):
            out.append(np.nan)
            continue
        at = grid[below[0]]
        predicted = float(np.interp(at, area, tokens)) if at <= area[-1] else tokens[-1] * at / area[-1]
        out.append(np.log(predicted / truth))
    return np.array(out)


def forecast_errors(history: tp.History, window: float, model: str) -> np.ndarray:
    """Signed ln(predicted / true tokens) of the product's forecast with ``model`` at each
    cut of :data:`CUTS` (the backtest's protocol, the logged lr as the plan); NaN without one."""
    config = AnalysisConfig(targets=(1.0,), ema_token_window=window)
    fractions = sorted({f for f, _ in CUTS})
    quantiles = sorted({q for _, q in CUTS})
    cases = backtest_run(history, config, fit_fractions=fractions, target_quantiles=quantiles, models=(model,))
    found = {(c.fit_fraction, c.target_quantile): c for c in cases}
    out = []
    for cut in CUTS:
        case = found[cut]
        out.append(np.log(case.tokens / case.true_tokens) if case.tokens else np.nan)
    return np.array(out)


def _power_fit(area: np.ndarray, loss: np.ndarray, l0: float | None = None) -> tuple[float, float, float, Callable[[np.ndarray], np.ndarray]]:
    """``L0 + A * (S / S_ref) ** -alpha`` by least squares (``L0`` held when given): ``L0``,
    ``alpha``, the mean squared residual and the fitted curve."""
    ref = area[-1]
    if l0 is None:
        (c, a, alpha), _ = curve_fit(lambda s, c, a, k: c + a * (s / ref) ** -k, area, loss,
                                     p0=[loss.min() * 0.8, 0.3, 0.3], bounds=([0, 0, 0.01], [np.inf, np.inf, 3.0]), maxfev=20000)
    else:
        c = l0
        (a, alpha), _ = curve_fit(lambda s, a, k: c + a * (s / ref) ** -k, area, loss,
                                  p0=[max(loss[-1] - c, 1e-3), 0.3], bounds=([0, 0.01], [np.inf, 3.0]), maxfev=20000)

    def curve(s: np.ndarray) -> np.ndarray:
        return c + a * (s / ref) ** -alpha

    return float(c), float(alpha), float(np.mean((loss - curve(area)) ** 2)), curve


def _effective_rows(residuals: np.ndarray) -> float:
    """Rows discounted by the residuals' lag-1 autocorrelation, as the fit's prior strength is."""
    r1 = float(np.clip(np.corrcoef(residuals[:-1], residuals[1:])[0, 1], -0.99, 0.99))
    return len(residuals) * (1 - r1) / (1 + r1)


def floor_profile(history: tp.History, window: float, plan: LrSchedule, constant_end: float,
                  fraction: float = 0.25, quantile: float = 0.6) -> list[str]:
    """One line per fit start: the free and the held-``L0`` fits at the cut (see the module's doc)."""
    smoothed = token_window_ema(history.loss, history.step, history.batch, window)
    timeline = build_timeline(history, plan, clock="tokens", batch_schedule=None)
    steps = history.step.astype(float)
    area = timeline.area_at(steps)
    cut = fraction * history.last_step
    rows = int(np.searchsorted(steps, cut, side="right"))
    start = analyze_start(history.head(rows), window, plan)
    target = float(np.interp(quantile * history.last_step, steps, smoothed))
    truth = steps[np.flatnonzero(smoothed <= target)[0]]
    grid = np.linspace(cut, 4 * history.last_step, 100_000)
    grid_area = timeline.area_at(grid)
    whole = (steps >= start) & (steps <= constant_end)
    l0_whole, alpha_whole, _, _ = _power_fit(area[whole], history.loss[whole])
    out = []
    for begin in (start, max(start, cut / 2)):
        part = (steps >= begin) & (steps <= cut)
        x, y = area[part], history.loss[part]
        free, held = _power_fit(x, y), _power_fit(x, y, l0_whole)
        ratio = held[2] / free[2]
        n_eff = _effective_rows(y - free[3](x))
        errors = []
        for fit in (free, held):
            below = np.flatnonzero(fit[3](grid_area) <= target)
            errors.append(f"{np.log(grid[below[0]] / truth):+.3f}" if len(below) else "never")
        out.append(f"from step {begin:6,.0f}: free L0 {free[0]:.3f} alpha {free[1]:.3f} | whole phase L0 {l0_whole:.3f} "
                   f"alpha {alpha_whole:.3f} | held: mse x{ratio:.4f}, LR {n_eff * math.log(ratio):5.1f} | "
                   f"error free {errors[0]}, held {errors[1]}")
    return out


def analyze_start(history: tp.History, window: float, plan: LrSchedule) -> float:
    """The fit start the analysis itself chooses on ``history``."""
    return float(tp.analyze(history, [1.0], ema_token_window=window, lr_schedule=plan).fit_start_step)


def main() -> None:
    options = parser(__doc__, quick="one seed of the synthetic run, two runs of each real set")
    options.add_argument("--runs", type=Path, default=RUNS)
    options.add_argument("--runs-time", type=Path, default=RUNS_TIME)
    args = options.parse_args()
    seeds, real = (1, 2) if args.quick else (4, None)
    print("mean signed ln(predicted/true) at (f, q) =", " ".join(f"({f:g},{q:g})" for f, q in CUTS))
    print(f"synthetic power law in tokens, constant lr, warmup 500 of 40,000 steps, {seeds} seeds, fitted from step 1000:")
    for every in (500, 20):
        found: dict[bool, list[np.ndarray]] = {False: [], True: []}
        laws: dict[str, list[np.ndarray]] = {"lr-annealing": [], "multi-power": []}
        for seed in range(seeds):
            frame = synthetic_run(40_000, log_every=every, seed=seed, noise=0.02, warmup=500)
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "run.csv")
                frame.to_csv(path, index=False)
                history = tp.load_csv(path)
            for free in found:
                found[free].append(errors(history, 1e8, free, start_step=1000.0))
            for model in laws:
                laws[model].append(forecast_errors(history, 1e8, model))
        for free, values in found.items():
            shown = " ".join(f"{v:+.3f}" for v in np.nanmean(values, axis=0))
            print(f"  eval every {every:3} steps, origin {'free ' if free else 'fixed'}: {shown}")
        for model, values in laws.items():
            shown = " ".join(f"{v:+.3f}" for v in np.nanmean(values, axis=0))
            print(f"  eval every {every:3} steps, forecast {model:12}: {shown}")
    print("visible constant-lr runs (the logged lr as the plan): origin fixed | free | forecast lr-annealing | multi-power")
    for path in sorted(glob.glob(str(args.runs / "mpl-*-constant-*.csv")))[:real]:
        history, window = load(path)
        held, shifted = (" ".join(f"{v:+.3f}" for v in errors(history, window, x)) for x in (False, True))
        ours = " | ".join(" ".join(f"{v:+.3f}" for v in forecast_errors(history, window, m))
                          for m in ("lr-annealing", "multi-power"))
        print(f"  {os.path.basename(path):28} {held} | {shifted} | {ours}")
    print("speedruns a quarter of the way in, their records' plans given, train loss (target at 60% of the steps):")
    plans = speedrun_plans()
    for path in [p for p in sorted(glob.glob(str(args.runs_time / "*.csv"))) if Path(p).stem in plans][:real]:
        name = Path(path).stem
        history, window = load(path)
        if int(np.searchsorted(history.step, 0.25 * history.last_step, side="right")) < 50:
            print(f"  {name:42} too few rows at the cut")
            continue
        for line in floor_profile(history, window, plans[name], _constant_end(plans[name])):
            print(f"  {name:42} {line}")


def _constant_end(plan: LrSchedule) -> float:
    """The plan's last step at its peak lr (where its warmdown starts)."""
    return max(step for step, lr in zip(plan.steps, plan.lr) if lr >= plan.peak)


if __name__ == "__main__":
    main()
