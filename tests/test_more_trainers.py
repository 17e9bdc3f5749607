"""Trainers beyond the first eight (issue 30): runs written by TRL, Accelerate, torchtune,
OLMo-core and LightningCLI's real code (tests/data/make_framework_runs.py), read with no
flags but the facts no run of theirs holds, checked against answers computed from the
generator's known configuration without the plugin; and the rules they brought: a logged
token count beats a cap, a world size given is used or said unused, Lightning's
accumulation is found wherever the run holds it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracker_plugin as tp
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.frame.conventions import build_read_history, finish_reading, read_as
from tracker_plugin.trackers import ReadOptions
from tracker_plugin.trackers.wandb_offline import WandbOfflineSource

from .framework_runs import FRAMEWORKS, read_fixture, unpacked_store

CONFIG = json.loads((FRAMEWORKS / "CONFIG.json").read_text())
STEPS, SEQ, BATCH, ACCUM = CONFIG["steps"], CONFIG["seq"], CONFIG["batch"], CONFIG["accum"]
ONE = BATCH * ACCUM * SEQ  # 512 tokens per step on one device
TRL = BATCH * ACCUM * 19  # TRL's samples hold 19 tokens; its max_length cap is 64
TARGET, EMA_STEPS = 3.5, 20
TOKENS_RTOL = 0.01  # tokens within 1% of the truth
CROSSING_RTOL = 0.01  # crossing step within 1% of the independent one

# name -> (source, store, tokens per step, last step, facts no run holds, framework, loss key, mean_over)
CASES = {
    "trl-wandb": ("wandb-offline:wandb/trl-sft", None, TRL, STEPS, {}, "Hugging Face Trainer", "train/loss", 1),
    "trl-mlflow": ("mlflow:trl-sft", "trl", TRL, STEPS, {}, "Hugging Face Trainer", "loss", 1),
    "accelerate-wandb": ("wandb-offline:wandb/accelerate-wandb", None, ONE, STEPS, {}, "Accelerate", "train_loss", 1),
    "accelerate-mlflow": ("mlflow:accelerate-mlflow", "accelerate", ONE, STEPS, {}, "Accelerate", "train_loss", 1),
    # torchtune's world size is torchrun's, in no config: 2 ranks, given as --world-size.
    "torchtune-wandb": ("wandb-offline:wandb/torchtune-wandb", None, 2 * ONE, STEPS, {"world_size": 2}, "torchtune",
                        "loss", 1),
    "torchtune-mlflow": ("mlflow:torchtune-mlflow", "torchtune", 2 * ONE, STEPS, {"world_size": 2}, "torchtune",
                         "loss", 1),
    "olmo-core-wandb": ("wandb-offline:wandb/olmo-core-wandb", None, 2 * ONE, STEPS, {}, "OLMo-core", "train/CE loss", 1),
    # accumulate_grad_batches 4 as a Trainer argument: LightningCLI's config.yaml holds it.
    "lightning-cli-csv": ("lightning-cli/metrics.csv", None, 4 * BATCH * SEQ, STEPS - 1, {}, "PyTorch Lightning",
                          "train_loss_step", 1),
}
# The W&B and MLflow runs of the same LightningCLI job hold only the module's hparams.
UNACCUMULATED = {
    "lightning-cli-wandb": "wandb-offline:wandb/lightning-cli-wandb",
    "lightning-cli-mlflow": "mlflow:lightning-cli-mlflow",
}


def curve(step: np.ndarray) -> np.ndarray:
    return 2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6


def expected_crossing(mean_over: int) -> float:
    """Where pandas' EMA (span EMA_STEPS) of the loss's trailing mean over ``mean_over`` steps
    reaches TARGET, on 1-based optimizer steps (1: the per-step loss, which an HF-style mean
    since the last log, read at the middle of its interval, gives)."""
    steps = np.arange(1, STEPS + 1, dtype=float)
    loss = pd.Series(curve(steps)).rolling(mean_over, min_periods=1).mean()
    ema = loss.ewm(span=EMA_STEPS, adjust=False).mean().to_numpy()
    i = int(np.flatnonzero(ema <= TARGET)[0])
    return float(np.interp(TARGET, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    """Each setup's own MLflow store, unpacked."""
    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("more-trainers")
    uris = {}
    for folder in ("trl", "accelerate", "torchtune", "lightning-cli"):
        uris[folder] = unpacked_store(f"{folder}/mlflow.db.gz", root)
    return uris


