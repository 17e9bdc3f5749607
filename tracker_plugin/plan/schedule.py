"""Planned schedules beyond the logged range.

- :class:`BatchSchedule`: how the batch changes after the log ends.
- :class:`LrSchedule`: the planned learning rate, from a ``step,lr`` table (a file), a spec
  (``cosine:warmup=2000,total=50000,final=0.1``), a run's hyperparameters
  (:meth:`LrSchedule.from_params`, for tracker adapters), or inferred from the logged lr
  (:func:`infer_lr_schedule`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tracker_plugin.errors import ConfigError
from tracker_plugin.plan.params import as_float, param_paths, planned_steps
from tracker_plugin.plan.trainers import Piece, TrainerPlan, curve, read_trainer_plan

__all__ = ["STEPS_ONLY", "BatchSchedule", "LrSchedule", "Plan", "infer_lr_schedule", "plausible_schedules", "read_planned_lr"]


@dataclass(frozen=True)
class BatchSchedule:
    """A dynamic-batch run's plan: from ``start_tokens`` on, steps take ``batch`` tokens."""

    stages: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, pairs: Sequence[str] | str) -> BatchSchedule:
        """Parse ``TOKENS:BATCH`` pairs such as ``0:589824 2e9:786432``.

        Raises
        ------
        ConfigError
            A pair is not two numbers, or a batch is not positive.
        """
        items = pairs.split() if isinstance(pairs, str) else list(pairs)
        stages = []
        for item in items:
            try:
                start, batch = (float(part) for part in item.split(":"))
            except ValueError:
                raise ConfigError(
                    f"batch_schedule takes TOKENS:BATCH pairs such as 0:589824, got {item!r}"
                ) from None
            if not (math.isfinite(start) and math.isfinite(batch)) or batch <= 0 or start < 0:
                raise ConfigError(f"batch_schedule pair {item!r} needs tokens >= 0 and a batch > 0")
            stages.append((start, batch))
        if not stages:
            raise ConfigError("batch_schedule needs at least one TOKENS:BATCH pair")
        return cls(tuple(sorted(stages)))

    def __str__(self) -> str:
        return " ".join(f"{start:.6g}:{batch:.0f}" for start, batch in self.stages)


# --- learning-rate plans -------------------------------------------------------------------

SHAPES = ("constant", "cosine", "linear", "wsd", "step")
_SPEC_KEYS = {
    "constant": {"warmup", "total", "peak"},
    "cosine": {"warmup", "total", "final", "peak"},
    "linear": {"warmup", "total", "final", "peak"},
    "wsd": {"warmup", "total", "final", "peak", "decay", "decay_shape"},
    "step": {"warmup", "total", "peak", "at", "factor"},
}
# Knots per curved segment (a cosine): the schedule is piecewise linear between knots.
_CURVE_KNOTS = 129


