"""How each trainer logs a run, and which of a run's keys the frame reads as what ("read as").

Every trainer writes its own keys, and its own step. W&B numbers rows by ``_step``, which
counts ``log`` calls, not optimizer steps; MLflow's metric step is whatever the trainer
passed (HF and Lightning pass the optimizer step, litgpt passes micro-iterations). So a
source hands :func:`read_as` the keys a run logged and its flattened config, and gets back
which key is the step, the loss, the lr and the tokens, where tokens per step come from,
and a description of each choice for the report. A user's ``columns`` override any
choice. The key names are the trainers' own, from their source (README, "Trainer
conventions").

Tokens come, in this order, from a logged cumulative count, a per-device count times the
world size, or tokens per step composed from the config (per-device batch x gradient
accumulation x world size x sequence length, ``seq_len`` and ``world_size`` filling what
the run never logged). With none of these the analysis works on steps.

Each trainer's keys are in :mod:`.trainer_conventions`, tokens per step composed from a
config (or worked out from a logged count) in :mod:`.step_tokens`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tracker_plugin.errors import DataError
from tracker_plugin.frame.history import Columns, History, build_history, eval_loss_alone, eval_loss_note
from tracker_plugin.frame.interval_means import EPOCH_KEY, MEAN_WORDS, epoch_means, with_loss_spans
from tracker_plugin.frame.step_tokens import (
    _batch_param,
    _composed,
    _param,
    _seq_len,
    _seq_len_named,
    _world,
    _world_unused,
    batch_from_tokens,
)
from tracker_plugin.frame.trainer_conventions import _LIGHTNING, CONVENTIONS, Convention, detect
from tracker_plugin.plan.params import planned_steps as _planned_steps

__all__ = [
    "BATCH_FROM_TOKENS",
    "CONVENTIONS",
    "Convention",
    "Reading",
    "batch_from_tokens",
    "build_read_history",
    "detect",
    "finish_reading",
    "read_as",
]

# The frame column holding tokens per step worked out from a logged cumulative count.
BATCH_FROM_TOKENS = "__batch_from_tokens"
_SCALED_TOKENS = "__tokens_x_world"


# Megatron-LM's TensorBoard writer logs each scalar again as '<key> vs samples' at the sample
# count (a TensorBoard synced to W&B carries them): never the lr or the loss.
_VS_SAMPLES = " vs samples"
# W&B's TensorBoard sync (wandb/integration/tensorboard/log.py) logs each event's step as this.
_TB_STEP = "global_step"
_LR_PATTERN = re.compile(r"^(?!.* vs (samples|tokens)$)(lr-.+|lr/.+|.*learning_rate.*|.*learning-rate.*)$")
_LIGHTNING_LOSS = re.compile(r"^(?!val|eval|test).*loss.*_step$")


@dataclass(frozen=True)
class Reading:
    """What to read as what: the source builds its frame with :attr:`columns` and hands it
    and this to :func:`finish_reading` around ``build_history``."""

    framework: str
    columns: Columns
    batch_size: float | None  # tokens per step for build_history (None: from a column)
    batch_source: str | None
    on_steps: bool  # no tokens to be had: tokens per step is 1, the window in steps
    # The scaled count (per-device tokens, or cumulative samples) is multiplied by this:
    # the world size, or the sequence length.
    world: float | None
    described: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    planned_steps: float | None = None
    eval_loss: str | None = None
    seq_len: float | None = None  # the sequence length, when the config or the user gave it
    # Only rows holding one of these keys give a step (empty: every row). A TensorBoard
    # synced into W&B logs its own step as ``global_step`` on every row: Megatron-LM's
    # '<key> vs samples' rows carry the sample count there, not the iteration.
    step_rows: tuple[str, ...] = ()
    # The loss is a mean over each logging interval (HF); or, with ``epoch_key``, when it is
    # logged once per epoch (Lightning's on_epoch): frame/interval_means.py.
    loss_mean: bool = False
    epoch_key: str | None = None

    def keys(self) -> list[str]:
        """The logged keys the frame needs, each once."""
        names: list[str] = []
        roles = (self.columns.step, self.columns.loss, self.columns.tokens, self.columns.batch, self.columns.lr)
        for candidates in (*roles, self.columns.time):
            for name in candidates:
                if name not in names and not name.startswith("__"):
                    names.append(name)
        if self.world is not None and self.columns.tokens == (_SCALED_TOKENS,):
            names.append(self._device_tokens)
        if self.epoch_key is not None and self.epoch_key not in names:
            names.append(self.epoch_key)
        return names

    def spans(self, history: History, frame: pd.DataFrame) -> History:
        """``history`` with the steps each loss averages, where the loss is an interval mean."""
        loss = self.columns.loss[0] if self.columns.loss else ""
        return with_loss_spans(history, self.loss_mean or epoch_means(frame, loss, self.epoch_key))

    @property
    def _device_tokens(self) -> str:
        return self.described.get("_device_tokens", "")

    def stepped_rows(self, frame: pd.DataFrame) -> np.ndarray | None:
        """Which rows of ``frame`` give a step (:attr:`step_rows`); None: every row."""
        held = [k for k in self.step_rows if k in frame]
        if not held:
            return None
        return frame[held].notna().any(axis=1).to_numpy(bool)

    def prepare(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with the columns this reading adds: per-device tokens times the world
        size, and tokens per step from a cumulative count (so no batch is demanded)."""
        if self.columns.tokens == (_SCALED_TOKENS,) and self._device_tokens in frame:
            frame = frame.assign(**{_SCALED_TOKENS: pd.to_numeric(frame[self._device_tokens], errors="coerce") * (self.world or 1.0)})
        if self.columns.batch == (BATCH_FROM_TOKENS,):
            (tokens_key,) = self.columns.tokens
            (step_key,) = self.columns.step
            if tokens_key in frame and step_key in frame:
                frame = frame.assign(**{BATCH_FROM_TOKENS: batch_from_tokens(frame[step_key], frame[tokens_key])})
        return frame


