"""Which finished runs are one configuration: read from what the runs log.

A run's *descriptors* are what it logged of its configuration: the model size (a
parameter count, or its layers and width), the sequence length, the batch in tokens per
step, the dataset, the optimizer and the peak lr, read from its params by the names the
trainers give them (the same names :mod:`tracker_plugin.frame.conventions` reads the
batch from), and from its rows (the peak of its logged lr, its batch). Two runs are of one
configuration when every descriptor both of them have agrees (numbers within
:data:`TOLERANCE`); a descriptor one of them lacks says nothing. The peak lr is kept apart:
whether a law carries across peak lrs is a question the evidence answers
(:mod:`.project`).

Pure: mappings in, mappings and reasons out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tracker_plugin.frame.history import History
from tracker_plugin.plan.params import as_float, flat_params

__all__ = [
    "DESCRIPTORS",
    "PEAK_LR",
    "TOLERANCE",
    "descriptors_from_history",
    "descriptors_from_params",
    "differs",
    "same_peak",
]

PEAK_LR = "peak_lr"
# The names each descriptor is read from, matched on the end of a flattened param name
# (``model.n_layers`` matches ``n_layers``): the trainers' own (nanoGPT's n_layer, n_embd,
# block_size; Hugging Face's num_hidden_layers, hidden_size; Megatron-LM's num_layers,
# seq_length; OLMo's d_model, max_sequence_length; litgpt's n_layer, max_seq_length).
DESCRIPTORS: dict[str, tuple[str, ...]] = {
    "parameters": ("n_params", "num_params", "num_parameters", "n_parameters", "model_params", "param_count"),
    "layers": ("n_layer", "n_layers", "num_layers", "num_hidden_layers"),
    "width": ("n_embd", "d_model", "hidden_size"),
    "seq_len": ("block_size", "seq_len", "seq_length", "sequence_length", "max_seq_len", "max_seq_length",
                "max_sequence_length", "encoder_seq_length", "context_length"),
    "dataset": ("dataset", "dataset_name", "data.name", "data.dataset", "train_dataset", "data_path"),
    "optimizer": ("optimizer", "optimizer.name", "optim.name", "optimizer_name", "optim_type"),
    PEAK_LR: ("learning_rate", "max_lr", "peak_lr", "lr", "optimizer.lr", "optim.lr", "base_lr"),
}
# Numbers within this share of each other are the same setting.
TOLERANCE = 0.01
# Peak lrs within this share of each other are one peak (a logged peak lands within a
# fraction of a percent of the planned one).
PEAK_TOLERANCE = 0.05


def descriptors_from_params(params: Mapping[str, Any]) -> dict[str, str | float]:
    """What a run's params (a W&B config or MLflow params, nested or flat) say of its
    configuration: a number where the value is one, else its text."""
    flat = flat_params(params, text_numbers=True)
    out: dict[str, str | float] = {}
    for descriptor, names in DESCRIPTORS.items():
        for name in names:
            key = next((k for k in flat if k == name or k.endswith("." + name)), None)
            if key is None or flat[key] is None or isinstance(flat[key], (dict, list)):
                continue
            number = as_float(flat[key])
            if number is not None and math.isfinite(number):
                out[descriptor] = float(number)
            elif str(flat[key]).strip():
                out[descriptor] = str(flat[key]).strip().lower()
            break
    return out


def descriptors_from_history(history: History) -> dict[str, str | float]:
    """What a run's rows say of its configuration: its batch (tokens per step, where it has
    tokens) and the peak of its logged lr."""
    out: dict[str, str | float] = {}
    if not history.on_steps:
        out["batch"] = float(np.median(history.batch))
    if history.lr is not None and np.isfinite(history.lr).any() and np.nanmax(history.lr) > 0:
        out[PEAK_LR] = float(np.nanmax(history.lr))
    return out


def differs(a: Mapping[str, str | float], b: Mapping[str, str | float], *, skip: Sequence[str] = (PEAK_LR,)) -> str | None:
    """Why ``b`` is not of ``a``'s configuration (the first descriptor both have that
    disagrees), or None: they agree on every one both have."""
    for name in sorted(set(a) & set(b) - set(skip)):
        x, y = a[name], b[name]
        if isinstance(x, float) and isinstance(y, float):
            if not math.isclose(x, y, rel_tol=TOLERANCE):
                return f"its {name} is {_text(y)}, this run's {_text(x)}"
        elif str(x) != str(y):
            return f"its {name} is {_text(y)}, this run's {_text(x)}"
    return None


def same_peak(a: float | None, b: float | None) -> bool:
    """Whether two peak lrs are one (an unknown one matches any)."""
    return a is None or b is None or math.isclose(a, b, rel_tol=PEAK_TOLERANCE)


def _text(value: str | float) -> str:
    return f"{value:,.6g}" if isinstance(value, float) else repr(value)
