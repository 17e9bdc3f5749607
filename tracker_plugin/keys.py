"""The names written back to a run: its keys and artifact files.

Shared by the report (which makes the values) and the trackers (which write them).

Both trackers get the same keys, made for the runs table a person reads: each target's
keys start with the target (``when_3p3_...`` for 3.3), so the columns tell the targets
apart at the UI's default width (MLflow's shows about 13 characters), and carry a unit
in the name. Only what a person sorts or reads is a key of its own; the settings, hashes
and provenance go together into one tag, ``loss_eta``, and the JSON report. Every key is
a ``[_a-zA-Z0-9]`` name with no ``/``: W&B sorts and filters on such names, MLflow accepts
them, and MLflow's run page, which puts a chart section for each ``prefix/`` ahead of the
run's own charts, files ours with the run's own metrics (charts are sorted by name there:
``loss_eta_smoothed`` beside the run's loss, ``when`` late). The numbers are rounded to
what a person reads (4 significant digits of billions of tokens, 3 of hours); the report
keeps every digit.

For a target of 3.3::

    when_3p3          text: a mark and the number first, then the status word, then the
                      detail (see tracker_plugin.report.target_text), for instance
                      "✓ 10.18B tok · reached · step 7,763"
                      "≈ 24.10B tok · forecast · 80%: 21.00B–27.90B · step 18,390 · in 5.2 h, 2026-12-04 02:10 UTC"
                      "✗ 3.412 best · not_reached · the plan ends at 37.20B tok, step 47,266 · P(within plan) 0.03"
    when_3p3_Btok     billions of tokens where the smoothed loss reaches 3.3 (none on the step axis)
    when_3p3_step     the step there
    when_3p3_hours    hours from the run's last logged row until then (0 once reached)

Every run, targets or not, where its planned end is known::

    loss_eta_end      the smoothed loss forecast at the plan's end (as logged there, once
                      the run has reached it): the number a sweep is sorted on
    loss_eta_end_text the same with its interval, where and by what, for instance
                      "3.289 · 80%: 3.277–3.300 · step 24,000 · project law"
    loss_eta          one JSON text: version, loss key, settings and their hash, the source's
                      progress, the last analysed step and tokens, the report's and the plot's
                      digests, the smoothed series' digest
    loss_eta_marker   written last: the hash of every key above

Two series, for the trackers' own charts (not single values: metric histories, at the
run's own steps, about a thousand points; see :data:`SERIES_POINTS`)::

    loss_eta_smoothed the token-window smoothed loss the forecast reads, from the fit start
    loss_eta_tokens   the tokens at the same steps: the x-axis a chart draws it against

The series are committed to by the provenance tag's digest, not by the marker's hash of
the keys' latest values, and a dropped target leaves them alone.

A target no longer asked for has its numbers cleared and its text set to ``stale``.
Keys of the earlier layout (``loss_eta/...``) are ours too: a run holding them is
annotated again, and they are cleared (tags removed; MLflow keeps a cleared metric as NaN,
the one thing it cannot remove).

The artifacts are ``loss_eta.json`` and ``loss_eta.png`` at the top of the run's
artifacts, where MLflow's compare view lists them (it shows no folders).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ARTIFACT_JSON",
    "ARTIFACT_PNG",
    "JSON_PATH",
    "KEY_PATTERN",
    "LEGACY_ARTIFACTS",
    "MARKER",
    "PLAN_END",
    "PLAN_END_TEXT",
    "PNG_DIGEST",
    "PNG_PATH",
    "PROVENANCE",
    "SERIES",
    "SERIES_LOSS",
    "SERIES_POINTS",
    "SERIES_TOKENS",
    "STALE",
    "TARGET_METRICS",
    "content_hash",
    "is_legacy",
    "is_own",
    "is_series",
    "plot_digest",
    "report_digest",
    "target_collision",
    "target_key",
    "target_slug",
]

NAMESPACE = "loss_eta"
PROVENANCE = NAMESPACE  # the one tag of settings, hashes and provenance (a JSON text)
MARKER = f"{NAMESPACE}_marker"  # written last: content_hash() of every other key of ours
ARTIFACT_JSON = "loss_eta.json"
ARTIFACT_PNG = "loss_eta.png"
# At the top of the run's artifacts: MLflow's compare view lists no folders.
JSON_PATH = ARTIFACT_JSON
PNG_PATH = ARTIFACT_PNG
# Where the earlier layout kept them: removed when a run is annotated again.
LEGACY_ARTIFACTS = (f"{NAMESPACE}/{ARTIFACT_JSON}", f"{NAMESPACE}/{ARTIFACT_PNG}")
# The PNG's metadata key for the digest of the report it was drawn with.
PNG_DIGEST = f"{NAMESPACE}_report_sha256"
STALE = "stale"  # the text of a target no longer in the settings
TARGET_PREFIX = "when"
# Each target's numbers, after ``when_<target>_``: the unit is in the name. Extend here.
TARGET_METRICS = ("Btok", "step", "hours")
# The smoothed loss as a series, and the tokens at its steps (see the module's docstring).
SERIES_LOSS = f"{NAMESPACE}_smoothed"
SERIES_TOKENS = f"{NAMESPACE}_tokens"
SERIES = (SERIES_LOSS, SERIES_TOKENS)
SERIES_POINTS = 1000  # about this many points per series: what a chart draws
# The smoothed loss at the plan's end: a number to sort on, and its text (see the docstring).
PLAN_END = f"{NAMESPACE}_end"
PLAN_END_TEXT = f"{NAMESPACE}_end_text"
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_]+$")
_TARGET_KEY = re.compile(rf"^{TARGET_PREFIX}_m?\d+(p\d+)?(e\d+)?(_({'|'.join(TARGET_METRICS)}))?$")
_DECIMALS = 8  # targets are told apart to this many decimals
_FIXED_BELOW = 1e6  # larger targets are written in scientific notation


def is_own(key: str) -> bool:
    """A key this tool writes (today's layout or the earlier one), never a user's."""
    return key in (PROVENANCE, MARKER, PLAN_END, PLAN_END_TEXT) or is_series(key) or bool(_TARGET_KEY.match(key)) or is_legacy(key)


def is_series(key: str) -> bool:
    """One of the series of ours (:data:`SERIES`): a metric history, not a single value."""
    return key in SERIES


def is_legacy(key: str) -> bool:
    """A key of the earlier layout (``loss_eta/target_3p30/tokens``, ``loss_eta/marker``)."""
    return key.startswith(f"{NAMESPACE}/")


def target_slug(target: float) -> str:
    """``3.3 -> '3p3'``, ``3.30004 -> '3p30004'``, ``3 -> '3'``, ``-1 -> 'm1'``, ``2.5e6 -> '2p5e6'``.

    As few decimals as the target has, up to eight: targets that differ in the first
    eight decimals get different keys (see :func:`target_collision` for the rest).
    """
    size = abs(float(target))
    if size >= _FIXED_BELOW:
        mantissa, _, exponent = f"{size:.{_DECIMALS}e}".partition("e")
        text = _decimal(mantissa) + f"e{int(exponent)}"
    else:
        text = _decimal(f"{size:.{_DECIMALS}f}")
    return f"{'m' if target < 0 else ''}{text}"


def _decimal(fixed: str) -> str:
    whole, _, frac = fixed.partition(".")
    frac = frac.rstrip("0")
    return f"{whole}p{frac}" if frac else whole


def target_key(target: float, measure: str | None = None) -> str:
    """``(3.3) -> 'when_3p3'`` (the target's text), ``(3.3, 'step') -> 'when_3p3_step'``."""
    base = f"{TARGET_PREFIX}_{target_slug(target)}"
    return base if measure is None else f"{base}_{measure}"


def target_collision(targets: Iterable[float]) -> str | None:
    """Why these targets cannot be written (two would share keys, and the second would
    silently overwrite the first), or None when each has keys of its own."""
    seen: dict[str, float] = {}
    for target in targets:
        key = target_key(target)
        if key in seen and seen[key] != target:
            return (
                f"targets {seen[key]!r} and {target!r} would both be written to {key}; "
                f"give targets that differ within {_DECIMALS} decimals"
            )
        seen[key] = target
    return None


def report_digest(report: bytes) -> str:
    return hashlib.sha256(report).hexdigest()[:16]


def plot_digest(name: str | None, drawn: bool = True) -> str:
    """The digest of what the plot draws from beyond the report: the run's name in its
    title (a renamed run must get its plot redrawn), its axis, and whether it is drawn at
    all (``--no-plot`` writes a picture that says it is not). Inputs, not the PNG's bytes,
    which differ between machines and matplotlib versions. The run's reference is left
    out: it is the run's identity, and a synced offline run keeps its annotation."""
    inputs: dict[str, object] = {"name": name, "x": "tokens"}
    if not drawn:  # a drawn plot's digest is the one earlier versions wrote
        inputs["drawn"] = False
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def content_hash(held: Mapping[str, Any]) -> str:
    """The hash the marker commits to: every key of ours but the marker, as the run holds it.

    Numbers and text are told apart by type; a missing number, ``None`` and NaN are the
    same (MLflow keeps a cleared metric as NaN, W&B removes the key), as are a missing
    text and ``None`` (a removed tag). The series are left out: their latest value is not
    what was written (the provenance tag holds their digest).
    """
    canonical: dict[str, Any] = {}
    for key, value in held.items():
        if not is_own(key) or key == MARKER or is_series(key):
            continue
        if isinstance(value, str):
            canonical[key] = ["s", value]
        elif value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if not math.isnan(number):
                canonical[key] = ["n", repr(number)]
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]
