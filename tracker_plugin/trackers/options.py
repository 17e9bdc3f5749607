"""What a source is told: the reading options every source shares, and each tracker's own.

An adapter is given :class:`ReadOptions` and its own tracker's options, nothing else:
:class:`MlflowOptions` for ``mlflow:`` runs, :class:`WandbOptions` for ``wandb:`` runs.
CSV files and offline W&B runs have no options beyond the shared ones. A caller that
opens run strings of any kind (the command line) hands :func:`~tracker_plugin.trackers.open_source`
one :class:`SourceOptions`, which carries every part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracker_plugin.frame.conventions import Reading, read_as
from tracker_plugin.frame.history import Columns
from tracker_plugin.trackers.yaml_config import with_logged_yaml

__all__ = ["DEFAULT_BATCH_PARAMS", "MlflowOptions", "ReadOptions", "SourceOptions", "WandbOptions"]

# ``batch_size`` is left out: in most configs it counts sequences per device.
DEFAULT_BATCH_PARAMS = ("global_batch_size", "batch_size_in_tokens", "tokens_per_step")


@dataclass(frozen=True)
class ReadOptions:
    """How any source reads a run into the common frame."""

    columns: Columns = field(default_factory=Columns)
    batch_size: float | None = None  # tokens per step when nothing in the run says
    # Param or config names holding tokens per step (trackers with run params or configs).
    batch_params: tuple[str, ...] = DEFAULT_BATCH_PARAMS
    workers: int = 4  # runs, and a run's keys, fetched at once
    cache_dir: str | None = None  # None: the default cache directory
    use_cache: bool = True  # finished runs' histories from the local cache
    # What the run may never log, for composing tokens per step from its config.
    seq_len: float | None = None  # tokens per sequence
    world_size: float | None = None  # data-parallel devices

    def reading(
        self, logged: Iterable[str], config: Mapping[str, Any], *, native_step: str, batch_size: float | None = None
    ) -> Reading:
        """Which of a run's ``logged`` keys are what, by its trainer's conventions (see
        :func:`~tracker_plugin.frame.conventions.read_as`); ``native_step`` is the source's
        own step, ``batch_size`` a fallback in place of :attr:`batch_size`. A whole config
        logged as one YAML text (LightningCLI's) is read as the mapping it holds."""
        return read_as(
            {str(k) for k in logged},
            with_logged_yaml(config),
            self.columns,
            native_step=native_step,
            seq_len=self.seq_len,
            world_size=self.world_size,
            batch_size=self.batch_size if batch_size is None else batch_size,
            batch_params=self.batch_params,
        )


@dataclass(frozen=True)
class MlflowOptions:
    """Where MLflow runs live and which to take.

    ``timeout`` and ``retries`` bound each HTTP request the plugin makes itself (the
    reachability check and the paged metric-history reads): seconds to wait for an
    answer, and how often a refused connection, a timeout, HTTP 429 or 5xx is tried again
    (waiting 1, 2, 4 ... s, or longer when the answer's ``Retry-After`` asks it; a busy
    server's 429 and 503 at least 6 times, whatever ``retries`` says). The calls
    made through ``MlflowClient`` follow MLflow's own settings (``MLFLOW_HTTP_REQUEST_*``:
    by default 7 retries of 429 and 5xx answers, honouring ``Retry-After``), as the user's
    own MLflow calls do.
    """

    tracking_uri: str | None = None  # None: MLflow's own (MLFLOW_TRACKING_URI, else ./mlflow.db)
    experiment_ids: tuple[str, ...] = ()
    filter: str | None = None  # an MLflow search filter string
    timeout: float = 30.0
    retries: int = 2


@dataclass(frozen=True)
class WandbOptions:
    """Which W&B runs to take, and how long one request to W&B may take.

    ``timeout`` bounds each request ``wandb.Api`` sends through wandb-core, its retries
    included; ``upload_timeout`` bounds each file upload. ``api_key`` and ``base_url``
    (None: wandb's own, from ``WANDB_API_KEY``/``wandb login`` and ``WANDB_BASE_URL``) are
    passed to ``wandb.Api``.
    """

    entity: str | None = None
    project: str | None = None
    states: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    created_after: str | None = None
    filter: str | None = None  # W&B filter JSON
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    timeout: float = 60.0
    upload_timeout: float = 120.0


@dataclass(frozen=True)
class SourceOptions:
    """Every source's options in one bundle, for callers that open run strings of any kind.

    :func:`~tracker_plugin.trackers.open_source` gives each adapter ``read`` and its own
    tracker's part only. ``states`` (``--state``) is a choice of runs across trackers: the
    caller narrows every source's runs to these states
    (:func:`~tracker_plugin.trackers.base.select_states`), and a W&B source opened from
    the bundle asks its server for only these too.
    """

    read: ReadOptions = field(default_factory=ReadOptions)
    mlflow: MlflowOptions = field(default_factory=MlflowOptions)
    wandb: WandbOptions = field(default_factory=WandbOptions)
    states: tuple[str, ...] = ()

    # What the command line asks of every source it opens.
    @property
    def workers(self) -> int:
        return self.read.workers

    @property
    def experiment_ids(self) -> tuple[str, ...]:
        return self.mlflow.experiment_ids

    @property
    def project(self) -> str | None:
        return self.wandb.project
