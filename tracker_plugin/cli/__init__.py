"""The ``tracker-plugin`` command.

Errors the user can fix (bad input, a missing run, a tracker refusing a request) end in
one line on stderr and exit code 2; ``TRACKER_PLUGIN_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import click

from tracker_plugin import __version__
from tracker_plugin.core.analysis import MODELS, AnalysisConfig, run_analysis
from tracker_plugin.core.backtest import PLANS, backtest_run, summarize
from tracker_plugin.core.clock import CLOCKS
from tracker_plugin.core.forecast import AUTO
from tracker_plugin.errors import ConfigError, TrackerPluginError
from tracker_plugin.frame.history import Columns
from tracker_plugin.jobs.runner import Outcome, outcome_rows, process_runs
from tracker_plugin.plan.schedule import BatchSchedule, LrSchedule
from tracker_plugin.report.render import backtest_json, backtest_text, runs_table, to_json, to_text
from tracker_plugin.trackers import RunInfo, Source, SourceOptions, open_source
from tracker_plugin.trackers.base import select_states
from tracker_plugin.trackers.csvfile import read_lr_schedule

EXIT_BAD_INPUT = 2

# Options that take several values after one flag, as the original script's argparse
# ``nargs="+"`` did: ``--target 3.6 3.3``. Each maps to a test for its values.
_MULTI_VALUE = {
    "--target": "number",
    "-t": "number",
    "--batch-schedule": "pair",
    "--fit-fractions": "number",
    "--target-quantiles": "number",
    "--models": "model",
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_pair(text: str) -> bool:
    return ":" in text and not text.startswith("-")


def _is_model(text: str) -> bool:
    return text in MODELS


def expand_multi_value(argv: Sequence[str]) -> list[str]:
    """Rewrite ``--target 3.6 3.3`` as ``--target 3.6 --target 3.3`` for click.

    Values are taken while they look like values of that option, so a run name after
    the targets stays a run name.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        out.append(arg)
        i += 1
        kind = _MULTI_VALUE.get(arg)
        if kind is None or i >= len(argv):
            continue
        out.append(argv[i])  # the first value always belongs to the option
        i += 1
        looks_right = {"number": _is_number, "pair": _is_pair, "model": _is_model}[kind]
        while i < len(argv) and looks_right(argv[i]):
            out += [arg, argv[i]]
            i += 1
    return out


def _with(options: list[Callable[..., Any]], func: Callable[..., Any]) -> Callable[..., Any]:
    """Apply click option decorators so that they list in the order given."""
    for option in reversed(options):
        func = option(func)
    return func


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
            "--batch-size",
            type=float,
            help="Tokens per step when the run logs no batch column; else read from the name (_1Mbs).",
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


_TARGET_OPTION = click.option(
    "-t",
    "--target",
    "targets",
    type=float,
    multiple=True,
    required=True,
    metavar="LOSS [LOSS ...]",
    help="Target loss(es); several may follow one flag.",
)
_MODEL_OPTION = click.option(
    "--model",
    type=click.Choice(MODELS),
    default=AUTO,
    show_default=True,
    help="Loss-curve model: auto picks the schedule-aware law that best forecasts the run's own "
    "later history; power-law is the original script's power law in tokens.",
)


