"""The command line's options, and what they give: the analysis settings and where runs are.

The settings are :class:`~tracker_plugin.core.analysis.AnalysisConfig`'s own fields, named
as the dataclass names them. Their defaults and choices come from
:mod:`tracker_plugin.defaults`, where the dataclass takes them from too, a module light
enough that the command line answers ``--help`` and a bad argument without importing the
analysis. This module adds what only a command line needs: the help text, and how the
settings given as text (the schedules) are read, which imports the plan and the trackers
only when a command runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from tracker_plugin.cli.numbers import DEADLINE, NUMBERS
from tracker_plugin.defaults import CLOCKS, DEFAULT_FAMILY_RULE, DEFAULTS, MODELS, PLANS
from tracker_plugin.errors import ConfigError

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from tracker_plugin.core.analysis import AnalysisConfig
    from tracker_plugin.plan.schedule import LrSchedule
    from tracker_plugin.trackers import SourceOptions

__all__ = [
    "CLOCKS",
    "DEFAULT_FAMILY_RULE",
    "DEFAULTS",
    "MODELS",
    "PLANS",
    "SETTINGS",
    "analysis_options",
    "default_sources",
    "flag_of",
    "make_config",
    "make_settings",
    "make_source_options",
    "plan_options",
    "planned_lrs",
    "plot_option",
    "plot_x_option",
    "settings_options",
    "source_options",
    "tracker_options",
]

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# The help of each AnalysisConfig field the command line sets, in the order --help lists
# them. A field missing here and from NOT_SETTINGS fails tests/test_cli_startup.py.
SETTINGS = {
    "ema_token_window": "EMA smoothing window in tokens (converted to a span per step from that step's batch).",
    "ema_steps": "EMA window in steps, used when the run has no tokens to be had (the analysis is then on steps).",
    "fit_start_step": "First step of the fit [default: end of lr warmup].",
    "fit_last_stage": "Start the fit no earlier than the last batch stage in the log.",
    "batch_schedule": "Planned batch stages, e.g. '0:589824 2e9:786432'; converts forecast tokens to steps.",
    "lr_schedule": "CSV with columns step,lr: the planned lr of the whole run (schedule-aware models).",
    "clock": "What a step of summed lr counts in: tokens (right across batch switches) or steps.",
    "interval": "Coverage of the forecast interval (0.8 = 80%).",
    "anneal_gain": "Prior share of the loss a full lr decay removes, for decays the log has not shown (0: none).",
    "extrapolation_warn_factor": "Flag forecasts further than this multiple of the observed tokens.",
    "stability_sweep": "Refit on growing windows and judge convergence.",
    "sweep_step": "Steps between sweep windows.",
    "sweep_min_window": "Steps after the fit start before the first sweep window.",
    "convergence_tol": "Largest relative change between the last sweep windows that counts as converged.",
    "step_time": "Seconds per step, for hours when the log has no clock (or to override it).",
    "throughput": "Tokens per second, for hours when the log has no clock (or to override it).",
    "count_pauses": "Include the observed rate of pauses (evals, checkpoints, downtime) in the hours.",
    "deadline": "A deadline: an ISO date (UTC unless it says) or +HOURS after the last logged row; "
    "gives P(reached by then) per target.",
}
# Fields that are not among the settings options: the targets and the model have options
# of their own (the backtest sets them by its protocol); the sampling cap is for the API;
# the calibration is the Python API's; the project's law is made from the runs --siblings names.
NOT_SETTINGS = ("targets", "model", "max_fit_points", "calibration", "project_law")

_CHOICES = {"clock": CLOCKS, "model": MODELS}


def flag_of(name: str) -> str:
    """The option that sets a field: ``ema_token_window -> --ema-token-window``."""
    return "--" + name.replace("_", "-")


def _value_type(name: str) -> Any:
    """The click type of a setting: its choices, its range or the deadline's form."""
    if name in _CHOICES:
        return click.Choice(_CHOICES[name])
    if name == "deadline":
        return DEADLINE
    return NUMBERS[name]


def _setting_option(name: str) -> Decorator:
    """The option of one plain setting: a flag for a bool, else a value with its default."""
    default = DEFAULTS[name]
    if isinstance(default, bool):
        return click.option(flag_of(name), is_flag=True, default=default, help=SETTINGS[name])
    return click.option(
        flag_of(name), type=_value_type(name), default=default, show_default=default is not None, help=SETTINGS[name]
    )


