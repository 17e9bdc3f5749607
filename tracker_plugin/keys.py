"""The names written back to a run: namespaced keys and artifact files.

Shared by the report (which makes the values) and the trackers (which write them).

Both trackers get the same keys. Every key is made of ``[_a-zA-Z0-9]`` segments joined by
``/``, which W&B can sort and filter on and MLflow accepts (``[/\\w.\\- :]``, at most 250
characters). Numbers go in ``metrics`` (MLflow metrics, W&B summary values); text goes in
``labels`` (MLflow tags, W&B summary strings). Each target always writes every one of
its keys, with ``None`` where there is no value, so a rerun that changes a status never
leaves a stale number behind.

The keys, for a target of 3.3::

    loss_eta/target_3p30/status            reached | extrapolated | unreachable | failed
    loss_eta/target_3p30/tokens            tokens where the smoothed loss reaches 3.3
    loss_eta/target_3p30/step              the step there
    loss_eta/target_3p30/tokens_low, tokens_high, step_low, step_high   the interval
    loss_eta/target_3p30/extrapolation_factor
    loss_eta/target_3p30/seconds           the run's clock at the crossing, from its first logged time
    loss_eta/target_3p30/hours_left, hours_left_low, hours_left_high   hours from the last row, and the interval
    loss_eta/target_3p30/eta_unix          Unix time of the crossing (when the clock is Unix time)
    loss_eta/target_3p30/p_by_deadline     P(reached by the deadline), when one is given
    loss_eta/last_step, loss_eta/last_tokens   how far the analysed history went
    loss_eta/settings_hash, loss_eta/settings, loss_eta/loss_key, loss_eta/version
    loss_eta/progress                          the source's marker of how far the run had got
"""

from __future__ import annotations

import re

__all__ = ["ARTIFACT_JSON", "ARTIFACT_PNG", "KEY_PATTERN", "MARKERS", "NAMESPACE", "target_slug"]

NAMESPACE = "loss_eta"
ARTIFACT_JSON = "loss_eta.json"
ARTIFACT_PNG = "loss_eta.png"
# Written last: together they mark an annotation complete.
MARKERS = (f"{NAMESPACE}/settings_hash", f"{NAMESPACE}/progress")
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


def target_slug(target: float) -> str:
    """``3.3 -> 'target_3p30'``, ``2.875 -> 'target_2p875'``, ``-1 -> 'target_m1p00'``."""
    text = f"{abs(target):.4f}".rstrip("0")
    whole, _, frac = text.partition(".")
    frac = frac.ljust(2, "0")
    return f"target_{'m' if target < 0 else ''}{whole}p{frac}"