def read_as(
    keys: Collection[str],
    config: Mapping[str, Any],
    columns: Columns | None = None,
    *,
    native_step: str,
    seq_len: float | None = None,
    world_size: float | None = None,
    batch_size: float | None = None,
    batch_params: Sequence[str] = (),
) -> Reading:
    """Decide which of ``keys`` the frame reads as step, loss, lr, tokens and batch.

    ``keys``: the keys the run logged (``native_step``, the tracker's own step column,
    aside). ``config``: the run's flattened config or params. ``columns``: the user's
    choices; a field that differs from the default :class:`Columns` is pinned and wins.
    ``batch_size``/``seq_len``/``world_size``: what the user gave for what the run never
    logged. ``batch_params``: config names holding tokens per step.
    """
    columns = columns or Columns()
    default = Columns()
    logged = set(keys)
    convention = detect(logged)
    if convention is not None:
        # A name the trainer's own source says counts sequences (Megatron-LM's flat
        # global_batch_size) is never read as tokens per step: its tokens come from the
        # trainer's parts (samples x seq_length).
        batch_params = tuple(name for name in batch_params if name not in convention.seqs_per_step)
    described: dict[str, str] = {}
    notes: list[str] = []

    def pinned(role: str) -> tuple[str, ...] | None:
        value: tuple[str, ...] = getattr(columns, role)
        return value if value != getattr(default, role) else None

    step = _choose(pinned("step"), convention.step if convention else (), logged)
    if step is None:
        step = native_step if native_step in logged or not _first(default.step, logged) else _first(default.step, logged)
    loss = _choose(pinned("loss"), _loss_keys(convention, logged), logged)
    if loss is None:
        loss = _first(default.loss, logged)
    alone = None if loss is not None else eval_loss_alone(sorted(logged), columns)
    if alone is None and loss is None and pinned("loss") is None and convention is not None:
        alone = _first(convention.eval_loss, logged)
    if alone is not None:
        loss = alone
        notes.append(eval_loss_note(alone))
    lr = _choose(pinned("lr"), convention.lr if convention else (), logged) or _lr_key(logged, default.lr)
    eval_loss = _first(convention.eval_loss, logged) if convention and alone is None else None
    step = step or native_step
    own = {"_mlflow_step": "MLflow's metric step", "_step": "_step (W&B's row step)"}
    described.update(step=own.get(step, step), loss=loss or "(none)", lr=lr or "(none)")
    if eval_loss and loss:
        described["loss"] = f"{loss} (training; eval {eval_loss} left aside)"

    world, world_from = _world(convention, config, world_size)
    seq_found = _seq_len_named(convention, config, seq_len)
    tokens_key, batch_key, scale, scaled = _tokens(
        pinned, convention, logged, default, world, seq_found[0] if seq_found else None
    )
    batch_size_out: float | None = None
    batch_source: str | None = None
    on_steps = False
    world_used = tokens_key == _SCALED_TOKENS and convention is not None and scaled in convention.device_tokens
    if batch_key is not None:
        described["tokens"] = f"{tokens_key} (logged)" if tokens_key else f"from the batch column {batch_key}"
    samples = _first(convention.samples, logged) if convention else None
    if tokens_key == _SCALED_TOKENS:
        described["_device_tokens"] = scaled
        if convention is not None and scaled in convention.device_tokens:
            described["tokens"] = f"{scaled} (per device) x world size {world:g} (from {world_from})"
        else:  # cumulative samples (sequences) x the sequence length
            described["tokens"] = f"{scaled} (samples) x seq {scale:g} (from {seq_found[1] if seq_found else ''})"
    elif samples is not None and tokens_key is None:
        notes.append(
            f"'{samples}' counts sequences, not tokens, and the sequence length is not in the config; "
            "pass seq_len for a token axis"
        )
    elif tokens_key is not None and convention is not None and tokens_key in convention.device_tokens:
        notes.append(
            f"tokens from '{tokens_key}' count one device's tokens; pass world_size with the number of "
            "devices (the token axis is too short by that factor)"
        )
    # A batch the user or a tokens-per-step param gives wins over one worked out from tokens.
    explicit = batch_size is not None or _batch_param(config, batch_params) is not None
    if tokens_key is not None and batch_key is None and not explicit:
        batch_key = BATCH_FROM_TOKENS
        described["tokens"] = described.get("tokens", f"{tokens_key} (logged)")
    if batch_key is None:
        composed = _composed(convention, config, batch_size, batch_params, seq_len, world)
        world_used = world_used or composed.world_used
        batch_size_out, batch_source = composed.tokens, composed.source
        if batch_size_out is None:
            on_steps, batch_size_out, batch_source = True, 1.0, "no tokens: one per step"
            described["tokens"] = "none (on steps)"
            notes.append(f"no tokens logged and none can be composed ({composed.how}): working on steps; "
                         f"{composed.remedy}")
        else:
            described["tokens"] = composed.how
            notes += composed.assumed
    if world_size is not None and not world_used:
        notes.append(_world_unused(world_size, described["tokens"]))
    planned = _planned_steps(_param(config, convention.planned_steps)) if convention else None
    step_rows: tuple[str, ...] = ()
    if step == _TB_STEP and pinned("step") is None and any(k.endswith(_VS_SAMPLES) for k in logged):
        # Megatron-LM's TensorBoard synced into W&B: the iteration is global_step on the rows
        # of the keys logged at the iteration; the '<key> vs samples' rows hold the sample count.
        step_rows = tuple(k for k in (loss, lr, scaled or tokens_key) if k and not k.startswith("__"))
    return Reading(
        framework=convention.name if convention else "generic",
        columns=Columns(
            step=(step,),
            loss=(loss,) if loss else default.loss,
            tokens=(tokens_key,) if tokens_key else (),
            batch=(batch_key,) if batch_key else (),
            lr=(lr,) if lr else (),
            # The clock is found by its own names (frame/time.py), then by the trainer's.
            time=pinned("time") or (*default.time, *(convention.time if convention else ())),
        ),
        batch_size=batch_size_out,
        batch_source=batch_source,
        on_steps=on_steps,
        world=scale,
        described=described,
        notes=tuple(notes),
        planned_steps=planned,
        eval_loss=eval_loss,
        seq_len=_seq_len(convention, config, seq_len),
        step_rows=step_rows,
        loss_mean=bool(convention and loss in convention.loss_means),
        epoch_key=EPOCH_KEY if convention is _LIGHTNING and EPOCH_KEY in logged and loss and not loss.endswith("_step")
        else None,
    )