def _lr_options(compared: bool = False) -> list[Decorator]:
    """The planned lr's options; ``compared``: a file and a spec may be given several times
    (plans compared on one budget)."""
    again = " Repeat it to compare plans (with --compare)." if compared else ""
    return [
        click.option("--lr-schedule", "lr_schedule_file", type=click.Path(dir_okay=False), multiple=compared,
                     help=SETTINGS["lr_schedule"] + again),
        click.option(
            "--lr-spec",
            metavar="SHAPE:KEY=VALUE,...",
            multiple=compared,
            help="The planned lr as a shape, e.g. 'cosine:warmup=2000,total=50000,final=0.1' "
            "(shapes: constant, cosine, linear, wsd, step; see docs/forecasting.md, The planned lr beyond the log)." + again,
        ),
        click.option(
            "--total-steps",
            "planned_total",
            type=NUMBERS["planned_total"],
            metavar="STEPS",
            help="The planned last step when the lr's shape is not known: the shape is inferred from "
            "the logged lr, or drawn over the prior's cooldowns, ending there.",
        ),
    ]


# Settings given as text, read by make_settings: their options are written out.
_TEXT_SETTINGS: dict[str, list[Decorator]] = {
    "batch_schedule": [
        click.option("--batch-schedule", multiple=True, metavar="TOKENS:BATCH [...]", help=SETTINGS["batch_schedule"]),
    ],
    "lr_schedule": _lr_options(),
}


def _with(options: Sequence[Decorator], func: Callable[..., Any]) -> Callable[..., Any]:
    """Apply click option decorators so that they list in the order given."""
    for option in reversed(options):
        func = option(func)
    return func


def settings_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change the analysis, except the targets and the model."""
    options: list[Decorator] = []
    for name in SETTINGS:
        options += _TEXT_SETTINGS.get(name) or [_setting_option(name)]
    return _with(options, func)


def plan_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`analysis_options` for runs not started: the planned lr may be given several
    times, each plan forecast on one budget (read them with :func:`planned_lrs`); no
    ``--model`` (the siblings' leave-one-out chooses their law)."""
    options: list[Decorator] = []
    for name in SETTINGS:
        options += (_lr_options(compared=True) if name == "lr_schedule" else
                    _TEXT_SETTINGS.get(name) or [_setting_option(name)])
    return _TARGET_OPTION(_with(options, func))


def planned_lrs(options: dict[str, Any]) -> list[tuple[str, LrSchedule]]:
    """The plans :func:`plan_options` read, each with what the command line called it,
    popped from ``options`` (the files, then the specs).

    Raises
    ------
    ConfigError
        No plan with a shape: none given, or only --total-steps (a run not started has no
        logged lr to show its shape).
    """
    from tracker_plugin.plan.schedule import LrSchedule
    from tracker_plugin.trackers.csvfile import read_lr_schedule

    files, specs = options.pop("lr_schedule_file", ()), options.pop("lr_spec", ())
    total = options.pop("planned_total", None)
    if not files and not specs:
        said = f"--total-steps {total:g} gives its length only; " if total is not None else ""
        raise ConfigError(f"a run not started is forecast on its planned lr: {said}give its shape with --lr-spec SPEC "
                          "or --lr-schedule FILE")
    if total is not None:
        raise ConfigError("give the planned lr by --lr-spec or --lr-schedule (their total is the planned last step), "
                          "not with --total-steps")
    return [(f, read_lr_schedule(f)) for f in files] + [(s, LrSchedule.parse_spec(s)) for s in specs]


_TARGET_OPTION = click.option(
    "-t",
    "--target",
    "targets",
    type=NUMBERS["targets"],
    multiple=True,
    required=True,
    metavar="LOSS [LOSS ...]",
    help="Target loss(es); several may follow one flag.",
)
_MODEL_OPTION = click.option(
    "--model",
    type=_value_type("model"),
    default=DEFAULTS["model"],
    show_default=True,
    help="Loss-curve model: auto picks the schedule-aware law that best forecasts the run's own "
    "later history; power-law is the original script's power law in tokens.",
)


def plot_x_option(help_text: str) -> Decorator:
    """``--x``: the plot's x axis, tokens or time (what time means is the command's to say)."""
    return click.option("--x", "plot_x", type=click.Choice(["tokens", "time"]), default="tokens", show_default=True,
                        help=help_text)


plot_option = click.option(
    "--plot/--no-plot",
    default=True,
    show_default=True,
    help="Draw each run's loss_eta.png; --no-plot writes a small picture that says none was drawn "
    "(a bulk job that reads the keys or loss_eta.json saves the plot's cost, most of a finished run's).",
)


