"""Tokens per step: composed from a run's config, or worked out from a logged count.

Per-device batch x gradient accumulation (or an accumulation schedule) x world size x
sequence length, each found under its trainer's config keys, with ``seq_len`` and
``world_size`` filling what the run never logged; or, where the run logged a cumulative
token count, its increments per step (:func:`batch_from_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.frame.trainer_conventions import _LIGHTNING, Convention
from tracker_plugin.plan.params import as_float

__all__ = ["batch_from_tokens"]


def _world(convention: Convention | None, config: Mapping[str, Any], given: float | None) -> tuple[float | None, str]:
    if given is not None:
        return float(given), "world_size"
    if convention is None:
        return None, ""
    found = _param(config, convention.world, with_name=True)
    if found is None:
        return None, ""
    value, name = found
    number = as_float(value)
    nodes = as_float(_param(config, ("num_nodes",))) if name == "devices" else None
    if number is None or number < 1:
        return None, ""
    return number * (nodes or 1), f"config '{name}'" + (" x num_nodes" if nodes else "")


def _world_unused(world_size: float, tokens: str) -> str:
    """The note for a world size the user gave that multiplies nothing: the tokens already
    count every device (a logged total, a global batch), or there are none."""
    return (f"world_size {world_size:g} is not used: the tokens are {tokens}, which already count every device "
            "or need no device count")


@dataclass(frozen=True)
class _Composed:
    """Tokens per step as composed (None: none can be), how, and what it rests on.

    ``remedy``: the settings that would give tokens, for the on-steps note. ``assumed``: a
    note for each part the tokens rest on that the config does not record (the gradient
    accumulation, the world size). ``world_used``: the world size multiplied a per-device batch."""

    tokens: float | None
    source: str | None
    how: str
    remedy: str = "pass seq_len (and world_size) or batch_size for tokens, or name the tokens column with columns.tokens"
    assumed: tuple[str, ...] = ()
    world_used: bool = False


def _composed(
    convention: Convention | None,
    config: Mapping[str, Any],
    batch_size: float | None,
    batch_params: Sequence[str],
    seq_len: float | None,
    world: float | None,
) -> _Composed:
    """Tokens per step from the flag, a tokens-per-step param, or the trainer's parts.

    A config that gives the batch in sequences but not the gradient accumulation (HF's
    ``trainer_state.json``, Lightning's hparams: ``accumulate_grad_batches`` is a Trainer
    argument) composes tokens only when the user gave ``seq_len``, and then says it assumes
    none: a guess of one micro-batch per step would be off by the accumulation, silently.
    A world size says nothing of the accumulation, so it alone composes nothing."""
    if batch_size is not None:
        return _Composed(float(batch_size), "batch_size", f"{batch_size:,.0f} per step (batch_size)")
    explicit = _batch_param(config, batch_params)
    if explicit is not None:
        value, name = explicit
        return _Composed(value, f"param '{name}'", f"{value:,.0f} per step (param '{name}')")
    if convention is None:
        remedy = "pass batch_size (tokens per step) or name the tokens column with columns.tokens"
        return _Composed(None, None, "no batch key or param", remedy)
    named = _seq_len_named(convention, config, seq_len)
    seq, seq_from = named if named else (None, "")
    seqs = _sequences(convention, config, world)
    if seqs.problem:
        return _Composed(None, None, seqs.problem, "pass batch_size (tokens per step) or name the tokens column "
                         "with columns.tokens")
    if seqs.count is None:
        return _Composed(None, None, "no batch size in the config")
    unaccumulated = not seqs.accumulated and seq_len is None
    remedy = _Composed.remedy if not unaccumulated else (
        "pass batch_size (tokens per step), or seq_len to compose them assuming no accumulation, "
        "or name the tokens column with columns.tokens"
    )
    if unaccumulated:
        device = seqs.parts.split(" x ")[0]  # "'train_batch_size' 4": the per-device part alone is known
        missing = "no gradient accumulation" + (" and no sequence length" if seq is None else "")
        return _Composed(None, None, f"{device} sequences per device, but {missing} in the config", remedy)
    if seq is None:
        cap = _seq_cap(convention, config)
        if cap is not None:
            # A cap gives an upper bound only (3.4x the truth on a TRL SFT run): no tokens from it.
            return _Composed(None, None, f"{seqs.parts} sequences per step, but {cap}", "pass seq_len (the mean "
                             "tokens a sequence holds) or batch_size (tokens per step), or name the tokens column "
                             "with columns.tokens")
        return _Composed(None, None, f"{seqs.parts} sequences per step, but no sequence length", remedy)
    tokens = seqs.count * seq
    how = f"from params: {seqs.parts} x seq {seq:g} ({seq_from}) = {tokens:,.0f} per step"
    assumed: tuple[str, ...] = () if seqs.accumulated else (
        f"tokens per step ({tokens:,.0f}) assume no gradient accumulation: the config records none "
        "(pass batch_size with the tokens per step if the run accumulated)",
    )
    if seqs.one_device:
        # A multi-GPU run's tokens would be short by its device count, and nothing would say so.
        assumed += (
            f"tokens per step ({tokens:,.0f}) assume one device: the config records a per-device batch "
            "but no world size (pass world_size with the number of devices if the run used more)",
        )
    return _Composed(tokens, "params", how, assumed=assumed, world_used=seqs.per_device and world is not None)


def _batch_param(config: Mapping[str, Any], names: Sequence[str]) -> tuple[float, str] | None:
    """Tokens per step from the first of ``names`` (``--batch-param``) the config holds."""
    for name in names:  # the name exactly (dotted for nested): these hold tokens, not sequences
        value = as_float(config.get(name))
        if value is not None and value > 0:
            return value, name
    return None


def _seq_len_named(
    convention: Convention | None, config: Mapping[str, Any], given: float | None
) -> tuple[float, str] | None:
    """The sequence length and where it came from: the user's, else the config's, else a cap
    the config fills every sequence to (``packed``)."""
    if given is not None:
        return float(given), "seq_len"
    if convention is None:
        return None
    found = _param(config, convention.seq_len, with_name=True)
    number = as_float(found[0]) if found else None
    if number and number > 0 and found:
        return number, f"config '{found[1]}'"
    cap = _param(config, convention.seq_cap, with_name=True)
    number = as_float(cap[0]) if cap else None
    packed = _param(config, convention.packed, with_name=True)
    if number and number > 0 and cap and packed and _true(packed[0]):
        return number, f"config '{cap[1]}', every sequence packed to it ('{packed[1]}')"
    return None


def _seq_cap(convention: Convention, config: Mapping[str, Any]) -> str | None:
    """What to say of a truncation cap that is the config's only sequence length."""
    cap = _param(config, convention.seq_cap, with_name=True)
    if cap is None or not as_float(cap[0]):
        return None
    return (f"'{cap[1]}' {cap[0]} only caps each sequence ({convention.name} truncates to it): tokens per step "
            "composed from it would be an upper bound")


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _seq_len(convention: Convention | None, config: Mapping[str, Any], given: float | None) -> float | None:
    named = _seq_len_named(convention, config, given)
    return named[0] if named else None