@dataclass(frozen=True)
class LrSchedule:
    """A run's learning rate as a function of the step: piecewise linear through knots.

    ``steps`` and ``lr`` are the knots (steps increasing). Past the last knot the lr stays at
    its last value. ``total_steps`` is the planned last step, when known (it decides "within
    the planned run"); ``source`` says where the plan came from (``file``, ``spec``,
    ``params``, ``steps-only`` (the params' planned total only), ``inferred``, ``log``) and
    ``description`` says it in words.

    Only the shape matters to the models (they use ``lr / peak``), so a schedule of
    multipliers (1.0 at the peak) is as good as one of absolute rates.
    """

    steps: tuple[float, ...] = field(repr=False)
    lr: tuple[float, ...] = field(repr=False)
    total_steps: float | None
    source: str
    description: str
    # Curved stretches held exactly (a trainer's own formula, read from its params): ``at``
    # follows them, the knots trace them for the analysis.
    pieces: tuple[Piece, ...] = field(default=(), repr=False)
    # The params the plan was read from, as (name, value), and what reading them noticed.
    params: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> float:
        return max(self.lr)

    def fingerprint(self) -> str:
        """A short, stable text that changes when the plan does (for settings hashes)."""
        import zlib

        knots = np.asarray(self.steps + self.lr, float).tobytes()
        return f"{self.source}: {self.description} [{zlib.crc32(knots):08x}]"

    def at(self, steps: np.ndarray | float) -> np.ndarray:
        """The planned lr at ``steps`` (the last value continues past the last knot)."""
        where = np.asarray(steps, float)
        out = np.interp(where, self.steps, self.lr)
        if not self.pieces:
            return out
        out = np.atleast_1d(np.asarray(out, float)).copy()
        flat = np.atleast_1d(where)
        for piece in self.pieces:
            inside = (flat >= piece.start) & (flat <= piece.end)
            if inside.any() and piece.end > piece.start:
                p = (flat[inside] - piece.start) / (piece.end - piece.start)
                out[inside] = piece.last + (piece.first - piece.last) * curve(piece.kind, p)
        return out.reshape(where.shape)

    # ---- constructors ------------------------------------------------------------------

    @classmethod
    def from_table(cls, steps: Sequence[float], lr: Sequence[float], *, source: str = "file", name: str = "") -> LrSchedule:
        """A schedule from ``step, lr`` pairs, such as the rows of a planned-lr CSV file.

        Raises
        ------
        ConfigError
            Fewer than two rows, a value that is not finite, a negative lr or step, steps
            that do not increase, or an lr that is zero everywhere.
        """
        s = np.asarray(steps, float)
        v = np.asarray(lr, float)
        where = f"{name}: " if name else ""
        if len(s) < 2 or len(s) != len(v):
            raise ConfigError(f"{where}an lr schedule needs at least two step,lr rows, got {len(s)}")
        if not (np.isfinite(s).all() and np.isfinite(v).all()):
            raise ConfigError(f"{where}the lr schedule holds a value that is not a finite number")
        if (s < 0).any() or (v < 0).any():
            raise ConfigError(f"{where}the lr schedule needs steps >= 0 and lr >= 0")
        if (np.diff(s) <= 0).any():
            i = int(np.flatnonzero(np.diff(s) <= 0)[0])
            raise ConfigError(f"{where}steps in the lr schedule must increase; step {s[i + 1]:g} follows {s[i]:g}")
        if v.max() <= 0:
            raise ConfigError(f"{where}the lr schedule is zero everywhere")
        description = f"{source} with {len(s)} rows, steps {s[0]:g} to {s[-1]:g}"
        return cls(tuple(s.tolist()), tuple(v.tolist()), float(s[-1]), source, description)

    @classmethod
    def steps_only(cls, planned_total: float, name: str = "planned_total") -> LrSchedule:
        """A plan that knows only its last step, ``planned_total``, and not its shape (``steps-only``):
        the forecast infers the shape from the logged lr, ending there, or draws over
        the cooldowns of the prior that end at it, and widens its interval for it. ``name``
        says where the total came from in the report.

        Raises
        ------
        ConfigError
            ``planned_total`` is not a finite number of steps above 0.
        """
        given = planned_total
        if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given) or given <= 0:
            raise ConfigError(f"{name} is the planned last step, a number above 0, got {given!r}")
        last = float(given)
        return cls((0.0, last), (1.0, 1.0), last, STEPS_ONLY, f"planned steps known ({name}={given:g}), schedule shape not")

    @classmethod
    def parse_spec(cls, spec: str) -> LrSchedule:
        """A schedule from a spec such as ``cosine:warmup=2000,total=50000,final=0.1``.

        ``SHAPE:key=value,...``; shapes and keys:

        - ``constant``: ``warmup``, ``total`` (optional)
        - ``cosine``, ``linear``: ``warmup``, ``total``, ``final`` (the lr at ``total`` as a
          fraction of the peak; default 0)
        - ``wsd`` (warmup, stable, decay): ``warmup``, ``total``, ``final``, ``decay`` (steps
          of the final decay, or a fraction of ``total`` when below 1), ``decay_shape``
          (``linear``, default, or ``cosine``)
        - ``step``: ``warmup``, ``total``, ``at`` (the step(s) where the lr is multiplied,
          several joined by ``/``), ``factor`` (the multiplier at each)

        Every shape takes ``peak`` (the peak lr; optional, the models use only the shape).
        Steps count optimizer steps; the warmup is linear from 0.

        Raises
        ------
        ConfigError
            An unknown shape or key, a value that is not a number, or values that do not fit
            together (a warmup past the total, a final lr above the peak).
        """
        text = spec.strip()
        shape, _, rest = text.partition(":")
        shape = shape.strip().lower()
        if shape not in SHAPES:
            raise ConfigError(f"lr_spec {spec!r}: unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
        values: dict[str, str] = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            key = key.strip().lower()
            if not eq or key not in _SPEC_KEYS[shape]:
                allowed = ", ".join(sorted(_SPEC_KEYS[shape]))
                raise ConfigError(f"lr_spec {spec!r}: {item!r} is not KEY=VALUE with KEY one of {allowed}")
            values[key] = value.strip()
        return _build_spec(shape, values, spec, f"lr_spec {spec}", "spec")

    @classmethod
    def from_params(cls, params: Mapping[str, Any], trainer: str | None = None) -> LrSchedule | None:
        """The planned schedule from a run's hyperparameters (MLflow params, W&B config).

        The entry point for tracker adapters. ``trainer``: the trainer that wrote the run, as
        ``frame.conventions`` names it (None: recognised from the config's own names). Nested
        dicts are flattened; keys are matched on their last component, case-insensitively,
        and values may be strings (as MLflow stores them). Recognised, in order:

        1. a spec string under ``lr_schedule``, ``lr_spec`` or ``loss_eta_lr_schedule``
           (see :meth:`parse_spec`);
        2. a trainer's own config, computed as the trainer computes it
           (:mod:`tracker_plugin.plan.trainers`: nanoGPT ``decay_lr``, ``warmup_iters``,
           ``lr_decay_iters``, ``min_lr``; torchtitan ``lr_scheduler.*``; litgpt ``train.*``;
           Megatron-LM ``lr_decay_style``, ``lr_warmup_iters``, ``lr_decay_iters``, ...; OLMo
           ``scheduler.*``, ``max_duration``);
        3. a shape under ``lr_scheduler``, ``lr_scheduler_type``, ``scheduler``,
           ``lr_schedule_type``, ``scheduler_type``, ``lr_decay_style`` or ``decay_style`` (``cosine``,
           ``linear``, ``constant``, ``wsd``; common aliases such as
           ``cosine_with_min_lr``, ``CosWithWarmup`` or ``warmup_stable_decay`` too), with
           warmup under ``warmup_steps``, ``lr_warmup_steps``, ``num_warmup_steps``,
           ``warmup_iters``, ``t_warmup`` (or a share of the total under ``warmup_ratio``); the total under ``max_steps``, ``total_steps``,
           ``num_training_steps``, ``train_iters``, ``max_iters``, ``lr_decay_iters``,
           ``t_max``; the final lr as a fraction under ``min_lr_ratio``,
           ``final_lr_ratio``, ``alpha_f``, or as a rate under ``min_lr``, ``final_lr``,
           ``lr_min`` (divided by ``learning_rate``, ``lr``, ``peak_lr`` or ``max_lr``);
           for WSD the decay under ``decay_steps``, ``cooldown_steps``,
           ``lr_wsd_decay_iters``, or ``decay_fraction``, ``cooldown_fraction``.

        With a planned total but no shape (none named, one not known, or values that
        contradict each other), the plan has source ``steps-only``: the forecast infers the
        shape from the logged lr, ending at that total. ``params`` names the values read;
        ``notes`` says what was ignored and why.

        Returns None when the params name neither a schedule nor a planned total
        (:func:`read_planned_lr` gives what reading them noticed then too).

        Raises
        ------
        ConfigError
            A spec string that does not parse.
        """
        return read_planned_lr(params, trainer)[0]


def read_planned_lr(params: Mapping[str, Any], trainer: str | None = None) -> tuple[LrSchedule | None, tuple[str, ...]]:
    """:meth:`LrSchedule.from_params`, and the notes of reading the params: the plan's own,
    or, when no plan can be made, what made it impossible (a trainer's planned total that
    does not parse, say), which the run's report should still say."""
    flat = _flatten(params)
    for key in ("lr_schedule", "lr_spec", "loss_eta_lr_schedule"):
        if isinstance(flat.get(key), str) and ":" in flat[key]:
            spec = LrSchedule.parse_spec(flat[key])
            used = ((key, flat[key]),)
            return replace(spec, source="params", description=_describe_params(spec, used), params=used), ()
    found = read_trainer_plan(params, trainer)
    plan, notes = (_from_trainer(found), found.notes) if found is not None else _from_common_names(flat)
    return plan, notes if plan is None else plan.notes


def _from_common_names(flat: Mapping[str, Any]) -> tuple[LrSchedule | None, tuple[str, ...]]:
    """The plan from the names many trainers share (HF's, OLMo's, Megatron's), see
    from_params, and, for no plan, the notes saying why (a plan carries its own)."""
    kind = _first(flat, _SHAPE_KEYS)
    shape = _shape_alias(kind) if isinstance(kind, str) else None
    if shape is None:
        unknown = () if kind is None else (f"the params' lr schedule {kind!r} is not a shape read here: only the planned total is used",)
        return _steps_only(flat, unknown), ()
    values: dict[str, str] = {}
    used: list[tuple[str, str]] = [(_first_name(flat, _SHAPE_KEYS) or "", str(kind))]
    for key, names in _PARAM_NAMES.items():
        name = _first_name(flat, names)
        if name is not None and (key != "total" or planned_steps(flat[name]) is not None):
            values[key] = str(flat[name])
            used.append((name, str(flat[name])))
    if shape != "constant" and "total" not in values:
        return _steps_only(flat, ()), _in_epochs(flat, str(kind))
    ratio_name = _first_name(flat, ("warmup_ratio", "warmup_fraction"))
    ratio = as_float(flat[ratio_name]) if ratio_name else None
    total = as_float(values.get("total"))
    warmup = as_float(values.get("warmup"))
    if warmup is not None and 0 < warmup < 1 and total is not None:
        # A warmup shorter than a step is a share of the total (transformers' warmup_steps
        # below 1: ceil(total x share) steps); no trainer warms up over a fraction of a step.
        values["warmup"] = str(math.ceil(warmup * total))
    elif "warmup" not in values and ratio is not None and total is not None:
        values["warmup"] = str(ratio * total)
        used.append((ratio_name or "", str(flat[ratio_name or ""])))
    if "final" not in values:
        rate_name = _first_name(flat, ("min_lr", "final_lr", "lr_min", "min_learning_rate"))
        peak_name = _first_name(flat, ("peak_lr", "max_lr", "learning_rate", "lr"))
        rate = as_float(flat[rate_name]) if rate_name else None
        peak = as_float(flat[peak_name]) if peak_name else None
        if rate is not None and peak:
            values["final"] = str(rate / peak)
            used += [(rate_name or "", str(flat[rate_name or ""])), (peak_name or "", str(flat[peak_name or ""]))]
    if shape != "wsd":
        values.pop("decay", None)
        used = [u for u in used if u[0] not in _PARAM_NAMES["decay"]]
    try:
        built = _build_spec(shape, values, f"{kind} " + " ".join(f"{k}={v}" for k, v in values.items()), "run params", "params")
    except ConfigError as exc:
        note = f"the planned lr in the params does not fit together ({exc}): its shape is not used"
        plan = _steps_only(flat, (note,))
        return plan, (note,) if plan is None else plan.notes
    return replace(built, description=_describe_params(built, tuple(used)), params=tuple(used)), ()


def _in_epochs(flat: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    """A note for a schedule planned in epochs: HF logs ``max_steps`` -1 and
    ``num_train_epochs``, and the steps an epoch takes (the data loader's length over the
    accumulation) reach no tracker, so the planned total is not known."""
    name = _first_name(flat, ("num_train_epochs", "max_epochs"))
    if name is None or not as_float(flat[name]):
        return ()
    return (f"the params plan a {kind} lr over {name}={_text(flat[name])}, but not the steps an epoch takes: "
            "the planned total is not known, so the planned lr is read from the logged lr alone",)


# Names of a run's planned last step, when nothing else of its schedule is known. Composer's
# and OLMo's ``max_duration`` counts steps as a number or "<N>ba" (tokens "T"/"tok" and epochs
# "ep" are not steps).
_TOTAL_NAMES = ("max_steps", "total_steps", "num_training_steps", "train_iters", "max_iters", "max_duration")
STEPS_ONLY = "steps-only"


def _steps_only(flat: Mapping[str, Any], notes: tuple[str, ...], used: tuple[tuple[str, str], ...] = ()) -> LrSchedule | None:
    """A plan that knows only the planned total (``steps-only``), or None without one."""
    for name in _TOTAL_NAMES:
        total = planned_steps(flat.get(name))
        if total is not None and total > 0:
            return _steps_only_plan(total, ((name, _text(flat[name])),) + used, notes)
    return None


def _steps_only_plan(total: float, used: tuple[tuple[str, str], ...], notes: tuple[str, ...]) -> LrSchedule:
    # The knots hold the lr level; the forecast replaces them by the shape the log shows.
    named = ", ".join(f"{k}={v}" for k, v in used[:1])
    return LrSchedule(
        (0.0, total), (1.0, 1.0), total, STEPS_ONLY, f"planned steps known ({named}), schedule shape not", params=used, notes=notes
    )


def _from_trainer(plan: TrainerPlan) -> LrSchedule | None:
    """A trainer's plan as a schedule: knots tracing its pieces, the pieces kept exact."""
    if not plan.pieces:
        if plan.total is None:
            return None
        # The total's own name first (the description names it), then the rest as read.
        used = sorted(plan.used, key=lambda item: item[0] not in _TRAINER_TOTALS)
        return _steps_only_plan(plan.total, tuple(used), plan.notes)
    knots: list[tuple[float, float]] = []
    for piece in plan.pieces:
        x = np.linspace(0.0, 1.0, 2 if piece.kind == "linear" else _CURVE_KNOTS)
        y = piece.last + (piece.first - piece.last) * curve(piece.kind, x)
        knots += list(zip((piece.start + x * (piece.end - piece.start)).tolist(), y.tolist()))
    if plan.total is not None and plan.total > knots[-1][0]:
        knots.append((plan.total, knots[-1][1]))
    steps, lr = zip(*_dedupe(knots))
    named = ", ".join(f"{k}={v}" for k, v in plan.used)
    description = f"{plan.shape} from params ({plan.trainer}: {named})"
    return LrSchedule(tuple(steps), tuple(lr), plan.total, "params", description, plan.pieces, plan.used, plan.notes)


# The trainers' names of their planned total (for the steps-only description).
_TRAINER_TOTALS = ("max_iters", "training.steps", "train.max_tokens", "train_iters", "max_duration")


_SHAPE_KEYS = (
    "lr_scheduler", "lr_scheduler_type", "scheduler", "scheduler_type", "lr_schedule_type", "lr_decay_style",
    "decay_style",
)
_PARAM_NAMES = {
    "warmup": ("warmup_steps", "lr_warmup_steps", "num_warmup_steps", "warmup_iters", "t_warmup"),
    "total": ("total_steps", "max_steps", "num_training_steps", "train_iters", "max_iters", "lr_decay_iters", "t_max"),
    "final": ("min_lr_ratio", "final_lr_ratio", "alpha_f", "lr_final_ratio"),
    "decay": ("decay_steps", "cooldown_steps", "lr_wsd_decay_iters", "decay_fraction", "cooldown_fraction"),
}
_ALIASES = {
    "cosine": "cosine", "cos": "cosine", "coswithwarmup": "cosine", "cosine_with_min_lr": "cosine",
    "cosine_with_warmup": "cosine", "cosineannealing": "cosine", "cosineannealinglr": "cosine",
    "linear": "linear", "linear_with_warmup": "linear", "linearwithwarmup": "linear", "polynomial": "linear",
    "constant": "constant", "constant_with_warmup": "constant", "constantwithwarmup": "constant", "none": "constant",
    "wsd": "wsd", "warmup_stable_decay": "wsd", "warmupstabledecay": "wsd", "trapezoid": "wsd",
}


def _shape_alias(kind: str) -> str | None:
    return _ALIASES.get(kind.strip().lower().replace("-", "_").replace(" ", "_"))


def _flatten(params: Mapping[str, Any]) -> dict[str, Any]:
    """Nested config -> {last key component (lowercase): value}; the first one found wins.

    Nesting and dotted names are one thing here (``{"trainer": {"max_steps": 10}}``,
    ``trainer.max_steps`` and ``trainer/max_steps`` alike), so a config that a tracker or
    :func:`~tracker_plugin.plan.params.flat_params` flattened reads as the nested one. A
    section named like a shape key (``{"scheduler": {"name": "cosine", ...}}``) names the
    shape under ``name`` or ``type``: the section's own name gets that value.
    """
    paths = [
        (tuple(part.lower() for key in path for part in key.replace("/", ".").split(".")), value)
        for path, value in param_paths(params)
    ]
    kinds: dict[tuple[str, ...], dict[str, str]] = {}
    for path, value in paths:
        if len(path) > 1 and path[-1] in ("name", "type") and isinstance(value, str):
            kinds.setdefault(path[:-1], {}).setdefault(path[-1], value)
    flat: dict[str, Any] = {}
    entered: set[tuple[str, ...]] = set()
    for path, value in paths:
        for depth in range(1, len(path)):
            section = path[:depth]
            if section not in entered:
                entered.add(section)
                for inner in ("name", "type"):
                    if inner in kinds.get(section, {}):
                        flat.setdefault(section[-1], kinds[section][inner])
        flat.setdefault(path[-1], value)
    return flat


def _first(flat: Mapping[str, Any], names: Sequence[str]) -> Any:
    name = _first_name(flat, names)
    return None if name is None else flat[name]


def _first_name(flat: Mapping[str, Any], names: Sequence[str]) -> str | None:
    for name in names:
        if name in flat and flat[name] not in (None, "", "None"):
            return name
    return None


def _text(value: Any) -> str:
    number = as_float(value)
    if number is None:
        return str(value)
    return f"{number:.0f}" if number.is_integer() else f"{number:g}"


def _describe_params(schedule: LrSchedule, used: Sequence[tuple[str, str]]) -> str:
    """The schedule's words, then the params it was read from by name."""
    named = ", ".join(f"{name}={_text(value)}" for name, value in used)
    return schedule.description.rsplit(" (", 1)[0] + f" (run params: {named})"


def _build_spec(shape: str, values: Mapping[str, str], spec: str, origin: str, source: str) -> LrSchedule:
    def num(key: str, default: float | None = None) -> float | None:
        if key not in values:
            return default
        number = as_float(values[key])
        if number is None:
            raise ConfigError(f"lr_spec {spec!r}: {key}={values[key]!r} is not a number")
        return number

    warmup = num("warmup", 0.0)
    total = num("total")
    peak = num("peak", 1.0)
    final = num("final", 0.0)
    assert warmup is not None and peak is not None and final is not None
    if warmup < 0 or peak <= 0:
        raise ConfigError(f"lr_spec {spec!r}: needs warmup >= 0 and peak > 0")
    if not 0 <= final <= 1:
        raise ConfigError(f"lr_spec {spec!r}: final is the end lr as a fraction of the peak, in [0, 1]; got {final:g}")
    if shape != "constant" and total is None:
        raise ConfigError(f"lr_spec {spec!r}: {shape} needs total=STEPS (the planned last step)")
    if total is not None and total <= warmup:
        raise ConfigError(f"lr_spec {spec!r}: total ({total:g}) must come after the warmup ({warmup:g})")
    knots: list[tuple[float, float]] = [(0.0, 0.0)] if warmup > 0 else []
    knots.append((warmup, 1.0))
    if shape == "constant":
        if total is not None:
            knots.append((total, 1.0))
        words = "constant lr"
    elif shape in ("cosine", "linear"):
        assert total is not None
        knots += _decay(warmup, total, final, shape)
        words = f"{shape} decay to {final:g}x the peak at step {total:,.0f}"
    elif shape == "wsd":
        assert total is not None
        decay = num("decay", 0.2)
        assert decay is not None
        decay_steps = decay * total if 0 < decay < 1 else decay
        if not 0 < decay_steps <= total - warmup:
            raise ConfigError(f"lr_spec {spec!r}: decay must be a fraction in (0, 1) or steps within the run")
        decay_shape = values.get("decay_shape", "linear").lower()
        if decay_shape not in ("linear", "cosine"):
            raise ConfigError(f"lr_spec {spec!r}: decay_shape is linear or cosine, got {decay_shape!r}")
        knots += _decay(total - decay_steps, total, final, decay_shape)
        words = f"constant, then a {decay_shape} decay over the last {decay_steps:,.0f} steps to {final:g}x at step {total:,.0f}"
    else:  # step
        factor = num("factor", 0.1)
        assert factor is not None
        if not 0 < factor <= 1:
            raise ConfigError(f"lr_spec {spec!r}: factor is the multiplier at each step, in (0, 1]")
        try:
            at = sorted(float(a) for a in values.get("at", "").split("/") if a.strip())
        except ValueError:
            raise ConfigError(f"lr_spec {spec!r}: at takes step numbers joined by '/'") from None
        if not at or at[0] <= warmup:
            raise ConfigError(f"lr_spec {spec!r}: step needs at=STEP[/STEP...] after the warmup")
        level = 1.0
        for a in at:
            knots += [(a, level), (a + 1.0, level * factor)]
            level *= factor
        if total is not None:
            knots.append((max(total, at[-1] + 1.0), level))
        words = f"lr multiplied by {factor:g} at step(s) {', '.join(f'{a:,.0f}' for a in at)}"
    if warmup > 0:
        words += f" after {warmup:,.0f} warmup steps"
    steps, lr = zip(*_dedupe(knots))
    scaled = tuple(peak * v for v in lr)
    return LrSchedule(tuple(steps), scaled, total, source, f"{words} ({origin})")


def _decay(start: float, end: float, final: float, shape: str) -> list[tuple[float, float]]:
    if shape == "linear":
        return [(start, 1.0), (end, final)]
    x = np.linspace(0.0, 1.0, _CURVE_KNOTS)
    lr = final + (1.0 - final) * 0.5 * (1.0 + np.cos(np.pi * x))
    return list(zip((start + x * (end - start)).tolist(), lr.tolist()))


def _dedupe(knots: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Knots with strictly increasing steps: a repeated step keeps its last value."""
    out: list[tuple[float, float]] = []
    for step, lr in knots:
        if out and step <= out[-1][0]:
            out[-1] = (out[-1][0], lr)
        else:
            out.append((step, lr))
    return out


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
