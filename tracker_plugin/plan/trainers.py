"""The planned lr as each trainer computes it from its own config (read by ``LrSchedule.from_params``).

One small reader per trainer. Each re-states the trainer's own lr formula, from the source
cited beside it, as :class:`Piece` s over the frame's step (the step the trainer logs, see
``frame/conventions.py``), and names the config values it used. Values that contradict each
other, or do not parse, become notes: the reader then gives only the planned total (a
"steps-only" plan), or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracker_plugin.plan.params import as_float, param_paths

__all__ = ["CURVES", "Piece", "TrainerPlan", "curve", "read_trainer_plan", "trainer_of"]

# How a piece goes from its first value to its last, as a function of progress p in [0, 1].
CURVES = ("linear", "cosine", "sqrt")


def curve(kind: str, p: np.ndarray) -> np.ndarray:
    """1 - p (linear), (1 + cos(pi p)) / 2 (cosine) or 1 - sqrt(p) (sqrt), p clipped to [0, 1]."""
    p = np.clip(np.asarray(p, float), 0.0, 1.0)
    if kind == "cosine":
        return np.asarray(0.5 * (1.0 + np.cos(np.pi * p)))
    if kind == "sqrt":
        return np.asarray(1.0 - np.sqrt(p))
    return np.asarray(1.0 - p)


@dataclass(frozen=True)
class Piece:
    """The lr from ``start`` to ``end`` (steps): ``last + (first - last) * curve(kind, p)``,
    with ``p = (step - start) / (end - start)``."""

    start: float
    end: float
    kind: str
    first: float
    last: float


@dataclass(frozen=True)
class TrainerPlan:
    """What one trainer's config plans. ``pieces`` empty: the shape is not known (only
    ``total``, when that is). ``used``: (name, value as configured) of each value read."""

    trainer: str
    shape: str
    pieces: tuple[Piece, ...]
    total: float | None
    used: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()


@dataclass
class _Config:
    """A config's values by dotted name (lowercase; ``/`` read as ``.``), and what was read."""

    trainer: str
    values: dict[str, Any]
    used: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def raw(self, name: str) -> tuple[str, Any] | None:
        """The value under ``name`` or a key ending in ``.name``, with the key's short name."""
        if name in self.values:
            return name, self.values[name]
        for key, value in self.values.items():
            if key.endswith("." + name):
                return name, value
        return None

    def number(self, name: str, default: float | None = None, *, used: bool = True) -> float | None:
        found = self.raw(name)
        if found is None or found[1] in (None, "", "None", "null"):
            return default
        value = as_float(found[1])
        if value is None:
            self.notes.append(f"{self.trainer} param {name}={found[1]!r} is not a number: ignored")
            return default
        if used:
            self.used.append((name, _text(found[1])))
        return value

    def flag(self, name: str, default: bool) -> bool:
        found = self.raw(name)
        if found is None or found[1] in (None, ""):
            return default
        value = found[1]
        if isinstance(value, bool):
            flag = value
        elif str(value).strip().lower() in ("true", "1", "yes"):
            flag = True
        elif str(value).strip().lower() in ("false", "0", "no"):
            flag = False
        else:
            self.notes.append(f"{self.trainer} param {name}={value!r} is not true or false: ignored")
            return default
        self.used.append((name, str(flag)))
        return flag

    def word(self, name: str, default: str) -> str:
        found = self.raw(name)
        if found is None or found[1] in (None, "", "None"):
            return default
        self.used.append((name, str(found[1])))
        return str(found[1]).strip()

    def contradiction(self, text: str) -> None:
        self.notes.append(f"{self.trainer} params contradict each other: {text}; the schedule shape is not read from them")

    def plan(self, shape: str, pieces: list[Piece], total: float | None) -> TrainerPlan:
        return TrainerPlan(self.trainer, shape, tuple(pieces), total, tuple(self.used), tuple(self.notes))


def _text(value: Any) -> str:
    number = as_float(value)
    if number is None:
        return str(value)
    return f"{number:.0f}" if number.is_integer() and abs(number) < 1e15 else f"{number:g}"


