"""Each trainer family's conventions: the keys it logs, its own step, and how it is told apart.

A :class:`Convention` names what one trainer (HF, litgpt, nanoGPT, torchtitan, OLMo,
Composer, Megatron, NeMo, torchtune, OLMo-core, Accelerate, Lightning) logs as the step,
the loss, the lr and the tokens, and the config keys its batch is composed from; the key
names are the trainers' own, from their source. :func:`detect` tells which trainer wrote
a run from the keys it logged (see :mod:`.conventions` for how a run is then read).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["CONVENTIONS", "Convention", "detect"]


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