def settings_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change the analysis, except the targets and the model."""
    options = [
        click.option(
            "--ema-token-window",
            type=float,
            default=100_000_000.0,
            show_default=True,
            help="EMA smoothing window in tokens (converted to a span per step from that step's batch).",
        ),
        click.option("--fit-start-step", type=int, help="First step of the fit [default: end of lr warmup]."),
        click.option(
            "--fit-last-stage",
            is_flag=True,
            help="Start the fit no earlier than the last batch stage in the log.",
        ),
        click.option(
            "--batch-schedule",
            multiple=True,
            metavar="TOKENS:BATCH [...]",
            help="Planned batch stages, e.g. '0:589824 2e9:786432'; converts forecast tokens to steps.",
        ),
        click.option(
            "--lr-schedule",
            "lr_schedule_file",
            type=click.Path(dir_okay=False),
            help="CSV with columns step,lr: the planned lr of the whole run (schedule-aware models).",
        ),
        click.option(
            "--lr-spec",
            metavar="SHAPE:KEY=VALUE,...",
            help="The planned lr as a shape, e.g. 'cosine:warmup=2000,total=50000,final=0.1' "
            "(shapes: constant, cosine, linear, wsd, step; see the README).",
        ),
        click.option(
            "--clock",
            type=click.Choice(CLOCKS),
            default="tokens",
            show_default=True,
            help="What a step of summed lr counts in: tokens (right across batch switches) or steps.",
        ),
        click.option(
            "--interval",
            type=float,
            default=0.8,
            show_default=True,
            help="Coverage of the forecast interval (0.8 = 80%).",
        ),
        click.option(
            "--anneal-gain",
            type=float,
            default=0.05,
            show_default=True,
            help="Prior share of the loss a full lr decay removes, for decays the log has not shown (0: none).",
        ),
        click.option(
            "--extrapolation-warn-factor",
            type=float,
            default=3.0,
            show_default=True,
            help="Flag forecasts further than this multiple of the observed tokens.",
        ),
        click.option("--stability-sweep", is_flag=True, help="Refit on growing windows and judge convergence."),
        click.option("--sweep-step", type=int, default=300, show_default=True, help="Steps between sweep windows."),
        click.option(
            "--sweep-min-window",
            type=int,
            default=500,
            show_default=True,
            help="Steps after the fit start before the first sweep window.",
        ),
        click.option(
            "--convergence-tol",
            type=float,
            default=0.05,
            show_default=True,
            help="Largest relative change between the last sweep windows that counts as converged.",
        ),
    ]
    return _with(options, func)


def analysis_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change the analysis; the same in every command."""
    return _TARGET_OPTION(_MODEL_OPTION(settings_options(func)))


def make_config(options: dict[str, Any]) -> AnalysisConfig:
    """The analysis settings from the parsed command-line options."""
    return AnalysisConfig(targets=tuple(options.pop("targets")), model=options.pop("model"), **make_settings(options))