def _read(spec: str, store: str | None, stores: dict[str, str], **options):
    return read_fixture(spec, ReadOptions(use_cache=False, **options), stores[store] if store else None)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_new_trainer_is_read_right_with_only_the_facts_no_run_holds(name, stores):
    spec, store, per_step, last, facts, framework, loss_key, mean_over = CASES[name]
    history = _read(spec, store, stores, **facts)
    assert dict(history.read_as)["framework"] == framework
    assert history.loss_key == loss_key and history.last_step == last and not history.on_steps
    np.testing.assert_allclose(history.batch, per_step, rtol=TOKENS_RTOL)
    np.testing.assert_allclose(history.last_tokens, per_step * last, rtol=TOKENS_RTOL)
    assert not any("is not used" in note for note in history.notes)
    config = AnalysisConfig(targets=(TARGET,), ema_token_window=EMA_STEPS * per_step, model="power-law")
    (result,) = run_analysis(history, config).targets
    assert result.status.value == "reached"
    # Lightning numbers steps from 0: its step s is the (s + 1)th optimizer step.
    truth = expected_crossing(mean_over) - (STEPS - last)
    np.testing.assert_allclose(result.step, truth, rtol=CROSSING_RTOL)
    np.testing.assert_allclose(result.tokens, truth * per_step, rtol=CROSSING_RTOL)


def test_trl_reads_its_logged_token_count_not_the_max_length_cap(stores):
    """The old silent case: 8 samples x max_length 64 = 512 tokens per step, 3.4x the 152
    TRL counted (and logged as num_tokens)."""
    history = _read("wandb-offline:wandb/trl-sft", None, stores)
    assert dict(history.read_as)["tokens"] == "train/num_tokens (logged)"
    np.testing.assert_allclose(history.batch, TRL, rtol=1e-9)


@pytest.mark.parametrize("name", sorted(UNACCUMULATED))
@pytest.mark.parametrize("facts", [{}, {"world_size": 1}])
def test_lightning_accumulation_nowhere_in_the_run_refuses_tokens_and_names_the_flag(name, facts, stores):
    """The old confidently wrong case: with --world-size 1, batch_size x block_size was read
    as the tokens per step, 4x too few. A world size says nothing of the accumulation."""
    history = _read(UNACCUMULATED[name], "lightning-cli", stores, **facts)
    assert history.on_steps and history.last_step == STEPS - 1
    (note,) = [n for n in history.notes if n.startswith("no tokens logged")]
    assert "no gradient accumulation" in note and "batch_size" in note
    assert any("world_size 1 is not used" in n for n in history.notes) == bool(facts)


def test_torchtune_without_its_world_size_says_it_assumes_one_device(stores):
    history = _read("wandb-offline:wandb/torchtune-wandb", None, stores)
    assert dict(history.read_as)["step"] == "global_step"  # its W&B _step counts log calls
    np.testing.assert_allclose(history.batch, ONE, rtol=1e-9)
    assert any("assume one device" in n and "world_size" in n for n in history.notes)


def _frame_reading(frame: pd.DataFrame, config: dict, **given):
    reading = read_as(set(frame.columns) - {"_step"}, config, native_step="_step", **given)
    return finish_reading(build_read_history(frame, reading, run="run", logged=frame.columns), reading)


def test_a_cap_is_no_sequence_length_unless_every_sequence_is_packed_to_it():
    steps = np.arange(10, 410, 10)
    frame = pd.DataFrame({"_step": np.arange(len(steps)), "global_step": steps, "loss": curve(steps), "lr": 1e-3,
                          "tokens_per_second_per_gpu": 1000.0})
    config = {"batch_size": 4, "gradient_accumulation_steps": 2, "tokenizer.max_seq_len": 64}
    capped = _frame_reading(frame, config)
    assert capped.on_steps and any("only caps each sequence" in n and "seq_len" in n for n in capped.notes)
    packed = _frame_reading(frame, {**config, "dataset.packed": True}, world_size=2)
    np.testing.assert_allclose(packed.batch, 4 * 2 * 2 * 64)


