"""The plot of runs not started: each plan's predicted smoothed loss, its targets and its
end, over the siblings' own curves (matplotlib, imported only when a plot is asked for).

Drawn with the single-run plot's pieces (:mod:`.plot_parts`): its figure, legend outside
the axes, loss framing and tick formats. On a linear axis of tokens (steps for runs with
none): a plan is one run, from the end of its warmup to its planned end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from tracker_plugin.core.planned import PlannedRun
from tracker_plugin.core.status import Status
from tracker_plugin.report.plot_axis import tick_steps, tick_tokens
from tracker_plugin.report.plot_parts import (
    LOCK,
    SMALLEST,
    figure,
    frame_loss,
    keep_layout,
    lay_out,
    outside_legend,
    plot_format,
    printable,
    save,
    short,
)

__all__ = ["plan_figure", "plot_plans"]

_PLAN_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
_SIBLING = "0.6"  # the siblings' grey
_TARGET = "0.35"


def plot_plans(plans: Sequence[PlannedRun], path: str | os.PathLike[str] | BinaryIO) -> None:
    """Write the plot of ``plans`` (one, or several compared on one budget): PNG, PDF or
    SVG as the path's extension says."""
    plot_format(path)
    with LOCK:
        save(_draw(plans), path)


def plan_figure(plans: Sequence[PlannedRun]) -> Any:
    """The matplotlib Figure :func:`plot_plans` writes (for tests and notebooks)."""
    with LOCK:
        return _draw(plans)


def _draw(plans: Sequence[PlannedRun]) -> Any:
    fig = figure()
    ax = fig.add_subplot()
    on_steps = plans[0].on_steps
    losses = _siblings(ax, plans[0])
    ends = []
    for k, plan in enumerate(plans):
        color = _PLAN_COLORS[k % len(_PLAN_COLORS)]
        losses.append(_curve(ax, plan, color, len(plans) > 1))
        ends.append(plan.plan_end.tokens)
    targets = [t.target for t in plans[0].targets]
    for target in targets:
        ax.axhline(target, color=_TARGET, linestyle=":", linewidth=0.9)
        ax.annotate(f"target {target:g}", xy=(0.0, target), xycoords=("axes fraction", "data"), xytext=(3, 2),
                    textcoords="offset points", fontsize=SMALLEST, color=_TARGET)
    for k, plan in enumerate(plans):
        _crossings(ax, plan, _PLAN_COLORS[k % len(_PLAN_COLORS)])
    frame_loss(ax, losses, targets)
    ax.set_xlim(0.0, max(ends) * 1.04)
    from matplotlib.ticker import FuncFormatter

    tick = tick_steps if on_steps else tick_tokens
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick(v)))
    ax.set_xlabel("steps" if on_steps else "tokens")
    ax.set_ylabel("predicted smoothed loss (EMA)")
    title = f"planned: {short(printable(plans[0].run), 80)}" if len(plans) == 1 else f"{len(plans)} plans on one budget"
    ax.set_title(f"{title}\n{_law_words(plans[0])}", fontsize=10)
    ax.grid(True, alpha=0.25)
    outside_legend(ax)
    lay_out(fig)
    keep_layout(fig)
    return fig


def _siblings(ax: Any, plan: PlannedRun) -> list[np.ndarray]:
    """The siblings' smoothed curves as they ran (thin grey): what the law was fitted on."""
    kept = set(plan.project.siblings)
    losses = []
    for k, e in enumerate(e for e in plan.project.evidence if e.run in kept):
        steps = np.array([p[0] for p in e.curve], float)
        loss = np.array([p[1] for p in e.curve], float)
        start = steps >= e.fit_start
        x = steps[start] if plan.on_steps else e.tokens_at(steps[start])
        ax.plot(x, loss[start], color=_SIBLING, linewidth=0.8, alpha=0.8,
                label=f"siblings ({len(kept)}), as they ran" if k == 0 else None, gid=f"sibling:{e.run}")
        losses.append(loss[start])
    return losses


def _curve(ax: Any, plan: PlannedRun, color: str, named: bool) -> np.ndarray:
    """The plan's predicted smoothed loss to its end, and its end with the loss interval."""
    steps, tokens, loss = plan.curve
    end = plan.plan_end
    x_all = steps if plan.on_steps else tokens
    keep = x_all <= (end.step if plan.on_steps else end.tokens) * 1.0001
    label = f"{short(printable(plan.run), 48)}: predicted" if named else "predicted smoothed loss"
    x_end = end.step if plan.on_steps else end.tokens
    # To the plan's end itself (the curve's points fall between steps).
    ax.plot(np.r_[x_all[keep], x_end], np.r_[loss[keep], end.loss], color=color, linewidth=1.8, label=label,
            gid=f"plan:{plan.run}")
    low, high = end.loss_interval if end.loss_interval is not None else (end.loss, end.loss)
    ax.errorbar([x_end], [end.loss], yerr=[[end.loss - low], [high - end.loss]], fmt="s", color=color, markersize=5,
                capsize=4, label=f"plan end {end.loss:.4f} ({plan.interval:.0%}: {low:.4f}-{high:.4f})",
                gid=f"plan_end:{plan.run}")
    ax.axvline(x_end, color=color, linestyle="--", linewidth=0.8, alpha=0.6)
    return loss[keep]


def _crossings(ax: Any, plan: PlannedRun, color: str) -> None:
    """Each target the plan reaches within its end: a diamond at the forecast, its interval
    a bar along the target's line."""
    for t in plan.targets:
        if t.status != Status.FORECAST or t.tokens is None or t.step is None:
            continue
        x = t.step if plan.on_steps else t.tokens
        pair = t.step_interval if plan.on_steps else t.tokens_interval
        xerr = None if pair is None else [[x - pair[0]], [pair[1] - x]]
        ax.errorbar([x], [t.target], xerr=xerr, fmt="D", color=color, markersize=6, capsize=3, elinewidth=2.5,
                    alpha=0.9, gid=f"crossing:{plan.run}:{t.target:g}")
        p = "" if t.p_reach_within_plan is None else f", P {t.p_reach_within_plan:.2f}"
        ax.annotate(f"{(tick_steps if plan.on_steps else tick_tokens)(x)}{p}", xy=(x, t.target), xytext=(4, 5),
                    textcoords="offset points", fontsize=SMALLEST, color=color)


def _law_words(plan: PlannedRun) -> str:
    pooled = plan.project.pooled
    law = "no law" if pooled is None else pooled.law
    return f"the {law} law of {len(plan.project.siblings)} finished sibling run(s)"
