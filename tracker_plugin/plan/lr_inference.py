"""The lr plan behind a forecast when no plan is passed: inferred from the logged lr.

:func:`infer_lr_schedule` finds the decay a log has begun to show (or holds the lr where
nothing shows one), and :func:`plausible_schedules` the plans a log cannot tell apart, over
which a forecast on an inferred or assumed plan draws its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tracker_plugin.plan.lr_schedule import STEPS_ONLY, LrSchedule, _decay, _dedupe

__all__ = ["PLAN_DRAWS", "Plan", "infer_lr_schedule", "plausible_schedules"]


# --- inferring a plan from the logged lr --------------------------------------------------

# The lr is "at its peak" within 1% of it, as in the warmup detection.
_AT_PEAK = 0.99
# A shape explains the log when its rms misfit is below this share of the peak.
# Rows a candidate decay is scored on (see _best_decay).
_DECAY_POINTS = 4_096
_SHAPE_TOLERANCE = 0.01
# ... and once the lr has decayed by this share of the peak: before that the total is a guess.
_MIN_DECAY = 0.05


@dataclass(frozen=True)
class Plan:
    """The lr plan behind a forecast (None: the last logged lr continues), and the
    sentence that says where it came from or what is assumed instead."""

    schedule: LrSchedule | None
    note: str

    @property
    def total_steps(self) -> float | None:
        return None if self.schedule is None else self.schedule.total_steps

    @property
    def source(self) -> str:
        """Where the plan came from: the schedule's source (``params``, ``spec``, ``file``,
        ``log``, ``inferred``, ``steps-only``), or ``assumed`` when none is known and the lr
        is held."""
        return "assumed" if self.schedule is None else self.schedule.source


# What a forecast on an lr whose future nothing shows rests on (see plausible_schedules).
_UNKNOWN_END = ("nothing says how the run ends, so the forecast is taken over the cooldowns it might end in, "
                "beside the lr held as logged; pass lr_schedule for the run's own plan")


def infer_lr_schedule(step: np.ndarray, lr: np.ndarray | None, planned: LrSchedule | None = None) -> Plan:
    """Recognise a cosine or linear decay in the logged lr and extend it to its end.

    The decay is taken to start where the lr last sat at its peak; a cosine and a linear
    decay are fitted to what follows, with the total steps and the final lr free. A shape
    is accepted when it explains the log to within 1% of the peak and the lr has already
    fallen by at least 5% of the peak. Otherwise nothing is inferred and the note says so:
    the central plan holds the last logged lr, and the forecast is taken over the cooldowns
    the run might end in (:func:`plausible_schedules`).

    ``planned``: a ``steps-only`` plan from the run's params (its total known, its shape
    not). The decay then ends at that total, and what is built keeps the source
    ``steps-only`` (an unknown shape for the interval); with no decay in the log, the last
    logged lr is held to the total.
    """
    known = _known_total(planned, step)
    if lr is None or len(lr) < 2 or not np.isfinite(lr).any():
        return _unknown_shape(planned, step, None, "no lr logged")
    ok = np.isfinite(lr)
    s, v = np.asarray(step, float)[ok], np.asarray(lr, float)[ok]
    peak = float(v.max())
    if peak <= 0:
        return _unknown_shape(planned, s, v, "the logged lr is zero")
    last = float(v[-1])
    at_peak = np.flatnonzero(v >= _AT_PEAK * peak)
    if last >= _AT_PEAK * peak:
        return _unknown_shape(
            planned, s, v,
            f"the lr has stayed at its peak ({peak:.3g}) since step {s[at_peak[0]]:,.0f}",
        )
    best = _inferred_decay(s, v, peak, known)
    if best is None:
        return _unknown_shape(
            planned, s, v,
            f"the planned lr after step {s[-1]:,.0f} is unknown (no decay fits the logged lr, last {last:.3g}, "
            f"{last / peak:.2g}x the peak)",
        )
    _, shape, total, final, start = best
    warmup = float(s[at_peak[0]])
    steps, values = _decay_knots(s, v, start, shape, total, final)
    ending = "" if known is None else f", ending at the planned step {known:,.0f}"
    description = (
        f"{shape} decay from step {s[start]:,.0f} to {final:.2g}x the peak at step {total:,.0f} "
        f"(inferred from the logged lr{ending}; warmup to step {warmup:,.0f})"
    )
    if planned is not None and known is not None:
        schedule = replace(planned, steps=steps, lr=values, description=f"{planned.description}; {description}")
        return Plan(schedule, f"{_STEPS_ONLY_NOTE}: {schedule.description}")
    schedule = LrSchedule(steps, values, total, "inferred", description)
    passed = _passed_total(planned, s)
    return Plan(schedule, f"planned lr inferred from the log: {description}" + (f"; {passed}" if passed else ""))


def _inferred_decay(
    s: np.ndarray, v: np.ndarray, peak: float, total: float | None = None
) -> tuple[float, str, float, float, int] | None:
    """(rms, shape, total, final fraction, start row) of the decay that best explains the
    logged lr ``v`` (finite, peak > 0); None when none does or the lr has hardly fallen.
    ``total``: the decay's end when the params give it (else it is searched)."""
    decayed = (peak - float(v[-1])) / peak
    at_peak = np.flatnonzero(v >= _AT_PEAK * peak)
    best = None
    # A cosine leaves its peak slowly (within 1% for a while), a WSD decay abruptly: try
    # the decay starting where the lr first reached its peak and where it last sat there.
    for start in {int(np.argmax(v)), int(at_peak[-1])}:
        if decayed < _MIN_DECAY or len(v) - start < 4:
            continue
        found = _best_decay(s[start:], v[start:], peak, total)
        if found is not None and (best is None or found[0] < best[0]):
            best = (*found, start)
    return best


