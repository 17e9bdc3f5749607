"""The planned learning rate: :class:`LrSchedule`, and how it is read.

From a ``step,lr`` table (a file), a spec (``cosine:warmup=2000,total=50000,final=0.1``)
or a run's hyperparameters (:func:`read_planned_lr`, by the common names or the trainer's
own plan, :mod:`.trainers`); each is piecewise linear between knots.
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

__all__ = ["LrSchedule", "SHAPES", "STEPS_ONLY", "read_planned_lr"]


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