def make_settings(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`AnalysisConfig` fields of :func:`settings_options`, popped from ``options``."""
    schedule = options.pop("batch_schedule", ())
    return dict(
        ema_token_window=options.pop("ema_token_window"),
        fit_start_step=options.pop("fit_start_step"),
        fit_last_stage=options.pop("fit_last_stage"),
        batch_schedule=BatchSchedule.parse(schedule) if schedule else None,
        lr_schedule=_lr_schedule(options.pop("lr_schedule_file", None), options.pop("lr_spec", None)),
        clock=options.pop("clock"),
        interval=options.pop("interval"),
        anneal_gain=options.pop("anneal_gain"),
        extrapolation_warn_factor=options.pop("extrapolation_warn_factor"),
        stability_sweep=options.pop("stability_sweep"),
        sweep_step=options.pop("sweep_step"),
        sweep_min_window=options.pop("sweep_min_window"),
        convergence_tol=options.pop("convergence_tol"),
    )


def _lr_schedule(path: str | None, spec: str | None) -> LrSchedule | None:
    if path and spec:
        raise ConfigError("give the planned lr once: --lr-schedule FILE or --lr-spec SPEC, not both")
    if spec:
        return LrSchedule.parse_spec(spec)
    if path:
        return read_lr_schedule(path)
    return None


def make_source_options(options: dict[str, Any]) -> SourceOptions:
    """Where and how to read runs, from the parsed command-line options: the reading
    options every source shares, and each tracker's own (``--filter`` is read by both)."""
    from tracker_plugin.trackers import MlflowOptions, ReadOptions, WandbOptions

    columns = Columns().with_overrides(
        **{key: options.pop(f"{key}_col") or None for key in ("step", "loss", "tokens", "batch", "lr")}
    )
    batch_params = options.pop("batch_params", ())
    run_filter = options.pop("filter_", None)
    read = ReadOptions(
        columns=columns,
        batch_size=options.pop("batch_size"),
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
    """The run strings to use: those given, else what --experiment-id or -p/--project name."""
    if sources:
        return list(sources)
    if options.experiment_ids:
        return ["mlflow:"]
    if options.project:
        return ["wandb:"]
    raise click.UsageError("give a SOURCE (a CSV path, mlflow:..., wandb:...), --experiment-id or -p/--project")


def annotate_once(
    specs: Sequence[str],
    options: SourceOptions,
    config: AnalysisConfig,
    *,
    force: bool = False,
    dry_run: bool = False,
    keep: frozenset[str] = frozenset(),
    states: tuple[str, ...] | None = None,
) -> list[Outcome]:
    """One annotation pass over every run the run strings name; see :func:`open_runs`."""
    outcomes = []
    for source, runs in open_runs(specs, options, keep, states):
        try:
            outcomes += process_runs(
                source, runs, config, write=True, force=force, dry_run=dry_run, workers=options.workers,
                label="annotating",
            )
        finally:
            source.close()
    return outcomes


def open_runs(
    specs: Sequence[str],
    options: SourceOptions,
    keep: frozenset[str] = frozenset(),
    states: tuple[str, ...] | None = None,
) -> list[tuple[Source, list[RunInfo]]]:
    """Each run string's source and the runs it names, in ``states`` (default: ``--state``).

    Runs whose ref is in ``keep`` are taken whatever their state.
    """
    states = options.states if states is None else states
    opened: list[tuple[Source, list[RunInfo]]] = []
    try:
        for spec in specs:
            source = open_source(spec, options)
            opened.append((source, []))
            opened[-1] = (source, select_states(source.runs(), states, keep))
    except BaseException:
        for source, _ in opened:
            source.close()
        raise
    return opened


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tracker-plugin")
def cli() -> None:
    """When does a training run reach a target loss?

    Reads a run's loss history from a CSV file, MLflow or Weights & Biases, smooths it
    over a fixed number of tokens, finds where it crossed each target and forecasts when
    it will cross the rest.
    """


@cli.command()
@click.argument("source")
@analysis_options
@source_options
@tracker_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the report.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a PNG plot to this file.")
def analyze(source: str, as_json: bool, plot_path: str | None, **options: Any) -> None:
    """Analyse one run and print the report.

    SOURCE is a CSV path, mlflow:RUN_ID, wandb:ENTITY/PROJECT/RUN_ID or wandb-offline:PATH.

    \b
    Example:
      tracker-plugin analyze run.csv --target 3.6 3.3 --loss-col val_loss
    """
    config = make_config(options)
    opened = open_source(source, make_source_options(options))
    try:
        runs = opened.runs()
        if len(runs) != 1:
            raise click.UsageError(
                f"{source} names {len(runs)} runs; analyze takes one (use annotate or compare for many)"
            )
        result = run_analysis(opened.read(runs[0]), config)
    finally:
        opened.close()
    if plot_path:
        from tracker_plugin.report.plot import plot_analysis

        plot_analysis(result, plot_path)
    if as_json:
        click.echo(json.dumps(to_json(result), indent=2))
    else:
        click.echo(to_text(result))


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@click.option("--force", is_flag=True, help="Annotate runs whose last annotation is still current.")
@click.option("--dry-run", is_flag=True, help="Print what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def annotate(sources: tuple[str, ...], force: bool, dry_run: bool, as_json: bool, **options: Any) -> int:
    """Analyse runs and write the forecasts back to them.

    SOURCES are run strings: mlflow:RUN_ID, mlflow:experiment/NAME_OR_ID,
    wandb:ENTITY/PROJECT[/RUN_ID], wandb-offline:PATH, or CSV paths (whose artifacts go
    beside them). Runs whose annotation is current are skipped. Exit code 1 if any run
    failed; the others still finish.
    """
    config = make_config(options)
    source_options = make_source_options(options)
    specs = default_sources(sources, source_options)
    outcomes = annotate_once(specs, source_options, config, force=force, dry_run=dry_run)
    rows = outcome_rows(outcomes)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        for outcome in outcomes:
            for line in outcome.planned:
                click.echo(f"{outcome.run.ref}: would write {line}")
        click.echo(runs_table(rows))
    return 1 if any(o.failed for o in outcomes) else 0


@cli.command()
@click.argument("sources", nargs=-1)
@click.option(
    "--fit-fractions",
    type=float,
    multiple=True,
    default=(0.25, 0.5),
    show_default=True,
    metavar="F [F ...]",
    help="Cut each run at these shares of its final tokens.",
)
@click.option(
    "--target-quantiles",
    type=float,
    multiple=True,
    default=(0.6, 0.8, 0.95),
    show_default=True,
    metavar="Q [Q ...]",
    help="Targets: the smoothed loss at these shares of each run's final tokens.",
)
@click.option(
    "--models",
    type=click.Choice(MODELS),
    multiple=True,
    default=(AUTO, "power-law"),
    show_default=True,
    metavar="MODEL [MODEL ...]",
    help=f"Models to score ({', '.join(MODELS)}).",
)
@click.option(
    "--plan",
    type=click.Choice(PLANS),
    default="log",
    show_default=True,
    help="log: each forecast gets the finished run's logged lr as its planned schedule; "
    "infer: only the lr logged up to the cut.",
)
@settings_options
@source_options
@tracker_options
@click.option("--json", "as_json", is_flag=True, help="Print every case and the summary as JSON.")
def backtest(
    sources: tuple[str, ...],
    fit_fractions: tuple[float, ...],
    target_quantiles: tuple[float, ...],
    models: tuple[str, ...],
    plan: str,
    as_json: bool,
    **options: Any,
) -> int:
    """How far to trust forecasts on finished runs: cut, forecast, compare.

    Each run is cut at each fit fraction of its final tokens; the targets are the values
    its smoothed loss had at each target quantile of them; each forecast is scored by
    ln(predicted / true tokens), the truth being where the full run's smoothed loss first
    reached the target. Prints per model the median and 90th percentile of |ln|, the bias,
    the cases without a forecast and how often the intervals held the truth. Exit code 1
    if some run could not be read (the others are still scored).

    \b
    Example:
      tracker-plugin backtest runs/ --fit-fractions 0.25 0.5 --target-quantiles 0.6 0.8 0.95
    """
    for name, values, high in (("--fit-fractions", fit_fractions, 1.0), ("--target-quantiles", target_quantiles, 1.0)):
        if not all(0 < v <= high for v in values) or (name == "--fit-fractions" and 1.0 in values):
            raise click.UsageError(f"{name} takes shares of the final tokens, between 0 and 1; got {list(values)}")
    # The targets come from the protocol; the config's own is a placeholder.
    config = AnalysisConfig(targets=(0.0,), model=AUTO, **make_settings(options))
    source_options = make_source_options(options)
    cases, skipped = [], []
    for source, runs in open_runs(default_sources(sources, source_options), source_options):
        try:
            for run in runs:
                try:
                    history = source.read(run)
                except TrackerPluginError as exc:
                    skipped.append({"run": run.ref, "error": exc.problem})
                    continue
                cases += backtest_run(
                    history, config, fit_fractions=fit_fractions, target_quantiles=target_quantiles,
                    models=models, plan=plan,
                )
        finally:
            source.close()
    summaries = summarize(cases)
    if as_json:
        click.echo(json.dumps(backtest_json(cases, summaries, skipped, plan, config), indent=2))
    else:
        click.echo(backtest_text(cases, summaries, skipped, plan, config.interval))
    return 1 if skipped else 0


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@click.option("--json", "fmt", flag_value="json", help="Print the comparison as JSON.")
@click.option("--csv", "fmt", flag_value="csv", help="Print the comparison as CSV (safe to open in a spreadsheet).")
@click.option("--markdown", "fmt", flag_value="markdown", help="Print the comparison as Markdown tables.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write an overlay plot (PNG) of all runs.")
def compare(sources: tuple[str, ...], fmt: str | None, plot_path: str | None, **options: Any) -> int:
    """Compare runs on the token axis: which reaches each target first, and by how much.

    SOURCES are CSV files or directories, MLflow experiments or runs, W&B projects or
    runs (with --filter, --state, --tag). For each target the table lists run, batch,
    status, tokens, steps, interval and tokens relative to the best run, sorted by tokens.
    Exit code 1 if a run could not be analysed.
    """
    from tracker_plugin.core.compare import Compared
    from tracker_plugin.core.compare import compare as compare_runs
    from tracker_plugin.report.compare import render_csv, render_json, render_markdown, render_text

    config = make_config(options)
    source_options = make_source_options(options)
    outcomes = []
    for source, runs in open_runs(default_sources(sources, source_options), source_options):
        try:
            outcomes += process_runs(source, runs, config, write=False, workers=source_options.workers)
        finally:
            source.close()
    compared = [Compared(o.run.name, o.run.ref, o.analysis, o.error) for o in outcomes]
    rows = compare_runs(compared, config.targets)
    if fmt == "json":
        click.echo(json.dumps(render_json(rows), indent=2))
    elif fmt == "csv":
        click.echo(render_csv(rows), nl=False)
    elif fmt == "markdown":
        click.echo(render_markdown(rows))
    else:
        click.echo(render_text(rows))
    if plot_path:
        from tracker_plugin.report.plot import plot_comparison

        plot_comparison([(c.name, c.analysis) for c in compared if c.analysis is not None], plot_path)
    return 1 if any(o.failed for o in outcomes) else 0


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@click.option(
    "--every",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    metavar="MINUTES",
    help="Minutes between annotation passes.",
)
@click.option(
    "--max-cycles",
    type=click.IntRange(min=1),
    help="Stop after this many passes even if runs are still running [default: until all have finished].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def watch(sources: tuple[str, ...], every: float, max_cycles: int | None, as_json: bool, **options: Any) -> int:
    """Re-annotate runs every few minutes until they have all finished.

    Each pass reconnects to the tracker, lists the runs again and annotates those that
    moved on since the last pass; a run that finishes gets its final annotation, and the
    command then stops by itself (or after --max-cycles passes). One line per pass goes
    to stderr; the last pass's summary table to stdout. Exit code 1 if the last pass had
    a failed run.
    """
    import time

    config = make_config(options)
    source_options = make_source_options(options)
    specs = default_sources(sources, source_options)
    # After the first pass, list every run and keep the ones watched so far: a run that
    # was picked while running must be seen again once it has finished.
    later = replace(source_options, states=())
    watched: frozenset[str] = frozenset()
    cycle = 0
    while True:
        cycle += 1
        if cycle == 1:
            outcomes = annotate_once(specs, source_options, config)
        else:
            outcomes = annotate_once(specs, later, config, keep=watched, states=source_options.states)
        watched |= {o.run.ref for o in outcomes}
        running = [o for o in outcomes if not o.run.finished]
        failed = [o for o in outcomes if o.failed]
        counts = ", ".join(f"{n} {a}" for a, n in Counter(o.action for o in outcomes).items()) or "no runs"
        click.echo(f"pass {cycle}: {counts}; {len(running)} still running", err=True)
        if not running and not failed:
            click.echo("every run has finished and carries its final annotation", err=True)
            break
        if max_cycles is not None and cycle >= max_cycles:
            click.echo(f"stopping after {cycle} passes (--max-cycles)", err=True)
            break
        time.sleep(every * 60)
    rows = outcome_rows(outcomes)
    click.echo(json.dumps(rows, indent=2) if as_json else runs_table(rows))
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code instead of raising SystemExit."""
    args = expand_multi_value(sys.argv[1:] if argv is None else list(argv))
    try:
        result = cli.main(args=args, prog_name="tracker-plugin", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        return EXIT_BAD_INPUT
    except (TrackerPluginError, ConfigError) as exc:
        if os.environ.get("TRACKER_PLUGIN_DEBUG"):
            raise
        click.echo(f"error: {exc}", err=True)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) else 0


def entry_point() -> None:
    """The console script."""
    sys.exit(main())