# The report's one line for a plan whose total is known and whose shape is not.
_STEPS_ONLY_NOTE = "planned steps known, schedule shape not: interval widened"


def _known_total(planned: LrSchedule | None, step: np.ndarray) -> float | None:
    """The planned total of a steps-only plan, when it is still ahead of the log."""
    if planned is None or planned.source != STEPS_ONLY or planned.total_steps is None:
        return None
    last = float(np.nanmax(np.asarray(step, float))) if len(step) else 0.0
    return planned.total_steps if planned.total_steps > last else None


def _passed_total(planned: LrSchedule | None, step: np.ndarray) -> str:
    """The note's words for a steps-only plan whose total the log has already passed (a
    total that cannot be the run's end is set aside, and the report says so), else ''."""
    if planned is None or planned.source != STEPS_ONLY or planned.total_steps is None:
        return ""
    if _known_total(planned, step) is not None:
        return ""
    last = float(np.nanmax(np.asarray(step, float))) if len(step) else 0.0
    return f"the planned last step ({planned.total_steps:,.0f}) is behind the log's last ({last:,.0f}) and is set aside"


def _unknown_shape(planned: LrSchedule | None, s: np.ndarray, v: np.ndarray | None, why: str) -> Plan:
    """No shape in the log (``why``; ``v`` None: no lr logged): the held lr, to the planned
    total when one is known, and the note says what the forecast is taken over."""
    known = _known_total(planned, s)
    if planned is None or known is None:
        passed = _passed_total(planned, s)
        plan_words = f": {passed}" if passed else (" and no planned schedule" if v is None else "")
        return Plan(None, f"{why}{plan_words}: {_UNKNOWN_END}")
    if v is None or not len(v) or float(np.nanmax(v)) <= 0:
        knots: tuple[tuple[float, ...], tuple[float, ...]] = ((0.0, known), (1.0, 1.0))
    else:
        keep = np.unique(np.linspace(0, len(s) - 1, min(len(s), _DECAY_POINTS)).round().astype(np.int64))
        knots = (tuple(s[keep].tolist()) + (known,), tuple(v[keep].tolist()) + (float(v[-1]),))
    schedule = replace(planned, steps=knots[0], lr=knots[1], description=f"{planned.description}; the last logged lr held to it")
    ending = f"the forecast is taken over the cooldowns that end at the planned step {known:,.0f}, beside the lr kept to it"
    return Plan(schedule, f"{_STEPS_ONLY_NOTE}: {why}: {ending}")