def build_read_history(
    frame: pd.DataFrame,
    reading: Reading,
    *,
    run: str,
    logged: Collection[str],
    logged_nan_loss: np.ndarray | None = None,
) -> History:
    """``build_history`` on ``frame`` as ``reading`` reads it. A loss key with one value
    (a run aggregate, such as HF's ``train_loss`` in MLflow) is an error that names the
    run's other loss keys."""
    kept = reading.stepped_rows(frame)
    if kept is not None:
        frame = frame[kept].reset_index(drop=True)
        logged_nan_loss = None if logged_nan_loss is None else np.asarray(logged_nan_loss, bool)[kept]
    try:
        history = build_history(
            reading.prepare(frame),
            run=run,
            columns=reading.columns,
            batch_size=reading.batch_size,
            logged_nan_loss=logged_nan_loss,
        )
        return reading.spans(history, frame)
    except DataError as exc:
        if exc.column in (BATCH_FROM_TOKENS, _SCALED_TOKENS):
            raise _of_logged_column(exc, reading, run) from None
        if exc.column in _OWN_STEPS:  # the tracker's own step: no column the user logged
            raise DataError(f"{_OWN_STEPS[exc.column]}: {exc.problem.removeprefix(f'column {exc.column!r}: ')} (a step "
                            "counts optimizer steps from 0: name the run's step key with columns.step)", run=run) from None
        (loss,) = reading.columns.loss[:1] or ("",)
        if exc.column != loss or "only one finite value" not in str(exc):
            raise
        others = sorted(k for k in logged if "loss" in k.lower() and k != loss)
        if not others:
            raise
        raise DataError(
            f"has only one finite value: a run aggregate, not a loss history; the run also logs "
            f"{others[:8]} (choose the per-step loss with columns.loss)",
            run=run,
            column=loss,
        ) from None


