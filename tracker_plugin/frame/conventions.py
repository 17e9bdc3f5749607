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
from tracker_plugin.plan.params import as_float
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


@dataclass(frozen=True)
class Convention:
    """One trainer's keys (as logged) and config names (flattened, matched on their end).

    ``markers``: the trainer is detected when every key of one group is logged.
    ``step``: its optimizer-step keys; empty when the tracker's own step is the optimizer
    step. ``eval_loss`` and ``lr`` names may hold ``*`` (one label, e.g. OLMo's evaluator). ``seqs_per_step``: config names of sequences per optimizer step across devices.
    """

    name: str
    markers: tuple[tuple[str, ...], ...]
    step: tuple[str, ...] = ()
    loss: tuple[str, ...] = ()
    eval_loss: tuple[str, ...] = ()
    lr: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()
    device_tokens: tuple[str, ...] = ()
    # Cumulative sequences (samples) across devices: tokens are these x the sequence length.
    samples: tuple[str, ...] = ()
    device_batch: tuple[str, ...] = ()
    accumulation: tuple[str, ...] = ()
    seqs_per_step: tuple[str, ...] = ()
    world: tuple[str, ...] = ()
    seq_len: tuple[str, ...] = ()
    # A truncation cap on each sequence (TRL's max_length): tokens per step composed from it
    # would be an upper bound, so it is the sequence length only under a ``packed`` flag
    # that fills every sequence to it (torchtune's PackedDataset pads each pack to the cap).
    seq_cap: tuple[str, ...] = ()
    packed: tuple[str, ...] = ()
    planned_steps: tuple[str, ...] = ()
    # The trainer's own clock, tried after the common time names (Columns.time).
    time: tuple[str, ...] = ()
    # The config's accumulation already counts every device (nanoGPT's global value).
    accumulation_is_global: bool = False
    # Loss keys logged as the mean over the steps since the last log (frame/interval_means.py).
    loss_means: tuple[str, ...] = ()