@dataclass(frozen=True)
class _Sequences:
    """Sequences per optimizer step (None: not known), how, and what they rest on.

    ``accumulated``: the accumulation is known (a global count includes it). ``per_device``:
    a per-device count times the world size; ``one_device``: taken for one device, no world
    size being known. ``problem``: why no count can be had though the parts are there."""

    count: float | None
    parts: str = ""
    accumulated: bool = False
    per_device: bool = False
    one_device: bool = False
    problem: str = ""


def _sequences(convention: Convention, config: Mapping[str, Any], world: float | None) -> _Sequences:
    """Sequences per optimizer step: a global count, else per-device x accumulation x world."""
    found = _param(config, convention.seqs_per_step, with_name=True)
    if found is not None and (as_float(found[0]) or 0) > 0:
        return _Sequences(as_float(found[0]), f"'{found[1]}' {found[0]}", accumulated=True)
    device = _param(config, convention.device_batch, with_name=True)
    if device is None or not as_float(device[0]):
        return _Sequences(None)
    found_accum, accum_from, problem = _accumulation(convention, config)
    if problem:
        return _Sequences(None, problem=problem)
    accum = found_accum or 1.0
    accum_word = f"{accum:g}{accum_from}" if found_accum else "1 (assumed: not in the config)"
    per_device = as_float(device[0]) or 0.0
    # A trainer with no accumulation setting of its own counts it in a global batch (torchtitan,
    # Megatron): without one, its default is one micro-batch per step.
    known = found_accum is not None or not convention.accumulation
    if convention.accumulation_is_global:
        return _Sequences(per_device * accum, f"'{device[1]}' {per_device:g} x accumulation {accum_word}", known)
    size = world or 1.0
    word = f"{size:g}" if world is not None else "1 (assumed; world_size)"
    parts = f"'{device[1]}' {per_device:g} x accumulation {accum_word} x world {word}"
    return _Sequences(per_device * accum * size, parts, known, per_device=True, one_device=world is None)


_ACCUMULATION_SCHEDULER = "GradientAccumulationScheduler"