# The trackers' own step columns, as messages name them.
_OWN_STEPS = {"_mlflow_step": "the MLflow metric step of the loss"}


def _of_logged_column(exc: DataError, reading: Reading, run: str) -> DataError:
    """An error about a column the reading made (tokens per step from the count, the count
    times the world size), said of the logged tokens column it was made from."""
    problem = exc.problem.removeprefix(f"column '{exc.column}': ")
    device = reading.described.get("_device_tokens", "")
    tokens = device or (reading.columns.tokens[:1] or ("tokens",))[0]
    if exc.column == BATCH_FROM_TOKENS and problem.startswith("no such column"):
        problem = (
            "the count never grows between two logged steps, so it gives no tokens per step; pass "
            "batch_size (tokens per step) or name another tokens column with columns.tokens"
        )
    elif exc.column == BATCH_FROM_TOKENS:
        problem = f"tokens per step from its count: {problem}"
    else:
        problem = f"times the world size: {problem}"
    return DataError(problem, run=run, column=tokens)


def finish_reading(history: History, reading: Reading, *, finished: bool = False) -> History:
    """``history`` with how it was read, and the sanity checks' notes."""
    notes = list(history.notes) + list(reading.notes)
    planned = reading.planned_steps
    last = history.last_step
    step_key = reading.described.get("step", "")
    if planned and last > 1.05 * planned:
        notes.append(
            f"the last step {last:,} is past the planned {planned:,.0f} steps: '{step_key}' may count "
            "micro-batches or log calls; choose the optimizer step with columns.step"
        )
    elif planned and finished and last < 0.5 * planned:
        notes.append(
            f"the run finished at step {last:,}, far below its planned {planned:,.0f} steps: if '{step_key}' "
            "counts log calls, choose the optimizer step with columns.step"
        )
    seq = reading.seq_len
    if seq and not reading.on_steps and float(np.median(history.batch)) < seq:
        notes.append(
            f"tokens per step ({float(np.median(history.batch)):,.0f}) are fewer than one sequence of {seq:,.0f} "
            "tokens: the count may be of sequences or of one device; check columns.tokens and world_size"
        )
    described = {k: v for k, v in reading.described.items() if not k.startswith("_")}
    if history.loss_spans is not None:
        described["loss"] = f"{described.get('loss', history.loss_key)} ({MEAN_WORDS})"
    described["framework"] = reading.framework
    source = history.batch_source
    if reading.columns.batch == (BATCH_FROM_TOKENS,):
        if reading.columns.tokens == (_SCALED_TOKENS,):
            source = f"the logged count '{reading._device_tokens}' x {reading.world or 1.0:g}"
        else:
            source = f"the logged tokens '{reading.columns.tokens[0]}'"
    elif reading.batch_source == "params":
        source = "params: per-device batch x accumulation x world size x sequence length"
    elif reading.on_steps:
        source = "none: the analysis is on steps"
    return replace(
        history, notes=tuple(notes), read_as=tuple(described.items()), on_steps=reading.on_steps, batch_source=source
    )


