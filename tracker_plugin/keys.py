"""The names written back to a run: namespaced keys and artifact files.

Shared by the report (which makes the values) and the trackers (which write them).

Both trackers get the same keys. Every key is made of ``[_a-zA-Z0-9]`` segments joined by
``/``, which W&B can sort and filter on and MLflow accepts (``[/\\w.\\- :]``, at most 250
characters). Numbers go in ``metrics`` (MLflow metrics, W&B summary values); text goes in
``labels`` (MLflow tags, W&B summary strings). Each target always writes every one of
its keys, with ``None`` where there is no value, so a rerun that changes a status never
leaves a stale number behind; a target dropped from the settings has its numbers cleared
and its status set to ``stale``.

The keys, for a target of 3.3::

    loss_eta/target_3p30/status            reached | forecast | forecast_beyond_plan | not_reached |
                                           unreachable | not_enough_data | stale
                                           (earlier versions wrote extrapolated and failed: such an
                                           annotation is redone)
    loss_eta/target_3p30/tokens            tokens where the smoothed loss reaches 3.3
    loss_eta/target_3p30/step              the step there
    loss_eta/target_3p30/tokens_low, tokens_high, step_low, step_high   the interval
    loss_eta/target_3p30/extrapolation_factor
    loss_eta/target_3p30/p_within_plan     P(reached within the planned run), when the plan's end is known
    loss_eta/target_3p30/best_loss         not_reached: the best smoothed loss of the run
    loss_eta/target_3p30/seconds           the run's clock at the crossing, from its first logged time
    loss_eta/target_3p30/hours_left, hours_left_low, hours_left_high   hours from the last row, and the interval
    loss_eta/target_3p30/eta_unix          Unix time of the crossing (when the clock is Unix time)
    loss_eta/target_3p30/p_by_deadline     P(reached by the deadline), when one is given
    loss_eta/last_step, loss_eta/last_tokens   how far the analysed history went

On the step axis (a run with no tokens to be had) every token key is None: never steps.
    loss_eta/settings_hash, loss_eta/settings, loss_eta/loss_key, loss_eta/version
    loss_eta/progress                          the source's fingerprint of the analysed history
    loss_eta/report_sha256                     the digest of loss_eta/loss_eta.json
    loss_eta/plot_sha256                       the digest of what loss_eta.png draws from beyond the report
    loss_eta/marker                            written last: the hash of every key above
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ARTIFACT_DIR",
    "ARTIFACT_JSON",
    "ARTIFACT_PNG",
    "JSON_PATH",
    "KEY_PATTERN",
    "MARKER",
    "MARKERS",
    "NAMESPACE",
    "PLOT_DIGEST",
    "PNG_PATH",
    "REPORT_DIGEST",
    "RETIRED_STATUSES",
    "STALE",
    "TARGET_LABELS",
    "TARGET_METRICS",
    "target_collision",
    "content_hash",
    "is_own",
    "plot_digest",
    "report_digest",
    "target_slug",
]

NAMESPACE = "loss_eta"
ARTIFACT_DIR = NAMESPACE  # our artifacts' folder in a run: never the root, next to the user's files
ARTIFACT_JSON = "loss_eta.json"
ARTIFACT_PNG = "loss_eta.png"
JSON_PATH = f"{ARTIFACT_DIR}/{ARTIFACT_JSON}"
PNG_PATH = f"{ARTIFACT_DIR}/{ARTIFACT_PNG}"
# Written last; its value is content_hash() of every other key of ours the run holds.
MARKER = f"{NAMESPACE}/marker"
MARKERS = (MARKER,)
REPORT_DIGEST = f"{NAMESPACE}/report_sha256"
PLOT_DIGEST = f"{NAMESPACE}/plot_sha256"
STALE = "stale"  # the status of a target no longer in the settings
# Each target's keys, after ``loss_eta/target_X/``: numbers, then text. Extend here.
TARGET_METRICS = (
    "tokens", "step", "tokens_low", "tokens_high", "step_low", "step_high", "extrapolation_factor", "p_within_plan",
    "best_loss",
)
# Status words earlier versions wrote (today's are tracker_plugin.core.status.Status): a run
# whose annotation holds one is annotated again.
RETIRED_STATUSES = ("extrapolated", "failed")
TARGET_LABELS = ("status",)
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")
_DECIMALS = 8  # targets are told apart to this many decimals
_FIXED_BELOW = 1e6  # larger targets are written in scientific notation


def is_own(key: str) -> bool:
    return key.startswith(f"{NAMESPACE}/")


def target_slug(target: float) -> str:
    """``3.3 -> 'target_3p30'``, ``3.30004 -> 'target_3p30004'``, ``-1 -> 'target_m1p00'``.

    At least two decimals, up to eight: targets that differ in the first eight decimals
    get different keys (see :func:`target_collision` for the rest).
    """
    size = abs(float(target))
    if size >= _FIXED_BELOW:
        mantissa, _, exponent = f"{size:.{_DECIMALS}e}".partition("e")
        whole, _, frac = mantissa.rstrip("0").partition(".")
        power = int(exponent)
        text = f"{whole}p{frac.ljust(2, '0')}e{power}"
    else:
        whole, _, frac = f"{size:.{_DECIMALS}f}".rstrip("0").partition(".")
        text = f"{whole}p{frac.ljust(2, '0')}"
    return f"target_{'m' if target < 0 else ''}{text}"


def target_collision(targets: Iterable[float]) -> str | None:
    """Why these targets cannot be written (two would share keys, and the second would
    silently overwrite the first), or None when each has keys of its own."""
    seen: dict[str, float] = {}
    for target in targets:
        slug = target_slug(target)
        if slug in seen and seen[slug] != target:
            return (
                f"targets {seen[slug]!r} and {target!r} would both be written to {NAMESPACE}/{slug}; "
                f"give targets that differ within {_DECIMALS} decimals"
            )
        seen[slug] = target
    return None


def report_digest(report: bytes) -> str:
    return hashlib.sha256(report).hexdigest()[:16]


def plot_digest(name: str | None) -> str:
    """The digest of what the plot draws from beyond the report: the run's name in its
    title (a renamed run must get its plot redrawn) and its axis. Inputs, not the PNG's
    bytes, which differ between machines and matplotlib versions. The run's reference is
    left out: it is the run's identity, and a synced offline run keeps its annotation."""
    inputs = {"name": name, "x": "tokens"}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def content_hash(held: Mapping[str, Any]) -> str:
    """The hash the marker commits to: every key of ours but the marker, as the run holds it.

    Numbers and text are told apart by type; a missing number, ``None`` and NaN are the
    same (MLflow keeps a cleared metric as NaN, W&B removes the key).
    """
    canonical: dict[str, Any] = {}
    for key, value in held.items():
        if not is_own(key) or key == MARKER:
            continue
        if isinstance(value, str):
            canonical[key] = ["s", value]
        elif value is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if not math.isnan(number):
                canonical[key] = ["n", repr(number)]
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]