def _accumulation(convention: Convention, config: Mapping[str, Any]) -> tuple[float | None, str, str]:
    """The gradient accumulation the config records, where from (blank: the trainer's own
    name), and why it cannot be one number.

    Lightning's GradientAccumulationScheduler callback (lightning/pytorch/callbacks/
    gradient_accumulation_scheduler.py; LightningCLI's config.yaml lists it under
    trainer.callbacks with init_args.scheduling {epoch: factor}) overrides the Trainer's
    accumulate_grad_batches, which Lightning then requires to be 1: one factor from epoch 0
    is the accumulation, several change the tokens per step by epoch."""
    if convention is _LIGHTNING:
        scheduling = _scheduler_of(config)
        if scheduling is not None:
            factors = {int(k): as_float(v) for k, v in scheduling.items() if as_float(k) is not None}
            if len(factors) == 1 and 0 in factors and factors[0]:
                return factors[0], f" ({_ACCUMULATION_SCHEDULER})", ""
            return None, "", (f"the accumulation changes by epoch ({_ACCUMULATION_SCHEDULER} {dict(sorted(factors.items()))}): "
                              "tokens per step are no one number")
    return as_float(_param(config, convention.accumulation)), "", ""


def _scheduler_of(config: Mapping[str, Any]) -> Mapping[Any, Any] | None:
    """The ``scheduling`` of a GradientAccumulationScheduler in a config's callback list."""
    for value in config.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if isinstance(item, Mapping) and str(item.get("class_path", "")).endswith(_ACCUMULATION_SCHEDULER):
                args = item.get("init_args")
                scheduling = args.get("scheduling") if isinstance(args, Mapping) else None
                if isinstance(scheduling, Mapping):
                    return scheduling
    return None


def _param(config: Mapping[str, Any], names: Sequence[str], *, with_name: bool = False) -> Any:
    """The first of ``names`` in a flattened config: the name itself, else a key ending in
    ``.name`` (a nested section)."""
    for name in names:
        if name in config and config[name] not in (None, ""):
            return (config[name], name) if with_name else config[name]
        for key, value in config.items():
            if key.endswith("." + name) and value not in (None, ""):
                return (value, name) if with_name else value
    return None


def batch_from_tokens(step: pd.Series, tokens: pd.Series) -> np.ndarray:
    """Tokens per step between consecutive rows that logged the count (NaN elsewhere, so
    build_history fills them); the first row takes the second's."""
    s = pd.to_numeric(step, errors="coerce").to_numpy(float)
    t = pd.to_numeric(tokens, errors="coerce").to_numpy(float)
    out = np.full(len(s), np.nan)
    rows = np.flatnonzero(np.isfinite(s) & np.isfinite(t))
    if len(rows) >= 2:
        # Steps or counts near the float limit overflow to inf: a rate that is then no
        # positive number is dropped below, as for any interval that says nothing.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            gap = np.diff(s[rows])
            rate = np.diff(t[rows]) / gap
        # A row that repeats the count (a trainer's end-of-run log) says nothing of the batch.
        rate = np.where((gap > 0) & (rate > 0), rate, np.nan)
        rate = _without_blips(rate)
        out[rows[1:]] = rate
        out[rows[0]] = next((r for r in rate if np.isfinite(r)), np.nan)
    elif len(rows) == 1 and s[rows[0]] > 0:
        out[rows[0]] = t[rows[0]] / s[rows[0]]
    return out


def _without_blips(rate: np.ndarray) -> np.ndarray:
    """``rate`` with each lone interval whose two neighbours agree given their rate.

    An epoch that does not divide by the accumulation ends on a short step (HF, Lightning
    step the optimizer on the epoch's last micro-batches), so one logging interval an epoch
    averages fewer tokens per step. That is no batch stage: a batch schedule never returns
    to its size after one interval. The tokens stay the logged ones; only the batch (the
    EMA's span per step, the stages) is read across the dip. The last interval has no
    neighbour after it: a dip there below two agreeing intervals is the same short step (a
    run ending with its epoch), where a batch schedule would only grow. Intervals that say
    nothing (NaN: an eval row logging the count again at its step) are passed over."""
    out = rate.copy()
    known = np.flatnonzero(np.isfinite(rate))
    if len(known) < 3:
        return out
    seen = rate[known]
    fixed = seen.copy()
    before, here, after = seen[:-2], seen[1:-1], seen[2:]
    lone = np.isclose(before, after, rtol=1e-9) & ~np.isclose(here, before, rtol=1e-9)
    fixed[1:-1][lone] = before[lone]
    if np.isclose(fixed[-3], fixed[-2], rtol=1e-9) and seen[-1] < fixed[-2]:
        fixed[-1] = fixed[-2]
    out[known] = fixed
    return out