def _decay_knots(
    s: np.ndarray, v: np.ndarray, start: int, shape: str, total: float, final: float
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The knots of the logged lr up to row ``start``, then of a decay to ``final`` x the peak at ``total``."""
    peak = float(v.max())
    knots = [(float(x), float(y)) for x, y in zip(s[: start + 1], v[: start + 1])]
    knots += [(a, peak * b) for a, b in _decay(float(s[start]), total, final, shape)][1:]
    steps, values = zip(*_dedupe(knots))
    return tuple(steps), tuple(values)


def _best_decay(
    s: np.ndarray, v: np.ndarray, peak: float, total: float | None = None
) -> tuple[float, str, float, float] | None:
    """(rms, shape, total, final fraction) of the decay that best explains ``v``; None if none does."""
    best: tuple[float, str, float, float] | None = None
    for shape, totals, final, rms in _decay_fits(s, v, peak, total):
        k = int(np.argmin(rms))  # the first of equals, as a scan in order of totals keeps
        if best is None or rms[k] < best[0]:
            best = (float(rms[k]), shape, float(totals[k]), float(final[k]))
    if best is None or best[0] > _SHAPE_TOLERANCE:
        return None
    return best


def _decay_fits(
    s: np.ndarray, v: np.ndarray, peak: float, total: float | None = None
) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Per shape, every candidate decay's ``(shape, totals, final fractions, rms misfits)``.

    Every candidate decay is scored at once on at most :data:`_DECAY_POINTS` rows, spread
    evenly over the log: the lr is smooth, so more rows refine nothing at the 1% tolerance
    and would only make the search grow with the log's length.
    """
    if len(s) > _DECAY_POINTS:
        keep = np.unique(np.linspace(0, len(s) - 1, _DECAY_POINTS).round().astype(np.int64))
        s, v = s[keep], v[keep]
    start, last = float(s[0]), float(s[-1])
    # The decay's end: searched, or the planned total when the params give it.
    totals = start + (last - start) * np.geomspace(1.0 + 1e-3, 50.0, 400) if total is None else np.array([total])
    y = v / peak
    x = (s - start)[None, :] / (totals - start)[:, None]
    out = []
    for shape in ("cosine", "linear"):
        c = 0.5 * (1.0 + np.cos(np.pi * x)) if shape == "cosine" else 1.0 - x
        # y = c + final * (1 - c): the final fraction by least squares, kept in [0, 1)
        d = 1.0 - c
        dd = np.einsum("ij,ij->i", d, d)
        with np.errstate(invalid="ignore", divide="ignore"):
            final = np.where(dd > 0, np.clip(np.einsum("ij,ij->i", d, y - c) / dd, 0.0, 0.999), 0.0)
        rms = np.sqrt(np.mean((c + final[:, None] * d - y) ** 2, axis=1))
        out.append((shape, totals, final, rms))
    return out


# --- plans the log cannot tell apart ------------------------------------------------------

# Plans a forecast on an inferred or assumed plan draws its interval over.
PLAN_DRAWS = 4
# With the lr still at its peak (or none logged) nothing says when the run ends: the log is
# taken to be at a uniformly random share of its run, between these (the run ends at
# ``last step / share``) ...
_ELAPSED = (0.1, 0.8)
# ... and to end in a WSD cooldown: a linear decay to 0 over one of these shares of the run
# (the usual 20%, and the longer cooldowns of speedrun-style runs). Leave-one-family-out
# validation (benchmarks/bench_calibration.py's cases, the plan inferred) does not tell
# (0.1, 0.2), (0.2,), (0.3,), (0.4,) and these apart: point losses within 3%, the folds
# split, and the choice forecasts the family left out no better (see the README).
_COOLDOWN_SHARES = (0.2, 0.4)


def plausible_schedules(
    step: np.ndarray, lr: np.ndarray | None, count: int = PLAN_DRAWS, total: float | None = None
) -> tuple[LrSchedule, ...]:
    """Future plans that the logged lr cannot tell from the one :func:`infer_lr_schedule` gives.

    When a decay was inferred: the candidate decays (cosine or linear, any total and final
    lr) that explain the log within the same 1% of the peak the inference accepts, ``count``
    of them spread evenly over their totals. Early in a cosine a short decay to a high final
    lr and a long one to a low final lr fit the log alike, and the forecast cannot know which.

    When none was (the lr still at its peak, no lr logged, or no shape fits): a documented
    prior over how the run ends, as WSD runs do: the log sits at a share ``u`` of the run,
    ``u`` uniform in ``_ELAPSED``, and the run ends in a linear cooldown to 0 over
    ``_COOLDOWN_SHARES`` of it (a cooldown that would already have begun is left out).
    ``count`` plans on the quantiles of that prior, so the draws are deterministic.

    ``total`` is the planned last step when the params give it (a ``steps-only`` plan): the
    decays and cooldowns then all end there, and only their shape and final lr are unknown.
    """
    s = np.asarray(step, float)
    if lr is not None and np.isfinite(lr).sum() >= 2 and np.nanmax(lr) > 0:
        ok = np.isfinite(lr)
        if not ok.all():  # a long log's lr logged at every row is used as it is, not copied
            s, v = s[ok], np.asarray(lr, float)[ok]
        else:
            v = np.asarray(lr, float)
        peak = float(v.max())
        if float(v[-1]) < _AT_PEAK * peak:
            best = _inferred_decay(s, v, peak, total)
            if best is not None:
                return _decay_candidates(s, v, best[4], count, total)
    if total is not None:
        return _cooldowns_at(float(s[-1]), total)
    return _cooldown_prior(float(s[-1]), count)


def _decay_candidates(
    s: np.ndarray, v: np.ndarray, start: int, count: int, known: float | None = None
) -> tuple[LrSchedule, ...]:
    """``count`` decays from row ``start`` that fit the log within the tolerance, spread over
    their totals (all ending at ``known`` when the planned total is)."""
    peak = float(v.max())
    found = [
        (float(total), shape, float(final))
        for shape, totals, finals, rms in _decay_fits(s[start:], v[start:], peak, known)
        for total, final, misfit in zip(totals, finals, rms)
        if misfit <= _SHAPE_TOLERANCE
    ]
    found.sort()
    if not found:
        return ()
    out = []
    for i in np.unique(np.linspace(0, len(found) - 1, count).round().astype(np.int64)):
        total, shape, final = found[int(i)]
        steps, values = _decay_knots(s, v, start, shape, total, final)
        words = f"{shape} decay to {final:.2g}x the peak at step {total:,.0f} (a decay the logged lr fits)"
        out.append(LrSchedule(steps, values, total, "inferred", words))
    return tuple(out)


def _cooldowns_at(last: float, total: float) -> tuple[LrSchedule, ...]:
    """The prior's WSD endings when the planned total is known: each cooldown share ending at
    ``total``, leaving out a cooldown that would already have begun."""
    out = []
    for share in _COOLDOWN_SHARES:
        start = total * (1.0 - share)
        if start >= last:
            words = f"constant, then a linear cooldown to 0 from step {start:,.0f} to {total:,.0f} (a prior ending at the planned total)"
            out.append(LrSchedule((0.0, start, total), (1.0, 1.0, 0.0), total, "prior", words))
    return tuple(out)


def _cooldown_prior(last: float, count: int) -> tuple[LrSchedule, ...]:
    """``count`` WSD endings on the quantiles of the prior (see :func:`plausible_schedules`)."""
    out = []
    per_share = max(count // len(_COOLDOWN_SHARES), 1)
    for k in range(count):
        share = _COOLDOWN_SHARES[k % len(_COOLDOWN_SHARES)]
        low, high = _ELAPSED[0], min(_ELAPSED[1], 1.0 - share)
        elapsed = low + (high - low) * ((k // len(_COOLDOWN_SHARES)) % per_share + 0.5) / per_share
        total = max(last, 1.0) / elapsed
        start = total * (1.0 - share)
        steps = (0.0, start, total)
        words = f"constant, then a linear cooldown to 0 from step {start:,.0f} to {total:,.0f} (a prior ending)"
        out.append(LrSchedule(steps, (1.0, 1.0, 0.0), total, "prior", words))
    return tuple(out)
