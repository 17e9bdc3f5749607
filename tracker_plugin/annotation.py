"""What an analysis writes back to a run: namespaced keys and artifacts.

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
    loss_eta/last_step, loss_eta/last_tokens   how far the analysed history went
    loss_eta/settings_hash, loss_eta/settings, loss_eta/loss_key, loss_eta/version
    loss_eta/progress                          the source's marker of how far the run had got
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .analysis import Analysis, AnalysisConfig
from .history import Columns
from .report import to_json

__all__ = [
    "ARTIFACT_JSON",
    "ARTIFACT_PNG",
    "NAMESPACE",
    "Annotation",
    "Previous",
    "build_annotation",
    "settings_hash",
    "settings_of",
    "target_slug",
]

NAMESPACE = "loss_eta"
ARTIFACT_JSON = "loss_eta.json"
ARTIFACT_PNG = "loss_eta.png"
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")

_TARGET_FIELDS = ("tokens", "step", "tokens_low", "tokens_high", "step_low", "step_high", "extrapolation_factor")


def target_slug(target: float) -> str:
    """``3.3 -> 'target_3p30'``, ``2.875 -> 'target_2p875'``, ``-1 -> 'target_m1p00'``."""
    text = f"{abs(target):.4f}".rstrip("0")
    whole, _, frac = text.partition(".")
    frac = frac.ljust(2, "0")
    return f"target_{'m' if target < 0 else ''}{whole}p{frac}"


def settings_of(config: AnalysisConfig, columns: Columns, batch_size: float | None) -> dict[str, Any]:
    """Every setting that changes what gets written, as plain JSON values."""
    from . import __version__

    settings = asdict(config)
    settings["batch_schedule"] = None if config.batch_schedule is None else str(config.batch_schedule)
    settings["lr_schedule"] = None if config.lr_schedule is None else config.lr_schedule.fingerprint()
    settings["columns"] = asdict(columns)
    settings["batch_size"] = batch_size
    settings["version"] = __version__
    return settings


@dataclass(frozen=True)
class Previous:
    """What an earlier annotation of a run recorded: enough to tell if it is still current.

    ``progress`` is the source's marker of how far the run had got (its last step, or a
    file's size and time), recorded in ``loss_eta/progress``.
    """

    settings_hash: str | None
    progress: str | None


@dataclass(frozen=True)
class Annotation:
    """Everything written back to one run."""

    run: str
    metrics: dict[str, float | None]
    labels: dict[str, str]
    report: dict[str, Any]
    progress: str
    settings_hash: str
    analysis: Analysis = field(repr=False, compare=False)

    def keys(self) -> list[str]:
        return sorted([*self.metrics, *self.labels])

    def report_bytes(self) -> bytes:
        """``loss_eta.json``: the same document as ``analyze --json``, byte-stable."""
        return (json.dumps(self.report, indent=2, sort_keys=True) + "\n").encode()

    def plot_bytes(self) -> bytes:
        """``loss_eta.png``, rendered on demand (matplotlib is imported only here)."""
        import io

        from .plot import plot_analysis

        buffer = io.BytesIO()
        plot_analysis(self.analysis, buffer)
        return buffer.getvalue()

    def is_current(self, previous: Previous | None) -> bool:
        """Did an earlier annotation already record this one (same settings, same progress)?"""
        return previous == Previous(self.settings_hash, self.progress)


def settings_hash(settings: dict[str, Any]) -> str:
    """A short, stable fingerprint of :func:`settings_of`'s result."""
    canonical = json.dumps(settings, sort_keys=True, default=list, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build_annotation(analysis: Analysis, settings: dict[str, Any], progress: str | None = None) -> Annotation:
    """The keys and artifacts for ``analysis``, made with ``settings`` (see :func:`settings_of`).

    ``progress`` is the source's marker of how far the run had got; it defaults to the
    last analysed step.
    """
    fingerprint = settings_hash(settings)
    progress = progress if progress is not None else f"step {analysis.observed_step}"
    metrics: dict[str, float | None] = {
        f"{NAMESPACE}/last_step": float(analysis.observed_step),
        f"{NAMESPACE}/last_tokens": analysis.observed_tokens,
    }
    labels = {
        f"{NAMESPACE}/settings_hash": fingerprint,
        f"{NAMESPACE}/progress": progress,
        f"{NAMESPACE}/settings": json.dumps(settings, sort_keys=True, default=list),
        f"{NAMESPACE}/loss_key": analysis.loss_key,
        f"{NAMESPACE}/version": str(settings.get("version", "")),
    }
    for result in analysis.targets:
        prefix = f"{NAMESPACE}/{target_slug(result.target)}"
        labels[f"{prefix}/status"] = result.status
        low_high = result.tokens_interval or (None, None)
        step_low_high = result.step_interval or (None, None)
        values = (result.tokens, result.step, *low_high, *step_low_high, result.extrapolation_factor)
        for name, value in zip(_TARGET_FIELDS, values):
            metrics[f"{prefix}/{name}"] = _finite(value)
    report = to_json(analysis)
    report["settings_hash"] = fingerprint
    report["progress"] = progress
    return Annotation(
        run=analysis.run,
        metrics=metrics,
        labels=labels,
        report=report,
        progress=progress,
        settings_hash=fingerprint,
        analysis=analysis,
    )


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)