def analysis_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change the analysis; the same in every command."""
    return _TARGET_OPTION(_MODEL_OPTION(settings_options(func)))


def forecast_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`analysis_options` without the targets: for commands that choose their own
    (``calibrate`` backtests each run at its own quantiles)."""
    return _MODEL_OPTION(settings_options(func))


def make_config(options: dict[str, Any]) -> AnalysisConfig:
    """The analysis settings from the parsed command-line options, popped from ``options``."""
    from tracker_plugin.core.analysis import AnalysisConfig

    return AnalysisConfig(targets=tuple(options.pop("targets")), model=options.pop("model"), **make_settings(options))


def make_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`AnalysisConfig` fields of :func:`settings_options`, popped from ``options``."""
    from tracker_plugin.plan.schedule import BatchSchedule

    settings = {name: options.pop(name) for name in SETTINGS if name not in _TEXT_SETTINGS}
    schedule = options.pop("batch_schedule", ())
    settings["batch_schedule"] = BatchSchedule.parse(schedule) if schedule else None
    settings["lr_schedule"] = _lr_schedule(
        options.pop("lr_schedule_file", None), options.pop("lr_spec", None), options.pop("planned_total", None)
    )
    return settings


def _lr_schedule(path: str | None, spec: str | None, total: float | None) -> LrSchedule | None:
    from tracker_plugin.plan.schedule import LrSchedule
    from tracker_plugin.trackers.csvfile import read_lr_schedule

    if sum(given is not None for given in (path, spec, total)) > 1:
        raise ConfigError(
            "give the planned lr once: --lr-schedule FILE, --lr-spec SPEC or --total-steps STEPS, not more than one"
        )
    if spec:
        return LrSchedule.parse_spec(spec)
    if path:
        return read_lr_schedule(path)
    if total is not None:
        return LrSchedule.steps_only(total)
    return None


def source_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that say how to read a run into the common frame."""
    options = [
        click.option(
            "--step-col", multiple=True, help="Column or key holding the optimizer step [default: step, _step, ...]."
        ),
        click.option(
            "--loss-col",
            multiple=True,
            help="Column or key holding the loss; repeat to give candidates, the first present wins "
            "[default: train_loss, train/loss, loss, ...].",
        ),
        click.option(
            "--tokens-col", multiple=True, help="Column or key holding tokens consumed before the step [default: tokens, ...]."
        ),
        click.option("--batch-col", multiple=True, help="Column or key holding tokens per step [default: global_batch, ...]."),
        click.option("--lr-col", multiple=True, help="Column or key holding the learning rate [default: lr, learning_rate, ...]."),
        click.option(
            "--time-col",
            multiple=True,
            help="Column or key holding the run's clock: seconds since start, Unix time or ISO 8601 dates; "
            "--time-col none reads no clock [default: time, timestamp, _timestamp, _runtime, train_time, ...].",
        ),
        click.option(
            "--batch-size",
            type=NUMBERS["batch_size"],
            help="Tokens per step when the run logs no batch column; else read from the name (_1Mbs).",
        ),
        click.option(
            "--seq-len",
            type=NUMBERS["seq_len"],
            help="Tokens per sequence, for tokens per step composed from the run's config "
            "(per-device batch x accumulation x world size x sequence length).",
        ),
        click.option(
            "--world-size",
            type=NUMBERS["world_size"],
            help="Data-parallel devices, when the run's config does not say (scales per-device counts).",
        ),
    ]
    return _with(options, func)


def tracker_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that say where runs live and which to take, in the trackers' own conventions."""
    options = [
        click.option(
            "--tracking-uri",
            envvar="MLFLOW_TRACKING_URI",
            help="MLflow tracking URI [env: MLFLOW_TRACKING_URI; default: MLflow's own, a local mlflow.db].",
        ),
        click.option(
            "--experiment-id",
            "experiment_ids",
            multiple=True,
            help="MLflow experiment id(s) to take runs from (instead of a SOURCE).",
        ),
        click.option("-e", "--entity", envvar="WANDB_ENTITY", help="W&B entity [env: WANDB_ENTITY]."),
        click.option("-p", "--project", envvar="WANDB_PROJECT", help="W&B project [env: WANDB_PROJECT]."),
        click.option(
            "--filter",
            "filter_",
            help="Run filter: an MLflow filter string (\"attributes.status = 'FINISHED'\") or W&B filter JSON.",
        ),
        click.option(
            "--state",
            "states",
            multiple=True,
            help="Take only runs in this state (repeatable): running, finished, failed, crashed, killed.",
        ),
        click.option("--tag", "tags", multiple=True, help="Take only W&B runs with this tag (repeatable)."),
        click.option("--created-after", help="Take only runs created after this date (YYYY-MM-DD)."),
        click.option(
            "--batch-param",
            "batch_params",
            multiple=True,
            help="Run param/config key holding tokens per step [default: global_batch_size, batch_size_in_tokens, ...].",
        ),
        click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True, help="Runs (and keys) fetched at once."),
        click.option(
            "--cache-dir",
            envvar="TRACKER_PLUGIN_CACHE_DIR",
            type=click.Path(file_okay=False),
            help="Where finished runs' histories are cached [env: TRACKER_PLUGIN_CACHE_DIR; default: ~/.cache/tracker_plugin].",
        ),
        click.option("--no-cache", is_flag=True, help="Read every history from the tracker."),
    ]
    return _with(options, func)