# transformers trainer.py: Trainer.log adds speed_metrics("train", start_time, ...) to every
# training log entry when include_num_input_tokens_seen is on, so each carries
# train_runtime, seconds since this train() call began (a resumed run starts it again);
# _finalize_training logs it once more at the end. Without that setting only the end has it.
_HF = Convention(
    name="Hugging Face Trainer",
    markers=(("train/global_step",), ("loss", "learning_rate", "epoch"), ("loss", "grad_norm", "epoch")),
    step=("train/global_step",),
    loss=("train/loss", "loss"),  # never train_loss: the end-of-run mean, logged once
    loss_means=("train/loss", "loss"),
    eval_loss=("eval/loss", "eval_loss"),
    lr=("train/learning_rate", "learning_rate"),
    # TRL's SFTTrainer (trl/trainer/sft_trainer.py compute_loss) logs num_tokens: the
    # attention mask's sum gathered over every process, cumulative (W&B: train/num_tokens).
    tokens=("train/num_input_tokens_seen", "num_input_tokens_seen", "train/num_tokens", "num_tokens"),
    device_batch=("per_device_train_batch_size", "train_batch_size"),
    accumulation=("gradient_accumulation_steps",),
    world=("world_size",),
    seq_len=("block_size", "sequence_len", "seq_len"),
    # TRL's SFTConfig max_length (max_seq_length before TRL 0.20) truncates each sequence to it.
    seq_cap=("max_length", "max_seq_length"),
    planned_steps=("max_steps",),
    time=("train_runtime",),
)
_LITGPT = Convention(
    name="litgpt",
    markers=(("iter", "step", "total_tokens"), ("iter", "step", "tokens"), ("iter_time", "remaining_time")),
    step=("step",),
    loss=("loss",),
    eval_loss=("val_loss",),
    lr=("learning_rate",),
    tokens=("total_tokens",),
    device_tokens=("tokens",),
    seqs_per_step=("train.global_batch_size",),
    world=("devices",),
    seq_len=("train.max_seq_length", "block_size"),
    planned_steps=("train.max_steps",),
)
_NANOGPT = Convention(
    name="nanoGPT",
    markers=(("iter", "train/loss"), ("iter", "val/loss")),
    step=("iter",),
    loss=("train/loss",),
    eval_loss=("val/loss",),
    lr=("lr",),
    device_batch=("batch_size",),
    accumulation=("gradient_accumulation_steps",),
    seq_len=("block_size",),
    planned_steps=("max_iters",),
    accumulation_is_global=True,
)
_TORCHTITAN = Convention(
    name="torchtitan",
    markers=(("loss_metrics/global_avg_loss",),),
    loss=("loss_metrics/global_avg_loss",),
    eval_loss=("validation_metrics/loss",),
    lr=("lr",),
    tokens=("n_tokens_seen", "ntokens_seen"),
    seqs_per_step=("training.global_batch_size",),
    device_batch=("training.local_batch_size", "training.batch_size"),
    world=("parallelism.data_parallel_shard_degree",),
    seq_len=("training.seq_len",),
    planned_steps=("training.steps",),
)
# OLMo: allenai/OLMo olmo/train.py. Trainer.fit calls wandb.log(metrics, step=self.global_step)
# (1-based, so the W&B step is the optimizer step); train_step logs train/CrossEntropyLoss,
# SpeedMonitor.check throughput/total_tokens (global_train_tokens_seen, every device),
# LRMonitor.check optim/learning_rate_group{idx}. olmo/eval/evaluator.py logs
# eval/{label}/CrossEntropyLoss. Config (TrainConfig): global_train_batch_size,
# device_train_batch_size, model.max_sequence_length, max_duration (steps, or tokens with "T").
_OLMO = Convention(
    name="OLMo",
    markers=(("train/CrossEntropyLoss",),),
    loss=("train/CrossEntropyLoss",),
    eval_loss=("eval/*/CrossEntropyLoss",),
    lr=("optim/learning_rate_group0",),
    tokens=("throughput/total_tokens",),
    seqs_per_step=("global_train_batch_size",),
    device_batch=("device_train_batch_size",),
    seq_len=("model.max_sequence_length", "max_sequence_length"),
    planned_steps=("max_duration",),
)
# Composer / llm-foundry: mosaicml/composer composer/trainer/trainer.py (_train_loop logs the
# timestamp at each batch start: time/batch, time/sample, time/token when the data spec counts
# tokens; older releases trainer/global_step; _train_batch logs loss/train/total, summed over
# microbatches and averaged over ranks), composer/loggers/wandb_logger.py (wandb.log(data,
# step=int(state.timestamp.batch))), composer/callbacks/lr_monitor.py
# (lr-{OptimizerName}/group{idx}, e.g. lr-DecoupledAdamW/group0). time/batch and time/token
# are counts before the batch, so the token rate between rows is tokens per step. Config:
# mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-125m.yaml (global_train_batch_size,
# device_train_microbatch_size, max_seq_len, max_duration "4800ba", scheduler.t_warmup).
# llm-foundry's train metrics (ComposerHFCausalLM's LanguageCrossEntropy, logged by the trainer
# as metrics/train/{name} each batch) are the loss of a run that logs no loss/train/total.
_COMPOSER = Convention(
    name="Composer / llm-foundry",
    markers=(("loss/train/total",), ("metrics/train/LanguageCrossEntropy",)),
    step=("time/batch", "trainer/global_step"),
    loss=("loss/train/total", "metrics/train/LanguageCrossEntropy"),
    eval_loss=("metrics/eval/LanguageCrossEntropy", "metrics/eval/CrossEntropy"),
    lr=("lr-DecoupledAdamW/group0", "lr-*/group0"),
    tokens=("time/token",),
    samples=("time/sample",),
    seqs_per_step=("global_train_batch_size",),
    seq_len=("max_seq_len",),
    planned_steps=("max_duration",),
)
# Megatron-LM: NVIDIA/Megatron-LM megatron/training/training.py (training_log: every
# wandb_writer.log(..., iteration) and writer.add_scalar(..., iteration) take the iteration,
# the optimizer step, as their step; keys learning-rate, batch-size (global, in samples),
# 'samples vs steps' (args.consumed_train_samples, cumulative), and each loss_dict key, which
# pretrain_gpt.py's loss_func names 'lm loss'; evaluate_and_print_results logs
# '{key} validation'). compute_throughputs_and_append_to_progress_log counts tokens as
# consumed_train_samples x seq_length. Args: global_batch_size, micro_batch_size, seq_length,
# train_iters.
_MEGATRON = Convention(
    name="Megatron-LM",
    markers=(("lm loss",), ("learning-rate", "samples vs steps")),
    loss=("lm loss",),
    eval_loss=("lm loss validation",),
    lr=("learning-rate",),
    samples=("samples vs steps",),
    seqs_per_step=("global_batch_size",),
    device_batch=("micro_batch_size",),
    seq_len=("seq_length",),
    planned_steps=("train_iters",),
)
# NeMo (1.x Megatron models): NVIDIA/NeMo
# nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py training_step logs,
# through Lightning's self.log, reduced_train_loss, lr, global_step (trainer.global_step) and
# consumed_samples (compute_consumed_samples(global_step): global_step x global batch);
# validation logs val_loss. Through WandbLogger the row's step is trainer/global_step. Config:
# model.global_batch_size, model.micro_batch_size, model.encoder_seq_length, trainer.max_steps.
_NEMO = Convention(
    name="NeMo",
    markers=(("reduced_train_loss",),),
    step=("global_step", "trainer/global_step"),
    loss=("reduced_train_loss",),
    eval_loss=("val_loss",),
    lr=("lr",),
    samples=("consumed_samples",),
    seqs_per_step=("model.global_batch_size", "global_batch_size"),
    device_batch=("model.micro_batch_size", "micro_batch_size"),
    seq_len=("model.encoder_seq_length", "encoder_seq_length", "seq_length"),
    planned_steps=("trainer.max_steps", "max_steps"),
)
# torchtune: pytorch/torchtune recipes/full_finetune_distributed.py (and the single-device and
# LoRA recipes) train(): every log_every_n_steps optimizer steps, self._metric_logger.log_dict(
# {"loss", "lr", "tokens_per_second_per_gpu", ...}, step=self.global_step), global_step counted
# from 1 after the optimizer step; torchtune/training/metric_logging.py WandBLogger (wandb.log(
# payload, step=step); log_config: wandb.config.update of the resolved config) and MLFlowLogger
# (mlflow.log_metrics(payload, step=step); log_config: mlflow.log_params of the flattened
# config, dotted). No cumulative tokens are logged and the world size is torchrun's, in no
# config. Config: batch_size (per device), gradient_accumulation_steps, tokenizer.max_seq_len
# (a cap on each sample, the length of every pack with dataset.packed: PackedDataset pads each
# pack to it), epochs, max_steps_per_epoch.
_TORCHTUNE = Convention(
    name="torchtune",
    markers=(("tokens_per_second_per_gpu",),),
    loss=("loss",),
    lr=("lr",),
    device_batch=("batch_size",),
    accumulation=("gradient_accumulation_steps",),
    seq_cap=("tokenizer.max_seq_len", "max_seq_len"),
    packed=("dataset.packed", "packed"),
)
# OLMo-core: allenai/OLMo-core src/olmo_core/train/trainer.py (record_metric names
# "train/CE loss", "train/PPL"), train/callbacks/speed_monitor.py ("throughput/total tokens",
# every rank's tokens: global_train_tokens_seen), optim/scheduler hooks in
# train/train_module/transformer ("optim/LR (group 0)"), train/callbacks/wandb.py
# (wandb.log(metrics, step=step), trainer.global_step, counted from 1) and
# train/callbacks/evaluator_callback.py ("eval/{evaluator}/CE loss"). Config: data_loader
# .global_batch_size counts tokens (NumpyDataLoaderConfig), dataset.sequence_length.
_OLMO_CORE = Convention(
    name="OLMo-core",
    markers=(("train/CE loss",),),
    loss=("train/CE loss",),
    eval_loss=("eval/*/CE loss",),
    lr=("optim/LR (group 0)", "optim/LR"),
    tokens=("throughput/total tokens",),
    seq_len=("dataset.sequence_length", "sequence_length"),
)
# Accelerate's tracking API, as huggingface/transformers examples/pytorch/language-modeling/
# run_clm_no_trainer.py uses it: accelerator.init_trackers(name, vars(args)) (W&B
# wandb.config.update; MLflow mlflow.log_params) and accelerator.log(values, step=
# completed_steps) (the optimizer steps) with the script's own keys: train_loss, eval_loss,
# step, and the tokens the loop counts (tokens_seen). Config: per_device_train_batch_size,
# gradient_accumulation_steps, block_size (every sequence: group_texts), max_train_steps.
_ACCELERATE = Convention(
    name="Accelerate",
    markers=(("tokens_seen",), ("train_loss", "perplexity", "epoch", "step")),
    step=("step",),
    loss=("train_loss", "loss"),
    eval_loss=("eval_loss",),
    lr=("lr", "learning_rate"),
    tokens=("tokens_seen",),
    device_batch=("per_device_train_batch_size",),
    accumulation=("gradient_accumulation_steps",),
    seq_len=("block_size",),
    planned_steps=("max_train_steps",),
)
# Lightning's keys are the user's own names, with its suffixes (_step, _epoch) and
# LearningRateMonitor's lr-<Optimizer>[/pg<N>]; its step is trainer/global_step (W&B) or
# the step column (CSVLogger).
_LIGHTNING = Convention(
    name="PyTorch Lightning",
    markers=(("trainer/global_step",),),
    step=("trainer/global_step", "step"),
    device_batch=("batch_size",),
    accumulation=("accumulate_grad_batches",),
    world=("world_size", "devices"),
    seq_len=("seq_len", "block_size", "max_seq_length", "seq_length", "context_length"),
    planned_steps=("max_steps",),
)
# In the order they are tried: the more specific markers first (litgpt logs through
# Lightning's loggers, so its runs carry trainer/global_step too).
CONVENTIONS = (
    _LITGPT, _NANOGPT, _TORCHTITAN, _OLMO, _OLMO_CORE, _COMPOSER, _MEGATRON, _NEMO, _TORCHTUNE, _HF, _ACCELERATE,
    _LIGHTNING,
)

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


def detect(keys: Collection[str]) -> Convention | None:
    """The first trainer whose markers the keys hold."""
    for convention in CONVENTIONS:
        if any(all(k in keys for k in group) for group in convention.markers):
            return convention
    # Lightning's own marks: LearningRateMonitor's lr-<Optimizer>, or a key logged with
    # both on_step and on_epoch (``train_loss_step`` beside ``train_loss_epoch``).
    if any(k.startswith("lr-") or (k.endswith("_step") and f"{k[:-5]}_epoch" in keys) for k in keys):
        return _LIGHTNING
    return None


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