# -- choices ---------------------------------------------------------------------------------


def _first(candidates: Sequence[str], logged: Collection[str]) -> str | None:
    """The first candidate logged; a candidate with ``*`` matches a logged key by pattern
    (the first in sorted order), for keys that carry a user's label."""
    for candidate in candidates:
        if "*" in candidate:
            matches = sorted(k for k in logged if fnmatch.fnmatchcase(k, candidate))
            if matches:
                return matches[0]
        elif candidate in logged:
            return candidate
    return None


def _choose(pinned: tuple[str, ...] | None, candidates: Sequence[str], logged: Collection[str]) -> str | None:
    """The pinned name (which then must be logged: build_history says so), else the first
    candidate logged."""
    if pinned is not None:
        return _first(pinned, logged) or pinned[0]
    return _first(candidates, logged)


def _loss_keys(convention: Convention | None, logged: Collection[str]) -> tuple[str, ...]:
    if convention is None:
        return ()
    if convention is _LIGHTNING:
        return tuple(sorted(k for k in logged if _LIGHTNING_LOSS.match(k) and "train" in k)) + tuple(
            sorted(k for k in logged if _LIGHTNING_LOSS.match(k))
        )
    return convention.loss


def _lr_key(logged: Collection[str], defaults: Sequence[str]) -> str | None:
    """An lr key in any trainer's form: the defaults, then lr-*, lr/*, *learning_rate*."""
    found = _first(defaults, logged)
    if found is not None:
        return found
    matches = sorted(k for k in logged if _LR_PATTERN.match(k) and "scheduler" not in k)
    return matches[0] if matches else None


def _tokens(
    pinned: Any,
    convention: Convention | None,
    logged: Collection[str],
    default: Columns,
    world: float | None,
    seq: float | None,
) -> tuple[str | None, str | None, float | None, str]:
    """(tokens key, batch key, scale, scaled key): pinned, a logged total, a per-device
    count times a known world size, a cumulative sample count times a known sequence
    length, the default candidates. A scaled count is read as the column ``_SCALED_TOKENS``
    (``scaled key`` times ``scale``)."""
    tokens_pin, batch_pin = pinned("tokens"), pinned("batch")
    batch = _choose(batch_pin, (), logged) if batch_pin else _first(default.batch, logged)
    if tokens_pin is not None:
        return _choose(tokens_pin, (), logged), batch, None, ""
    if convention is not None:
        total = _first(convention.tokens, logged)
        if total is not None:
            return total, batch, None, ""
        device = _first(convention.device_tokens, logged)
        if device is not None:
            if world is not None:
                return _SCALED_TOKENS, batch, world, device
            return device, batch, None, ""
        samples = _first(convention.samples, logged)
        if samples is not None and seq is not None and seq > 0:
            return _SCALED_TOKENS, batch, seq, samples
    return _first(default.tokens, logged), batch, None, ""