def test_a_world_size_given_for_a_count_of_every_device_is_said_unused():
    steps = np.arange(10, 410, 10)
    frame = pd.DataFrame({"_step": steps, "train/CE loss": curve(steps), "throughput/total tokens": steps * 1024})
    history = _frame_reading(frame, {}, world_size=8)
    np.testing.assert_allclose(history.batch, 1024)  # the logged count, not x 8
    assert any(n.startswith("world_size 8 is not used") for n in history.notes)


@pytest.mark.parametrize(("scheduling", "per_step"), [({0: 4}, 4 * 8 * 32), ({0: 1, 2: 4}, None)])
def test_lightning_gradient_accumulation_scheduler_in_the_cli_config(scheduling, per_step):
    steps = np.arange(2, 150, 3)
    frame = pd.DataFrame({"trainer/global_step": steps, "train_loss_step": curve(steps + 1.0), "epoch": 0})
    callbacks = [{"class_path": "lightning.pytorch.callbacks.GradientAccumulationScheduler",
                  "init_args": {"scheduling": scheduling}}]
    config = {"model.batch_size": 8, "model.block_size": 32, "trainer.accumulate_grad_batches": 1,
              "trainer.callbacks": callbacks}
    history = _frame_reading(frame, config, world_size=1)
    if per_step is None:
        assert history.on_steps and any("changes by epoch" in n for n in history.notes)
    else:
        np.testing.assert_allclose(history.batch, per_step)


def test_megatron_vs_samples_keys_are_never_the_lr():
    """Megatron-LM's TensorBoard writer logs '<key> vs samples' at the sample count beside
    each key (a TensorBoard synced into W&B carries both)."""
    steps = np.arange(10, 410, 10)
    frame = pd.DataFrame({"_step": steps, "lm loss": curve(steps), "lm loss vs samples": curve(steps),
                          "learning-rate vs samples": 1.0, "learning-rate": 1e-3, "samples vs steps": steps * 16})
    history = _frame_reading(frame, {"seq_length": 64})
    read = dict(history.read_as)
    assert history.loss_key == "lm loss" and read["lr"] == "learning-rate"
    np.testing.assert_allclose(history.batch, 16 * 64)


def test_composer_llm_foundry_train_metric_is_the_loss_when_no_total_is_logged():
    steps = np.arange(0, 400, 10)
    frame = pd.DataFrame({"_step": steps, "time/batch": steps, "time/token": steps * 1024,
                          "metrics/train/LanguageCrossEntropy": curve(steps + 1.0),
                          "throughput/tokens_per_sec": 1e5, "lr-DecoupledAdamW/group0": 1e-3})
    history = _frame_reading(frame, {})
    assert dict(history.read_as)["framework"] == "Composer / llm-foundry"
    assert history.loss_key == "metrics/train/LanguageCrossEntropy"
    np.testing.assert_allclose(history.batch, 1024)


# Megatron-LM's TensorBoard synced into W&B (make_framework_runs.py --only megatron-tb): its
# writer logs 'lm loss', 'learning-rate', 'batch-size' and 'samples vs steps' at the iteration
# and each '<key> vs samples' again at the sample count; W&B's sync logs every event's step as
# global_step on a row of its own, so half the rows carry samples there. No config reached
# W&B (the user's own wandb.init(sync_tensorboard=True)), so the sequence length is given.
MEGATRON_TB = "wandb/megatron-tb"


