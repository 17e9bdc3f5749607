"""Where a job's runs are processed: threads here, processes here, a Dask or a Ray cluster.

A bulk job hands each run to a :class:`concurrent.futures.Executor`. With threads (the
default) the runs share the job's open source. Anywhere else, each run travels as a
:class:`RunJob`, which reopens the run from its run string and the job's options in the
worker (a source holds clients and connections that do not travel), processes it, and
sends back its :class:`~tracker_plugin.jobs.runner.Outcome`.

:func:`make_executor` makes the executor a command-line job asks for (``--executor``) and
takes it down at the end; an executor handed in through the Python API is the caller's
and is left running. Dask joins a scheduler by address (``--dask-address``, else Dask's
own ``scheduler-address`` setting, which Dask reads from ``DASK_SCHEDULER_ADDRESS``), else
starts a local cluster of ``workers`` processes; Ray joins the cluster ``RAY_ADDRESS``
names (Ray reads it itself), else starts a local instance of ``workers`` CPUs. Nothing
here sets an environment variable: the workers read the trackers' settings and
credentials (``MLFLOW_TRACKING_*``, ``WANDB_API_KEY``) from their own environment, as
the job does; the tracking URI is pinned in the options the runs carry.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tracker_plugin.errors import ConfigError, MissingDependency

__all__ = ["EXECUTORS", "RayExecutor", "make_executor", "shares_memory"]

EXECUTORS = ("threads", "processes", "dask", "ray")


def shares_memory(executor: Executor | None) -> bool:
    """Do the executor's tasks run in this process (so they can share the open source)?"""
    return executor is None or isinstance(executor, ThreadPoolExecutor)


@contextmanager
def make_executor(kind: str, workers: int, address: str | None = None) -> Iterator[Executor | None]:
    """The executor ``--executor kind`` names, with ``workers`` workers; None for threads
    (each job makes its own pool, sharing its source). Taken down when the block ends;
    a cluster joined by address is left running, only the connection to it is closed."""
    if kind == "threads":
        yield None
    elif kind == "processes":
        # spawn: a forked child would inherit locks held by the parent's threads.
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
    elif kind == "dask":
        with _dask(workers, address) as pool:
            yield pool
    elif kind == "ray":
        with _ray(workers, address) as pool:
            yield pool
    else:
        raise ConfigError(f"--executor {kind!r}: choose one of {', '.join(EXECUTORS)}")


@contextmanager
def _dask(workers: int, address: str | None) -> Iterator[Executor]:
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise MissingDependency("distributed", "dask") from None
    address = address or dask.config.get("scheduler-address", None)
    cluster = None
    if not address:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=logging.ERROR
        )
    # Not the process's default client: the caller's own Dask work stays on its own.
    client = Client(cluster if cluster is not None else address, set_as_default=False)
    try:
        # pure=False: two runs are two tasks even if Dask would hash their arguments alike.
        yield client.get_executor(pure=False)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@contextmanager
def _ray(workers: int, address: str | None) -> Iterator[Executor]:
    try:
        import ray
    except ImportError:
        raise MissingDependency("ray", "ray") from None
    started = not ray.is_initialized()
    if started and address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    elif started and os.environ.get("RAY_ADDRESS"):
        ray.init(log_to_driver=False, logging_level=logging.ERROR)  # Ray joins the cluster RAY_ADDRESS names
    elif started:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield RayExecutor()
    finally:
        if started:
            ray.shutdown()


@dataclass(frozen=True)
class _Call:
    """``fn(*args, **kwargs)``, as one Ray task."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def _run_call(call: _Call) -> Any:
    return call()


class RayExecutor(Executor):
    """A :class:`concurrent.futures.Executor` over Ray tasks, one CPU each, on the Ray
    instance this process is connected to (:func:`ray.init`)."""

    def __init__(self) -> None:
        import ray

        self._remote = ray.remote(num_cpus=1, max_retries=0)(_run_call)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = self._remote.remote(_Call(fn, args, kwargs)).future()
        return future