# --- nanoGPT ---------------------------------------------------------------------------------
# karpathy/nanoGPT train.py (commit e2221318e607eb5ee0669d6b7641af25a2111545), get_lr(it):
#   it < warmup_iters:      learning_rate * (it + 1) / (warmup_iters + 1)
#   it > lr_decay_iters:    min_lr
#   else:                   min_lr + 0.5 * (1 + cos(pi * (it - warmup_iters) / (lr_decay_iters - warmup_iters)))
#                                    * (learning_rate - min_lr)
# and lr = get_lr(iter_num) if decay_lr else learning_rate. The lr logged at iter (the
# frame's step) is the one that iteration trains with; the loop runs iter 0..max_iters.
# Defaults are train.py's globals (its wandb config holds all of them).


def _nanogpt(config: _Config) -> TrainerPlan:
    lr = config.number("learning_rate", 6e-4)
    total = config.number("max_iters", 600000)
    assert lr is not None
    if not config.flag("decay_lr", True):
        return config.plan("constant", [Piece(0.0, total or 1.0, "linear", lr, lr)], total)
    warmup = config.number("warmup_iters", 2000)
    decay = config.number("lr_decay_iters", 600000)
    floor = config.number("min_lr", 6e-5)
    assert warmup is not None and decay is not None and floor is not None
    if decay <= warmup:
        config.contradiction(f"lr_decay_iters={decay:g} is not after warmup_iters={warmup:g}")
        return config.plan("unknown", [], total)
    if floor > lr or lr <= 0:
        config.contradiction(f"min_lr={floor:g} is above learning_rate={lr:g}")
        return config.plan("unknown", [], total)
    pieces = [Piece(0.0, warmup, "linear", lr / (warmup + 1.0), lr)] if warmup > 0 else []
    pieces.append(Piece(warmup, decay, "cosine", lr, floor))
    return config.plan("cosine", pieces, total)


# --- torchtitan --------------------------------------------------------------------------------
# pytorch/torchtitan torchtitan/components/lr_scheduler.py, build_lr_schedulers (v0.2.x, the
# version with lr_scheduler.min_lr_factor): warmup = min(warmup_steps, training.steps);
# decay = round(steps * decay_ratio) (cut to steps - warmup) or steps - warmup when
# decay_ratio is None; stable = steps + 1 - warmup - decay (a virtual last step). LambdaLR
# factor at 0-based c: c < warmup: (c + 1) / warmup; c < warmup + stable: 1; else
# progress = (c + 1 - warmup - stable) / decay, 1 - p (linear), 1 - sqrt(p) (sqrt) or
# (1 + cos(pi p)) / 2 (cosine), scaled to min_lr_factor + (1 - min_lr_factor) * that.
# Optimizer step k (1-based, the step torchtitan logs) trains with the factor at c = k - 1,
# times optimizer.lr. Defaults: torchtitan/config/job_config.py (LRScheduler, Optimizer).


def _torchtitan(config: _Config) -> TrainerPlan:
    steps = config.number("training.steps")
    lr = config.number("optimizer.lr", 8e-4)
    assert lr is not None
    warmup = config.number("lr_scheduler.warmup_steps", 200)
    ratio = config.number("lr_scheduler.decay_ratio")
    kind = config.word("lr_scheduler.decay_type", "linear").lower()
    floor = config.number("lr_scheduler.min_lr_factor", 0.0)
    assert warmup is not None and floor is not None
    if steps is None or steps <= 0:
        return config.plan("unknown", [], None)
    if kind not in CURVES:
        config.notes.append(f"torchtitan param decay_type={kind!r} is not linear, sqrt or cosine: ignored")
        return config.plan("unknown", [], steps)
    if not 0.0 <= floor <= 1.0:
        config.contradiction(f"min_lr_factor={floor:g} is not in [0, 1]")
        return config.plan("unknown", [], steps)
    if ratio is not None and not 0.0 <= ratio <= 1.0:
        config.contradiction(f"decay_ratio={ratio:g} is not in [0, 1]")
        return config.plan("unknown", [], steps)
    if warmup > steps:
        config.notes.append(f"torchtitan cuts warmup_steps={warmup:g} to training.steps={steps:g}")
        warmup = steps
    decay = steps - warmup if ratio is None else min(float(round(steps * ratio)), steps - warmup)
    stable_end = steps + 1.0 - decay
    pieces = [Piece(0.0, warmup, "linear", 0.0, lr)] if warmup > 0 else []
    if stable_end > warmup:
        pieces.append(Piece(warmup, stable_end, "linear", lr, lr))
    if decay > 0:
        pieces.append(Piece(stable_end, steps + 1.0, kind, lr, lr * floor))
    shape = kind if ratio is None else f"wsd ({kind} decay)"
    return config.plan(shape, pieces, steps)


