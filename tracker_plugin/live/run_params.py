"""What a live-annotated run needs to read back on its own: its tokens per step, as a param.

A run whose trainer counts no tokens (HF without ``include_num_input_tokens_seen``; every
Lightning run) is read back by ``tracker-plugin annotate`` from its params: per-device
batch x accumulation x world size x sequence length. The trainers' own integrations log
some of these and never the sequence length (HF's MLflow and W&B integrations log the
``TrainingArguments``; Lightning logs only the module's hyperparameters), so the reader
would need ``--batch-size``. The callback knows the tokens per step it forecasts with, and
logs them as the param ``tokens_per_step`` (one of the reader's default ``batch_params``),
to the trackers the run reports to, once, at the start of training. A param the run
already holds is left as it is (MLflow refuses to change a param; a user's value wins).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["TOKENS_PARAM", "log_hf_params", "log_lightning_params"]

TOKENS_PARAM = "tokens_per_step"


def log_hf_params(params: Mapping[str, Any], args: Any) -> bool:
    """Log ``params`` to the open W&B run and MLflow's active run, those a Trainer's
    ``args`` report to; True when any tracker took them."""
    from tracker_plugin.live.sinks import _report_to, _wandb_run

    reports = _report_to(args)
    wandb_run = _wandb_run() if reports is None or "wandb" in reports else None
    logged = False
    if wandb_run is not None:
        logged |= _to_wandb(wandb_run.config, params)
    mlflow = sys.modules.get("mlflow") if reports is None or "mlflow" in reports else None
    active = mlflow.active_run() if mlflow is not None else None
    if mlflow is not None and active is not None:
        held = mlflow.get_run(active.info.run_id).data.params
        fresh = {k: v for k, v in params.items() if k not in held}
        if fresh:
            mlflow.log_params(fresh)
        logged = True
    return logged


def log_lightning_params(params: Mapping[str, Any], loggers: Any) -> bool:
    """Log ``params`` through the trainer's MLflow and W&B loggers; True when any took them."""
    logged = False
    for logger in loggers:
        kind = type(logger).__name__
        if kind == "MLFlowLogger" and logger.run_id:
            held = logger.experiment.get_run(logger.run_id).data.params
            fresh = {k: v for k, v in params.items() if k not in held}
            if fresh:
                logger.log_hyperparams(fresh)
            logged = True
        elif kind == "WandbLogger":
            logged |= _to_wandb(logger.experiment.config, params)
    return logged


def _to_wandb(config: Any, params: Mapping[str, Any]) -> bool:
    fresh = {k: v for k, v in params.items() if k not in config}
    if fresh:
        config.update(fresh)
    return True