@pytest.mark.parametrize("facts", [{"seq_len": SEQ}, {}])
def test_megatron_tensorboard_synced_into_wandb_reads_iterations_not_samples(facts):
    history = WandbOfflineSource(str(FRAMEWORKS / MEGATRON_TB), ReadOptions(use_cache=False, **facts)).read(
        *WandbOfflineSource(str(FRAMEWORKS / MEGATRON_TB), ReadOptions(use_cache=False)).runs()
    )
    read = dict(history.read_as)
    assert read["framework"] == "Megatron-LM" and read["step"] == "global_step"
    assert history.loss_key == "lm loss" and read["lr"] == "learning-rate"
    # The iterations, every LOG_EVERY of STEPS: never the sample counts (16 per iteration).
    np.testing.assert_array_equal(history.step, np.arange(10, STEPS + 1, 10))
    np.testing.assert_allclose(history.loss, curve(history.step.astype(float)), rtol=1e-6)
    per_step = 2 * ONE  # 2 ranks x 4 x accumulation 2 = 16 samples of 64 tokens
    if not facts:
        assert history.on_steps
        assert any("'samples vs steps' counts sequences" in n and "seq_len" in n for n in history.notes)
        window: dict[str, float] = {"ema_steps": EMA_STEPS}
    else:
        assert not history.on_steps
        np.testing.assert_allclose(history.batch, per_step, rtol=TOKENS_RTOL)
        np.testing.assert_allclose(history.last_tokens, per_step * STEPS, rtol=TOKENS_RTOL)
        window = {"ema_token_window": EMA_STEPS * per_step}
    (result,) = run_analysis(history, AnalysisConfig(targets=(TARGET,), model="power-law", **window)).targets
    assert result.status.value == "reached"
    np.testing.assert_allclose(result.step, expected_crossing(1), rtol=CROSSING_RTOL)
    if facts:
        np.testing.assert_allclose(result.tokens, expected_crossing(1) * per_step, rtol=CROSSING_RTOL)


_CLI_DUMP = """# lightning.pytorch==2.6.6
seed_everything: 0
trainer:
  accelerator: cpu
  max_steps: 150
  accumulate_grad_batches: 5
  log_every_n_steps: 3
model:
  batch_size: 8
  block_size: 32
"""


@pytest.mark.parametrize(("logged", "hparams", "per_step"), [
    (_CLI_DUMP, {"batch_size": 8, "block_size": 32}, 5 * 8 * 32),
    (_CLI_DUMP, {}, 5 * 8 * 32),
    # Cut short as MLflow params are (Lightning keeps 250 characters): block_size 32 cut to
    # "3" is never read; what the whole lines hold is.
    (_CLI_DUMP[:-2], {}, None),
    ("trainer: [unclosed\n", {"batch_size": 8, "block_size": 32}, None),
    ("a: &a [*a]\n", {"batch_size": 8, "block_size": 32}, None),
])
def test_lightning_cli_config_logged_as_one_yaml_string_gives_the_accumulation(logged, hparams, per_step):
    """Lightning's documented LoggerSaveConfigCallback logs log_hyperparams({"config": dump}):
    the run's config holds the whole CLI config as one YAML text, the accumulation in it.
    Text that is no YAML, or a loop the bounded loader refuses, is left as text: on steps."""
    steps = np.arange(2, 150, 3)
    frame = pd.DataFrame({"trainer/global_step": steps, "train_loss_step": curve(steps + 1.0), "lr-AdamW": 1e-3})
    config = {"config": logged, **hparams}
    reading = ReadOptions(use_cache=False).reading(set(frame.columns), config, native_step="_step")
    history = finish_reading(build_read_history(frame, reading, run="run", logged=frame.columns), reading)
    if per_step is None:
        assert history.on_steps and any(n.startswith("no tokens logged") for n in history.notes)
    else:
        assert not history.on_steps
        np.testing.assert_allclose(history.batch, per_step)
        assert "accumulation 5" in dict(history.read_as)["tokens"]


def test_a_lightning_metrics_csv_with_an_eval_loss_reads_its_training_loss(tmp_path):
    """Lightning's CSVLogger names the training loss ``train_loss_step``: a ``val_loss`` beside
    it is the eval loss, not "the only loss logged" (held-out run, val_check_interval=0.5)."""
    rows = ["epoch,lr-AdamW,step,train_loss_epoch,train_loss_step,val_loss"]
    for step in range(0, 153):
        rows.append(f",{1e-3:.6g},{step},,,")
        rows.append(f"0,,{step},,{2.0 + 6.0 * (step / 20.0 + 1.0) ** -0.6:.6f},")
        if step % 50 == 49:
            rows.append(f"0,,{step},,,{2.1 + 6.0 * (step / 20.0 + 1.0) ** -0.6:.6f}")
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    history = tp.load_csv(tmp_path / "metrics.csv")
    assert history.loss_key == "train_loss_step"
    assert history.last_step == 152
    assert not any("only loss logged" in note for note in history.notes)