# --- litgpt ------------------------------------------------------------------------------------
# Lightning-AI/litgpt litgpt/pretrain.py (commit 0363060b9b9952baada5e5e91c5f2ca1030acd35),
# fit(): max_iters = (train.max_tokens // world_size) // (micro_batch_size * max_seq_length),
# warmup_iters = min(max_iters, lr_warmup_steps * accumulation) with accumulation =
# (global_batch_size // devices) // micro_batch_size (litgpt/args.py TrainArgs), and each
# micro-iteration it (0-based) sets get_lr(optimizer lr, it, warmup_iters, max_iters, min_lr):
#   it < warmup_iters: lr * it / warmup_iters; it > max_iters: min_lr;
#   else min_lr + 0.5 * (1 + cos(pi * (it - warmup_iters) / (max_iters - warmup_iters))) * (lr - min_lr).
# Optimizer step s (the logged `step`) is taken at micro-iteration it = s * accumulation - 1,
# so in steps every piece starts 1 / accumulation later. validate_args refuses train.max_steps.


def _litgpt(config: _Config) -> TrainerPlan:
    devices = config.number("devices")
    nodes = config.number("num_nodes", 1.0)
    batch = config.number("train.global_batch_size")
    micro = config.number("train.micro_batch_size")
    seq = config.number("train.max_seq_length")
    tokens = config.number("train.max_tokens")
    lr = config.number("optimizer.init_args.lr") or config.number("optimizer.lr")
    warmup_steps = config.number("train.lr_warmup_steps", 100)
    floor = config.number("train.min_lr", 6e-5)
    assert warmup_steps is not None and floor is not None
    if None in (devices, batch, micro, seq, tokens) or not (devices and batch and micro and seq):
        return config.plan("unknown", [], None)
    assert devices is not None and batch is not None and micro is not None and seq is not None and tokens is not None
    accumulation = float((int(batch) // int(devices)) // int(micro))
    max_iters = float((int(tokens) // int(devices * (nodes or 1.0))) // (int(micro) * int(seq)))
    if accumulation <= 0 or max_iters <= 0:
        config.contradiction(f"global_batch_size={batch:g} is below micro_batch_size={micro:g} x devices={devices:g}")
        return config.plan("unknown", [], None)
    total = float(int(max_iters) // int(accumulation))
    if config.number("train.lr_warmup_fraction", used=False):
        config.notes.append("litgpt param train.lr_warmup_fraction counts a share of the data loader's length: not read")
        return config.plan("unknown", [], total)
    if lr is None:
        config.notes.append("litgpt params hold no optimizer lr to set train.min_lr against")
        return config.plan("unknown", [], total)
    if floor > lr:
        config.contradiction(f"min_lr={floor:g} is above the optimizer lr={lr:g}")
        return config.plan("unknown", [], total)
    warmup = min(max_iters, warmup_steps * accumulation)
    shift = 1.0 / accumulation
    pieces = [Piece(shift, (warmup + 1.0) * shift, "linear", 0.0, lr)] if warmup > 0 else []
    pieces.append(Piece((warmup + 1.0) * shift, (max_iters + 1.0) * shift, "cosine", lr, floor))
    return config.plan("cosine", pieces, total)


# --- Megatron-LM -------------------------------------------------------------------------------
# NVIDIA/Megatron-LM megatron/training/training.py get_optimizer_param_scheduler (iteration
# based: lr_decay_iters defaults to train_iters; warmup lr_warmup_iters, or lr_warmup_fraction
# x lr_decay_iters; WSD's decay lr_wsd_decay_iters; init_lr lr_warmup_init, max_lr lr, min_lr
# min_lr; every count x global_batch_size, which cancels in the ratios below) and
# megatron/core/optimizer_param_scheduler.py OptimizerParamScheduler.get_lr at n steps:
#   warmup > 0 and n <= warmup: init + (max - init) * n / warmup; constant: max;
#   n > decay: min; else ratio = (n - warmup) / (decay - warmup), min + coeff * (max - min)
#   with coeff 1 - ratio (linear), (cos(pi ratio) + 1) / 2 (cosine), and for WSD 1 until
#   decay - wsd, then over the last wsd steps linear, cosine or minus_sqrt (1 - sqrt).
# Its asserts: max_lr >= min_lr, lr_warmup_steps < lr_decay_steps. training_log logs the lr
# the scheduler set after each iteration at that iteration (the frame's step).


def _megatron(config: _Config) -> TrainerPlan:
    total = config.number("train_iters")
    if total is None or total <= 0:
        return config.plan("unknown", [], None)
    style = config.word("lr_decay_style", "linear")
    lr = config.number("lr")
    if lr is None:
        config.notes.append("Megatron-LM params hold no lr")
        return config.plan("unknown", [], total)
    decay = config.number("lr_decay_iters") or total
    fraction = config.number("lr_warmup_fraction")
    warmup = fraction * decay if fraction is not None else config.number("lr_warmup_iters", 0.0)
    floor = config.number("min_lr", 0.0)
    start = config.number("lr_warmup_init", 0.0)
    assert warmup is not None and floor is not None and start is not None
    if floor > lr:
        config.contradiction(f"min_lr={floor:g} is above lr={lr:g}")
        return config.plan("unknown", [], total)
    if warmup >= decay:
        config.contradiction(f"the warmup ({warmup:g} iterations) is not before lr_decay_iters={decay:g}")
        return config.plan("unknown", [], total)
    pieces = [Piece(0.0, warmup, "linear", start, lr)] if warmup > 0 else []
    if style == "constant":
        return config.plan("constant", pieces + [Piece(warmup, total, "linear", lr, lr)], total)
    if style in ("linear", "cosine"):
        return config.plan(style, pieces + [Piece(warmup, decay, style, lr, floor)], total)
    if style == "WSD":
        wsd = config.number("lr_wsd_decay_iters")
        kind = {"linear": "linear", "cosine": "cosine", "minus_sqrt": "sqrt"}.get(config.word("lr_wsd_decay_style", "exponential"))
        if wsd is None or kind is None or not 0 < wsd <= decay - warmup:
            config.notes.append("Megatron-LM's WSD decay is read for lr_wsd_decay_style linear, cosine or minus_sqrt "
                                "with lr_wsd_decay_iters within the decay: the shape is not read")
            return config.plan("unknown", [], total)
        anneal = decay - wsd
        pieces += [Piece(warmup, anneal, "linear", lr, lr), Piece(anneal, decay, kind, lr, floor)]
        return config.plan(f"wsd ({kind} decay)", pieces, total)
    config.notes.append(f"Megatron-LM lr_decay_style={style!r} is not read here (constant, linear, cosine, WSD are)")
    return config.plan("unknown", [], total)


# --- OLMo --------------------------------------------------------------------------------------
# allenai/OLMo (commit 9b502b7af9cf63eddf6f081ea410c888da3f914d) olmo/config.py SchedulerConfig
# (name cosine_with_warmup, units steps, t_warmup 100, t_max None, alpha_f 0.1, warmup_min_lr
# None), olmo/optim.py build_scheduler and the schedulers' get_lr(initial_lr, step, max_steps):
#   warmup (step < t_warmup): wmin + (lr - wmin) * step / t_warmup, wmin = warmup_min_lr or 0.1 lr
#   cosine_with_warmup: eta + (lr - eta) * (1 + cos(pi (step - t_warmup) / (t_max - t_warmup))) / 2
#   linear_with_warmup: lr - (lr - eta) * (step - t_warmup) / (t_max - t_warmup)
#   both eta = lr * alpha_f from t_max on (t_max defaults to the run's maximum); constant: lr.
# olmo/train.py: train_step sets the lr from scheduler_current (global_step, or with units
# tokens global_train_tokens_seen) and scheduler_max (max_steps, or max_tokens); global_step
# counts from 1 and is the W&B step. max_duration is steps, or tokens with "T" (max_steps =
# tokens // (global_train_batch_size x model.max_sequence_length) for a fresh run).


def _olmo(config: _Config) -> TrainerPlan:
    duration = config.raw("max_duration")
    per_step = (config.number("global_train_batch_size") or 0.0) * (config.number("model.max_sequence_length") or 0.0)
    total, max_tokens = _olmo_duration(None if duration is None else duration[1], per_step)
    if duration is not None:
        config.used.append(("max_duration", str(duration[1])))
        if total is None:
            config.notes.append(f"OLMo max_duration={duration[1]!r} gives no step count (epochs, or tokens without "
                                "global_train_batch_size and model.max_sequence_length): the planned steps are not known")
    name = config.word("scheduler.name", "cosine_with_warmup")
    units = config.word("scheduler.units", "steps")
    lr = config.number("optimizer.learning_rate")
    if lr is None or total is None:
        return config.plan("unknown", [], total)
    if name == "constant":
        return config.plan("constant", [Piece(0.0, total, "linear", lr, lr)], total)
    if name not in ("cosine_with_warmup", "linear_with_warmup"):
        config.notes.append(f"OLMo scheduler.name={name!r} is not read here (cosine_with_warmup, linear_with_warmup, constant are)")
        return config.plan("unknown", [], total)
    scale = 1.0 if units == "steps" else per_step  # a scheduler in tokens, in steps
    if units not in ("steps", "tokens") or scale <= 0:
        config.notes.append(f"OLMo scheduler.units={units!r} cannot be turned into steps from these params")
        return config.plan("unknown", [], total)
    warmup = (config.number("scheduler.t_warmup", 100.0) or 0.0) / scale
    t_max = config.number("scheduler.t_max")
    end = t_max / scale if t_max is not None else (total if units == "steps" else (max_tokens or total * per_step) / scale)
    alpha = config.number("scheduler.alpha_f", 0.1)
    start = config.number("scheduler.warmup_min_lr")
    assert alpha is not None
    start = 0.1 * lr if start is None else start
    if not 0 <= start < lr:
        config.contradiction(f"warmup_min_lr={start:g} is not below optimizer.learning_rate={lr:g}")
        return config.plan("unknown", [], total)
    if end <= warmup:
        config.contradiction(f"t_max ({end:g} steps) is not after t_warmup ({warmup:g} steps)")
        return config.plan("unknown", [], total)
    kind = "cosine" if name == "cosine_with_warmup" else "linear"
    pieces = [Piece(0.0, warmup, "linear", start, lr)] if warmup > 0 else []
    pieces.append(Piece(warmup, end, kind, lr, lr * alpha))
    return config.plan(kind, pieces, total)


def _olmo_duration(value: Any, per_step: float) -> tuple[float | None, float | None]:
    """(max steps, max tokens) of OLMo's max_duration: steps, or tokens with "T"."""
    if value is None or isinstance(value, bool):
        return None, None
    text = str(value).strip()
    if text.endswith("T"):
        tokens = as_float(text[:-1])
        if tokens is None or per_step <= 0:
            return None, tokens
        return float(int(tokens) // int(per_step)), tokens
    if text.endswith("ep"):
        return None, None
    steps = as_float(text)
    return (float(int(steps)), None) if steps is not None else (None, None)


_READERS: dict[str, Callable[[_Config], TrainerPlan]] = {
    "nanoGPT": _nanogpt,
    "torchtitan": _torchtitan,
    "litgpt": _litgpt,
    "Megatron-LM": _megatron,
    "OLMo": _olmo,
}
# Names only this trainer's config holds: a run from an unknown source (a CSV, a generic
# tracker run) is read as the trainer's when its config has every name of one group.
_MARKS = {
    "nanoGPT": (("decay_lr", "lr_decay_iters"), ("decay_lr", "warmup_iters")),
    "torchtitan": (("lr_scheduler.decay_type", "training.steps"), ("lr_scheduler.warmup_steps", "training.steps")),
    "litgpt": (("train.lr_warmup_steps", "train.max_tokens"),),
    "Megatron-LM": (("lr_decay_style", "train_iters"), ("lr_warmup_iters", "train_iters")),
    "OLMo": (("scheduler.t_warmup", "model.max_sequence_length", "max_duration"),),
}


def _values(params: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for path, value in param_paths(params):
        key = ".".join(part.lower() for name in path for part in name.replace("/", ".").split("."))
        values.setdefault(key, value)
    return values


def trainer_of(params: Mapping[str, Any], first: str | None = None) -> str | None:
    """The trainer whose config names ``params`` hold (see ``_MARKS``), ``first`` tried
    first; None when they hold no trainer's."""
    config = _Config("", _values(params))
    order = ([first] if first in _MARKS else []) + [name for name in _MARKS if name != first]
    for trainer in order:
        if any(all(config.raw(name) is not None for name in group) for group in _MARKS[trainer]):
            return trainer
    return None


def read_trainer_plan(params: Mapping[str, Any], trainer: str | None) -> TrainerPlan | None:
    """The plan a trainer's config holds; None when the params hold no trainer's names.

    ``trainer`` (as ``frame.conventions`` names it, from the logged keys) is tried first,
    but only on its own config names: a run logged as nanoGPT logs but configured some
    other way gets no plan made of nanoGPT's defaults.
    """
    name = trainer_of(params, first=trainer)
    if name is None:
        return None
    return _READERS[name](_Config(name, _values(params)))
