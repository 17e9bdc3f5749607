"""The picture written in a plot's place when a job draws none (``--no-plot``).

A bulk job that reads its answers from the runs table or ``loss_eta.json`` has no use for
the plot, the costliest part of writing a run back. The run still gets a
``loss_eta.png``: a small picture that says no plot was drawn, carrying the same metadata
as a plot (the report's digest, which the trackers check), so that a plot left from an
earlier annotation is replaced, never shown beside a newer forecast. Drawn with Pillow
(which matplotlib installs), in a few milliseconds and without loading matplotlib.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from functools import cache
from typing import Any

__all__ = ["LINES", "skipped_plot"]

LINES = (
    "loss_eta: no plot drawn (--no-plot).",
    "The forecast is in loss_eta.json and in the run's when_* keys.",
)


def skipped_plot(metadata: Mapping[str, str]) -> bytes:
    """A PNG that says no plot was drawn, with ``metadata`` in its text chunks."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    for key, value in metadata.items():
        info.add_text(key, value)
    buffer = io.BytesIO()
    _words().copy().save(buffer, format="png", pnginfo=info)  # a copy: threads may save at once
    return buffer.getvalue()


@cache
def _words() -> Any:
    """The picture's pixels, the same for every run: drawn once (the words' rendering was
    most of a picture's cost)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (480, 24 + 24 * len(LINES)), "white")
    draw = ImageDraw.Draw(image)
    for k, line in enumerate(LINES):
        draw.text((12, 12 + 24 * k), line, fill="black")
    return image
