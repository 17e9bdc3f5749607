"""Every trainer x tracker fixture in tests/data/frameworks/, read as a user would: one line each.

Each fixture was written by its trainer's own code (tests/data/make_framework_runs.py) with
a loss that is a known function of the optimizer step, so the tokens and the crossing have
answers computed here without the plugin. Each setup is read twice: with no flags at all,
and with only the facts no run of that setup holds (``--world-size`` for torchtune, whose
world size is torchrun's; ``--batch-size`` for an HF ``trainer_state.json``, which records
no accumulation, and ``--seq-len`` for HF's MLflow params, which record no length). A line
says, for each reading:

- ``right``: tokens within 2% of the truth (the token error beside it);
- ``on steps (FLAG)``: no tokens, and a note names the flag that gives them;
- ``noted (err)``: tokens off the truth, and a note says what they assume (one device,
  no accumulation);
- ``WRONG (err)``: tokens off the truth and nothing says so.

A second table reads the held-out runs of ``benchmarks/data/interval/`` (written by the
real trainers with ``benchmarks/make_interval_runs.py``, not tuned on here), whose logged
loss is no per-step value: HF ``Trainer``'s mean since its last log at ``logging_steps``
10, 50 and 500 (MLflow), nanoGPT's ``estimate_loss`` at its eval cadence 100, 250 and 500
(W&B offline), Lightning's ``on_epoch`` mean (MLflow, W&B offline). Each is read with no
flags, and its crossings of three targets (the losses a third, a half and two thirds of
the way down the per-step curve's smoothed fall) are compared with those of the same
training's per-step loss, read the same way: within 1% where a value is logged at least
every 50 steps, within 2% where sparser; ``WRONG`` past that. One table per EMA window:
the window the command line gives each run when none is set, 100 and 300 steps; beside
each error, the floor (the error of the best reading the log allows), and ``at the floor``
where an error past the tolerance is the floor's (``bench_interval_means.py`` says how).

Run from the checkout: ``.venv/bin/python benchmarks/bench_trainers.py [--quick] [--interval]``
(``--interval``: the second table only).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from harness import parser

from tests.framework_runs import FRAMEWORKS, read_fixture, unpacked_store
from tracker_plugin.core.analysis import AnalysisConfig, run_analysis
from tracker_plugin.errors import TrackerPluginError
from tracker_plugin.trackers import ReadOptions

CONFIG = json.loads((FRAMEWORKS / "CONFIG.json").read_text())
STEPS, SEQ, BATCH, ACCUM = CONFIG["steps"], CONFIG["seq"], CONFIG["batch"], CONFIG["accum"]
TARGET, EMA_STEPS = 3.5, 20
ONE = BATCH * ACCUM * SEQ  # 512 tokens per step on one device


@dataclass(frozen=True)
class Setup:
    """A fixture, the truth of its run, and the facts no run of its kind holds."""

    name: str
    source: str  # wandb-offline:DIR, mlflow:RUN_NAME@STORE, or a file under FRAMEWORKS
    per_step: float  # true tokens per optimizer step
    last: int  # the true last step, in the trainer's numbering
    mean_over: int = 1  # HF-style trainers log the mean loss since their last log
    facts: dict[str, Any] = field(default_factory=dict)


_HF = {"mean_over": CONFIG["log_every"]}
SETUPS = (
    Setup("HF -> W&B", "wandb-offline:wandb/hf-wandb", ONE, STEPS, **_HF),
    Setup("HF -> MLflow", "mlflow:hf-mlflow@mlflow.db", ONE, STEPS, facts={"seq_len": SEQ}, **_HF),
    Setup("HF -> trainer_state.json", "hf/trainer_state.json", ONE, STEPS, facts={"batch_size": ONE}, **_HF),
    Setup("Lightning -> W&B", "wandb-offline:wandb/lightning-wandb", ONE, STEPS - 1),
    Setup("Lightning -> MLflow", "mlflow:lightning-mlflow@mlflow.db", ONE, STEPS - 1),
    Setup("Lightning -> metrics.csv", "lightning/metrics.csv", ONE, STEPS - 1),
    Setup("nanoGPT -> W&B", "wandb-offline:wandb/nanogpt-wandb", ONE, STEPS),
    Setup("torchtitan -> W&B", "wandb-offline:wandb/torchtitan-wandb", 2 * ONE, STEPS),
    Setup("litgpt -> W&B", "wandb-offline:wandb/litgpt-wandb", CONFIG["litgpt"]["global"] * SEQ, STEPS),
    Setup("litgpt -> MLflow", "mlflow:litgpt-mlflow@mlflow.db", CONFIG["litgpt"]["global"] * SEQ, STEPS),
    Setup("OLMo -> W&B", "wandb-offline:wandb/olmo-wandb", 2 * ONE, STEPS),
    Setup("Composer -> W&B", "wandb-offline:wandb/composer-wandb", 2 * ONE, STEPS - 1),
    Setup("Composer -> MLflow", "mlflow:composer-mlflow@composer/mlflow.db.gz", 2 * ONE, STEPS - 1),
    Setup("Megatron-LM -> W&B", "wandb-offline:wandb/megatron-wandb", 2 * ONE, STEPS),
    # Its TensorBoard synced into W&B with no config: the sequence length is in no run.
    Setup("Megatron-LM TensorBoard -> W&B sync", "wandb-offline:wandb/megatron-tb", 2 * ONE, STEPS,
          facts={"seq_len": SEQ}),
    # Beyond the first eight (issue 30).
    Setup("TRL SFT -> W&B", "wandb-offline:wandb/trl-sft", BATCH * ACCUM * 19, STEPS, **_HF),
    Setup("TRL SFT -> MLflow", "mlflow:trl-sft@trl/mlflow.db.gz", BATCH * ACCUM * 19, STEPS, **_HF),
    Setup("Accelerate -> W&B", "wandb-offline:wandb/accelerate-wandb", ONE, STEPS),
    Setup("Accelerate -> MLflow", "mlflow:accelerate-mlflow@accelerate/mlflow.db.gz", ONE, STEPS),
    Setup("torchtune -> W&B", "wandb-offline:wandb/torchtune-wandb", 2 * ONE, STEPS, facts={"world_size": 2}),
    Setup("torchtune -> MLflow", "mlflow:torchtune-mlflow@torchtune/mlflow.db.gz", 2 * ONE, STEPS,
          facts={"world_size": 2}),
    Setup("OLMo-core -> W&B", "wandb-offline:wandb/olmo-core-wandb", 2 * ONE, STEPS),
    Setup("Lightning CLI accum 4 -> metrics.csv", "lightning-cli/metrics.csv", 4 * BATCH * SEQ, STEPS - 1),
    Setup("Lightning CLI accum 4 -> W&B", "wandb-offline:wandb/lightning-cli-wandb", 4 * BATCH * SEQ, STEPS - 1),
    Setup("Lightning CLI accum 4 -> MLflow", "mlflow:lightning-cli-mlflow@lightning-cli/mlflow.db.gz",
          4 * BATCH * SEQ, STEPS - 1),
)


def expected_crossing(mean_over: int) -> float:
    """Where pandas' EMA (span EMA_STEPS) of the loss as logged reaches TARGET (1-based steps)."""
    steps = np.arange(1, STEPS + 1, dtype=float)
    loss = pd.Series(2.0 + 6.0 * (steps / 20.0 + 1.0) ** -0.6).rolling(mean_over, min_periods=1).mean()
    ema = loss.ewm(span=EMA_STEPS, adjust=False).mean().to_numpy()
    i = int(np.flatnonzero(ema <= TARGET)[0])
    return float(np.interp(TARGET, [ema[i], ema[i - 1]], [steps[i], steps[i - 1]]))