def series_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Whether the smoothed loss goes back as a series for the trackers' own charts."""
    return click.option(
        "--series/--no-series",
        default=True,
        show_default=True,
        help="Write the token-window smoothed loss back as a series (loss_eta_smoothed against loss_eta_tokens, "
        "about 1,000 points a run) for the tracker's own charts.",
    )(func)


def fanout_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Where a job over many runs processes them (see :mod:`tracker_plugin.jobs.fanout`)."""
    options = [
        click.option(
            "--executor",
            type=click.Choice(["threads", "processes", "dask", "ray"]),
            default="threads",
            show_default=True,
            help="Where runs are processed: threads or processes here (--workers of them), a Dask or a Ray cluster.",
        ),
        click.option(
            "--dask-address",
            metavar="ADDRESS",
            help="With --executor dask: the scheduler to join [default: Dask's own, DASK_SCHEDULER_ADDRESS; "
            "else a local cluster of --workers processes].",
        ),
    ]
    return _with(options, func)


@contextmanager
def executor_of(options: dict[str, Any], workers: int) -> Iterator[Executor | None]:
    """The executor ``--executor`` names (None: the job's own threads), for the command's duration."""
    from tracker_plugin.jobs.fanout import make_executor

    kind, address = options.pop("executor", "threads"), options.pop("dask_address", None)
    if address and kind != "dask":
        raise click.UsageError("--dask-address is for --executor dask")
    with make_executor(kind, workers, address) as executor:
        yield executor


def make_source_options(options: dict[str, Any]) -> SourceOptions:
    """Where and how to read runs, from the parsed command-line options: the reading
    options every source shares, and each tracker's own (``--filter`` is read by both)."""
    from tracker_plugin.frame.history import Columns
    from tracker_plugin.trackers import MlflowOptions, ReadOptions, SourceOptions, WandbOptions

    columns = Columns().with_overrides(
        **{key: options.pop(f"{key}_col", None) or None for key in ("step", "loss", "tokens", "batch", "lr", "time")}
    )
    batch_params = options.pop("batch_params", ())
    run_filter = options.pop("filter_", None)
    read = ReadOptions(
        columns=columns,
        batch_size=options.pop("batch_size"),
        seq_len=options.pop("seq_len", None),
        world_size=options.pop("world_size", None),
        workers=options.pop("workers", 4),
        cache_dir=options.pop("cache_dir", None),
        use_cache=not options.pop("no_cache", False),
        **({"batch_params": tuple(batch_params)} if batch_params else {}),
    )
    mlflow = MlflowOptions(
        tracking_uri=options.pop("tracking_uri", None),
        experiment_ids=tuple(options.pop("experiment_ids", ())),
        filter=run_filter,
    )
    wandb = WandbOptions(
        entity=options.pop("entity", None),
        project=options.pop("project", None),
        tags=tuple(options.pop("tags", ())),
        created_after=options.pop("created_after", None),
        filter=run_filter,
    )
    return SourceOptions(read=read, mlflow=mlflow, wandb=wandb, states=tuple(options.pop("states", ())))


def default_sources(sources: Sequence[str], options: SourceOptions) -> list[str]:
    """The run strings to use: those given, else what --experiment-id, -p/--project or the
    trackers' own environment variables name (see :func:`tracker_plugin.trackers.default_source`)."""
    from tracker_plugin.trackers import default_source

    if sources:
        return list(sources)
    spec = default_source(options)
    if spec is None:
        raise click.UsageError(
            "give a SOURCE (a CSV path, mlflow:..., wandb:..., a run's URL), --experiment-id or -p/--project "
            "(or set MLFLOW_EXPERIMENT_NAME, MLFLOW_EXPERIMENT_ID or WANDB_PROJECT)"
        )
    return [spec]
