"""Forecasts inside the training loop: the plain-loop API and the trainers' callbacks.

- :class:`LiveForecast` (:mod:`.stream`): ``update(step, loss, ...)`` from any loop,
  forecasts off the training thread;
- ``LossEtaCallback`` (:mod:`.hf`): a Hugging Face ``TrainerCallback``
  (``pip install 'tracker_plugin[hf]'``);
- ``LossEtaLightningCallback`` (:mod:`.lightning`): a Lightning ``Callback``
  (``pip install 'tracker_plugin[lightning]'``).

The callbacks are imported on first use, so importing this package needs neither trainer.
"""

from __future__ import annotations

from typing import Any

from tracker_plugin.live.stream import LiveForecast, LiveResult

__all__ = ["LiveForecast", "LiveResult", "LossEtaCallback", "LossEtaLightningCallback"]


def __getattr__(name: str) -> Any:
    if name == "LossEtaCallback":
        from tracker_plugin.live.hf import LossEtaCallback

        return LossEtaCallback
    if name == "LossEtaLightningCallback":
        from tracker_plugin.live.lightning import LossEtaLightningCallback

        return LossEtaLightningCallback
    raise AttributeError(name)
