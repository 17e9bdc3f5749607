"""The floor of a plot: matplotlib's bare figure of the same parts, measured beside it.

A bare figure has the plot's size and dpi, as many axes, and on each the same lines (the
same points, on the same x and y scales), and nothing else: no title, axis labels,
legend, texts, grid or layout; it is drawn by the Agg backend and saved to PNG with
matplotlib's defaults. What a plot costs beyond it is what its words, marks and layout
cost. :func:`linear_png` is the same figure with linear axes (on a log axis matplotlib
writes its tick labels in mathtext, which costs more): the stricter floor.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["bare_png", "in_turns_cpu", "linear_png"]


def bare_png(fig: Any, *, scales: bool = True) -> Callable[[], bytes]:
    """A call that draws and saves ``fig``'s bare figure (its lines copied now)."""
    size, dpi = tuple(fig.get_size_inches()), fig.dpi
    axes = [([(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)) for line in ax.lines],
             ax.get_xscale() if scales else "linear", ax.get_yscale() if scales else "linear") for ax in fig.axes]

    def draw() -> bytes:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        bare = Figure(figsize=size, dpi=dpi)
        FigureCanvasAgg(bare)
        for lines, xscale, yscale in axes:
            ax = bare.add_subplot()
            for x, y in lines:
                ax.plot(x, y)
            ax.set_xscale(xscale)
            ax.set_yscale(yscale)
        buffer = io.BytesIO()
        bare.savefig(buffer, format="png")
        return buffer.getvalue()

    return draw


def linear_png(fig: Any) -> Callable[[], bytes]:
    """:func:`bare_png` on linear axes."""
    return bare_png(fig, scales=False)


def in_turns_cpu(calls: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """The median CPU seconds of each call over ``repeat`` rounds, the calls taking turns
    in each round (a machine that slows down slows each alike), after one call of each."""
    for call in calls.values():
        call()
    spent: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(max(1, repeat)):
        for name, call in calls.items():
            start = time.process_time()
            call()
            spent[name].append(time.process_time() - start)
    return {name: float(np.median(values)) for name, values in spent.items()}