def read(setup: Setup, options: ReadOptions, tmp: Path) -> Any:
    name, _, store = setup.source.partition("@")  # mlflow:RUN_NAME@STORE names its store
    return read_fixture(name, options, unpacked_store(store, tmp) if store else None)


_FLAGS = {"batch_size": "--batch-size", "seq_len": "--seq-len", "world_size": "--world-size",
          "columns.tokens": "--tokens-col"}


def verdict(setup: Setup, facts: dict[str, Any], tmp: Path) -> tuple[str, str]:
    """(what the reading gave, the crossing's error against the truth)."""
    try:
        history = read(setup, ReadOptions(use_cache=False, **facts), tmp)
    except TrackerPluginError as exc:
        return f"error: {str(exc)[:60]}", "-"
    notes = " ".join(history.notes)
    window = {"ema_steps": EMA_STEPS} if history.on_steps else {"ema_token_window": EMA_STEPS * setup.per_step}
    result = run_analysis(history, AnalysisConfig(targets=(TARGET,), model="power-law", **window)).targets[0]
    truth = expected_crossing(setup.mean_over)
    crossing = "-" if result.step is None else f"{abs(result.step - truth) / truth:.1%}"
    if history.last_step != setup.last:
        return f"WRONG step {history.last_step} (want {setup.last})", crossing
    if history.on_steps:
        named = [flag for word, flag in _FLAGS.items() if re.search(rf"\b{re.escape(word)}\b", notes)]
        return f"on steps ({', '.join(named) or 'NO FLAG NAMED'})", crossing
    error = abs(history.last_tokens - setup.per_step * setup.last) / (setup.per_step * setup.last)
    if error < 0.02:
        return f"right ({error:.1%})", crossing
    if "assume" in notes:
        return f"noted ({error:.0%} off: {'one device' if 'one device' in notes else 'assumed'})", crossing
    return f"WRONG ({error:.0%} off, silent)", crossing


def main() -> None:
    options = parser(__doc__, quick="the first four setups")
    options.add_argument("--interval", action="store_true", help="the interval-mean table only")
    args = options.parse_args()
    if not args.interval:
        trainer_table(SETUPS[:4] if args.quick else SETUPS)
    from bench_interval_means import interval_tables  # noqa: PLC0415 - the second table's own module

    interval_tables()


def trainer_table(setups: Sequence[Setup]) -> None:
    rows = [("setup", "no flags", "crossing", "facts given", "with the facts", "crossing")]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        for setup in setups:
            bare, bare_cross = verdict(setup, {}, tmp)
            if setup.facts:
                given, given_cross = verdict(setup, setup.facts, tmp)
                words = " ".join(f"{_FLAGS[k]} {v:g}" for k, v in setup.facts.items())
            else:
                given, given_cross, words = "(same)", "", "-"
            rows.append((setup.name, bare, bare_cross, words, given, given_cross))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    wrong = sum("WRONG" in cell for row in rows[1:] for cell in row)
    print(f"\n{len(setups)} setups; {wrong} WRONG")


if __name__ == "__main__":
    main()
