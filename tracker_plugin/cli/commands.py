"""The commands: each parses its options, calls one job and prints what it returns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from tracker_plugin.cli.config import ConfigFile, Setting, in_force
from tracker_plugin.cli.group import CONFIG_KEY, cli
from tracker_plugin.cli.numbers import NUMBERS
from tracker_plugin.cli.options import (
    DEFAULT_FAMILY_RULE,
    MODELS,
    PLANS,
    analysis_options,
    default_sources,
    executor_of,
    fanout_options,
    forecast_options,
    make_config,
    make_settings,
    make_source_options,
    plot_option,
    plot_x_option,
    series_option,
    settings_options,
    source_options,
    tracker_options,
)
from tracker_plugin.cli.output import check_plot_path, say, say_failures, write_plot
from tracker_plugin.errors import DataError

# The jobs and the report (and with them pandas, scipy and the trackers' clients) are
# imported inside each command, once its options are parsed: --help and a bad argument
# are answered without them (benchmarks/bench_cli_startup.py).

__all__ = ["cli"]


@cli.command("config", cls=click.Command)
@click.argument("command", default="analyze", type=click.Choice(["analyze", "annotate", "backtest", "compare", "plan", "watch"]))
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
@click.pass_context
def config_command(ctx: click.Context, command: str, as_json: bool) -> None:
    """Show the settings in force for COMMAND (default: analyze), and where each came from.

    Each option's value is the config file's, an environment variable's or the built-in
    default; a flag given to COMMAND would win over all three.
    """
    found: ConfigFile | None = ctx.meta.get(CONFIG_KEY)
    assert ctx.parent is not None
    target = cli.commands[command].make_context(command, [], parent=ctx.parent, resilient_parsing=True)
    settings = in_force(target, found)
    file = None if found is None else f"{found.path} {found.table}".rstrip()
    if as_json:
        doc = {"file": file, "command": command, "settings": {s.key: {"value": s.value, "from": s.origin} for s in settings}}
        say(json.dumps(doc, indent=2))
        return
    say(f"config file: {file}" if file else "config file: none (no tracker-plugin.toml, and no pyproject.toml "
        "with [tool.tracker-plugin], in this folder or above)")
    say(_settings_table(command, settings))


def _settings_table(command: str, settings: Sequence[Setting]) -> str:
    rows = [(f"{command} option", "value", "from")]
    rows += [(s.key, _shown(s.value), s.origin) for s in settings]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows)


def _shown(value: Any) -> str:
    if value is None or value == []:
        return "-"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


@cli.command()
@click.argument("source")
@analysis_options
@source_options
@tracker_options
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the report.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write a plot to this file: PNG, PDF or SVG, as its extension (.png, .pdf, .svg) says.")
@plot_x_option("The plot's x axis: tokens (log scale) or time (hours on the run's clock; the run must log one).")
@click.option("--siblings", "--calibrate-on", "siblings", multiple=True, metavar="SOURCE",
              help="Forecast by the law of the finished runs SOURCE names (any run string: CSVs, an experiment, a "
                   "project; repeatable), fitted on those of this run's configuration; the run itself is never one. "
                   "--calibrate-on is another name for it.")
def analyze(source: str, as_json: bool, plot_path: str | None, plot_x: str, siblings: tuple[str, ...],
            **options: Any) -> None:
    """Analyse one run and print the report.

    SOURCE is a CSV path, mlflow:RUN_ID, wandb:ENTITY/PROJECT/RUN_ID, wandb-offline:PATH,
    or the run's URL in the W&B or MLflow UI (or runs:/RUN_ID).

    \b
    Example:
      tracker-plugin analyze run.csv --target 3.6 3.3 --loss-col val_loss
    """
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.jobs.runs import NotOneRun, analyze_one
    from tracker_plugin.report.render import to_json, to_text

    config = make_config(options)
    check_plot_path(plot_path)
    if plot_x != "tokens" and not plot_path:
        raise click.UsageError(f"--x {plot_x} sets the plot's axis: give --plot too")
    try:
        result = analyze_one(source, make_source_options(options), config, siblings)
    except NotOneRun as exc:
        raise click.UsageError(
            f"{exc.spec} names {exc.count} runs; analyze takes one (use annotate or compare for many)"
        ) from None
    if plot_path:
        from tracker_plugin.report.plot import plot_analysis
        from tracker_plugin.report.plot_axis import NoClock

        try:
            write_plot(plot_path, lambda: plot_analysis(result, plot_path, x=plot_x))
        except NoClock as exc:
            raise DataError(f"--x time: {exc}; plot against tokens (--x tokens)", run=result.run) from None
    if as_json:
        say(json.dumps(to_json(result), indent=2))
    else:
        say(to_text(result, in_flags))


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@fanout_options
@click.option("--force", is_flag=True, help="Annotate runs whose last annotation is still current.")
@click.option("--dry-run", is_flag=True, help="Print what would be written; write nothing.")
@click.option("--siblings/--no-siblings", "--calibrate/--no-calibrate", "siblings", default=True, show_default=True,
              help="Forecast the runs not finished by the law of the finished runs of the same experiment or project "
                   "(--calibrate/--no-calibrate are other names for it).")
@plot_option
@series_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def annotate(
    sources: tuple[str, ...], force: bool, dry_run: bool, siblings: bool, plot: bool, series: bool, as_json: bool,
    **options: Any,
) -> int:
    """Analyse runs and write the forecasts back to them.

    SOURCES are run strings: mlflow:RUN_ID, mlflow:experiment/NAME_OR_ID,
    wandb:ENTITY/PROJECT[/RUN_ID], wandb-offline:PATH, or CSV paths (whose artifacts go
    beside them). Runs whose annotation is current are skipped. Exit code 1 if any run
    failed; the others still finish.

    A run not finished is forecast by its project's law: one law fitted on the finished
    runs of its run string (same experiment or project) of its configuration, where they
    share one. Each finished run keeps its evidence in its annotation, so a rerun reads no
    finished run again. --no-siblings forecasts each run on its own.
    """
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.jobs.annotate import annotate_runs
    from tracker_plugin.jobs.runner import outcome_rows
    from tracker_plugin.report.runs import runs_json, runs_table

    config = make_config(options)
    reading = make_source_options(options)
    with executor_of(options, reading.workers) as executor:
        outcomes = annotate_runs(
            default_sources(sources, reading), reading, config, force=force, dry_run=dry_run, executor=executor,
            siblings=siblings, plot=plot, series=series,
        )
    rows = outcome_rows(outcomes)
    if as_json:
        say(json.dumps(runs_json(rows), indent=2))
    else:
        for outcome in outcomes:
            if outcome.planned:
                first, *rest = outcome.planned
                say("\n".join([f"{outcome.run.name} ({outcome.run.ref}): {in_flags(first)}", *rest]))
        say(runs_table(rows, in_flags))
    failed = [(o.run.name, o.run.ref, o.error) for o in outcomes if o.failed]
    say_failures(failed, len(outcomes))
    return 1 if failed else 0


@cli.command()
@click.argument("sources", nargs=-1)
@forecast_options
@source_options
@tracker_options
@click.option("--json", "as_json", is_flag=True, help="Print the tables as JSON.")
def calibrate(sources: tuple[str, ...], as_json: bool, **options: Any) -> int:
    """Print the law a project's finished runs share; annotate nothing.

    SOURCES name projects as annotate takes them (mlflow:experiment/NAME_OR_ID,
    wandb:ENTITY/PROJECT, ...). Each finished run's evidence is the one its annotation
    stores (annotate keeps it), else taken now from its history. Prints each run, how well
    its own early log forecast it and whether the law counts it, then the law they share,
    or why they share none.
    """
    from tracker_plugin.jobs.annotate import project_laws
    from tracker_plugin.report.project_book import project_json, project_table

    options["targets"] = (1.0,)  # each run is scored at its own quantiles, whatever the targets
    config = make_config(options)
    reading = make_source_options(options)
    found = project_laws(default_sources(sources, reading), reading, config)
    if as_json:
        say(json.dumps([project_json(b.origin, b.read, b.evidences, law, dict(b.names)) for b, law in found], indent=2))
    else:
        say("\n\n".join(project_table(b.origin, b.read, b.evidences, law, dict(b.names)) for b, law in found))
    return 0


@cli.command()
@click.argument("sources", nargs=-1)
@click.option(
    "--fit-fractions",
    type=NUMBERS["fit_fractions"],
    multiple=True,
    default=(0.25, 0.5),
    show_default=True,
    metavar="F [F ...]",
    help="Cut each run at these shares of its final tokens.",
)
@click.option(
    "--target-quantiles",
    type=NUMBERS["target_quantiles"],
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
    default=("auto", "power-law"),
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
@click.option(
    "--cross-family",
    is_flag=True,
    help="Validate the forecast's rules leave-one-family-out: each family of runs scored with the rules "
    "chosen on the others (its own cuts, targets, laws and both plans).",
)
@click.option(
    "--family",
    "family_rule",
    default=DEFAULT_FAMILY_RULE,
    show_default=True,
    metavar="REGEX",
    help="With --cross-family: a run's family is the first group of this pattern in its name "
    "(default: the name up to its first '-').",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="With --cross-family: processes computing the cases.",
)
@click.option(
    "--cases-cache",
    type=click.Path(dir_okay=False),
    help="With --cross-family: keep the cases in this file and reuse them while the runs, settings and "
    "version are the same (the cases take minutes for tens of runs).",
)
def backtest(
    sources: tuple[str, ...],
    fit_fractions: tuple[float, ...],
    target_quantiles: tuple[float, ...],
    models: tuple[str, ...],
    plan: str,
    as_json: bool,
    cross_family: bool,
    family_rule: str,
    processes: int,
    cases_cache: str | None,
    **options: Any,
) -> int:
    """How far to trust forecasts on finished runs: cut, forecast, compare.

    Each run is cut at each fit fraction of its final tokens; the targets are the values
    its smoothed loss had at each target quantile of them; each forecast is scored by
    ln(predicted / true tokens), the truth being where the full run's smoothed loss first
    reached the target. Prints per model the median and 90th percentile of |ln|, the bias,
    the cases without a forecast and how often the intervals held the truth. Exit code 1
    if some run could not be read (the others are still scored).

    With --cross-family, each family of runs (--family) is held out in turn: the
    forecast's rules (the annealing-gain prior, auto's margin and gate, the interval's
    inflations, error prior and draws over plausible plans) are chosen on the other
    families and the held-out family is scored with them. Prints the figures with the
    rules before the plausible plans, today's and the held-out rules, each family's mean
    signed error and Brier score, and the rules chosen.

    \b
    Examples:
      tracker-plugin backtest runs/ --fit-fractions 0.25 0.5 --target-quantiles 0.6 0.8 0.95
      tracker-plugin backtest runs/ --cross-family --processes 2 --cases-cache cases.pkl
    """
    if cross_family:
        return _cross_family(sources, as_json, family_rule, processes, cases_cache, options)
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.core.analysis import AnalysisConfig
    from tracker_plugin.jobs.backtest import backtest_runs
    from tracker_plugin.report.backtest import backtest_json, backtest_text

    _check_shares("--fit-fractions", fit_fractions, one_allowed=False)
    _check_shares("--target-quantiles", target_quantiles, one_allowed=True)
    # The targets come from the protocol; the config's own is a placeholder.
    config = AnalysisConfig(targets=(1.0,), **make_settings(options))
    reading = make_source_options(options)
    result = backtest_runs(
        default_sources(sources, reading), reading, config,
        fit_fractions=fit_fractions, target_quantiles=target_quantiles, models=models, plan=plan,
    )
    say(json.dumps(backtest_json(result), indent=2) if as_json else backtest_text(result, in_flags))
    return 1 if result.skipped else 0


def _cross_family(
    sources: tuple[str, ...], as_json: bool, family_rule: str, processes: int, cache: str | None, options: dict[str, Any]
) -> int:
    """The leave-one-family-out backtest; its protocol sets the cuts, targets, laws and plans."""
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.core.analysis import AnalysisConfig
    from tracker_plugin.jobs.cross_family import cross_family_runs
    from tracker_plugin.report.cross_family import cross_family_json, cross_family_text

    context = click.get_current_context()
    for name in ("fit_fractions", "target_quantiles", "models", "plan"):
        if context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = "--" + name.replace("_", "-")
            raise click.UsageError(f"{flag} does not go with --cross-family: its protocol sets the cuts, targets, laws and plans")
    config = AnalysisConfig(targets=(1.0,), **make_settings(options))
    reading = make_source_options(options)
    result, skipped = cross_family_runs(
        default_sources(sources, reading), reading, config, family_rule=family_rule, processes=processes,
        cache=None if cache is None else Path(cache),
    )
    say(json.dumps(cross_family_json(result, skipped), indent=2) if as_json else cross_family_text(result, skipped, in_flags))
    return 1 if skipped else 0


def _check_clocks(drawn: Sequence[tuple[str, Any]]) -> None:
    """Refuse a time axis that some run has no clock for, naming those runs."""
    from tracker_plugin.report.plot_compare import clockless
    from tracker_plugin.report.tables import printable

    missing = clockless(drawn)
    if missing:
        names = ", ".join(printable(name) for name in missing)
        raise DataError(
            f"--x time: no clock in the log of {len(missing)} of {len(drawn)} runs ({names}); "
            "they cannot be plotted against time (plot against tokens: --x tokens)"
        )


def _check_shares(flag: str, values: tuple[float, ...], *, one_allowed: bool) -> None:
    """Shares of the final tokens are in (0, 1]; a cut at all of them (1) leaves nothing to forecast."""
    if not all(0 < v <= 1 for v in values) or (not one_allowed and 1.0 in values):
        raise click.UsageError(f"{flag} takes shares of the final tokens, between 0 and 1; got {list(values)}")


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@click.option("--json", "fmt", flag_value="json", help="Print the comparison as JSON.")
@click.option("--csv", "fmt", flag_value="csv", help="Print the comparison as CSV (safe to open in a spreadsheet).")
@click.option("--markdown", "fmt", flag_value="markdown", help="Print the comparison as Markdown tables.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), help="Write an overlay plot of all runs: PNG, PDF or SVG, as its extension says.")
@click.option(
    "--sort",
    "sort",
    type=click.Choice(("tokens", "hours")),
    default="tokens",
    show_default=True,
    help="Order each target's runs by tokens to reach it, or by wall-clock hours left.",
)
@plot_x_option("The plot's x axis: tokens (log scale) or time (each run on hours since its own first logged row; "
               "every run must log a clock).")
def compare(
    sources: tuple[str, ...], fmt: str | None, plot_path: str | None, sort: str, plot_x: str, **options: Any
) -> int:
    """Compare runs on the token axis: which reaches each target first, and by how much.

    SOURCES are CSV files or directories, MLflow experiments or runs, W&B projects or
    runs (with --filter, --state, --tag). For each target the table lists run, batch,
    status, tokens, steps, interval and tokens relative to the best run, sorted by tokens.
    Exit code 1 if a run could not be analysed.
    """
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.jobs.compare import compare_runs
    from tracker_plugin.report.compare import render_csv, render_json, render_markdown, render_text

    config = make_config(options)
    check_plot_path(plot_path)
    reading = make_source_options(options)
    comparison = compare_runs(default_sources(sources, reading), reading, config, sort)
    rows = comparison.rows
    drawn = [(c.name, c.analysis) for c in comparison.runs if c.analysis is not None]
    if plot_path and plot_x == "time":
        _check_clocks(drawn)  # before the table: a refused plot is the whole answer
    if fmt == "json":
        say(json.dumps(render_json(rows), indent=2))
    elif fmt == "csv":
        say(render_csv(rows), nl=False)
    elif fmt == "markdown":
        say(render_markdown(rows, in_flags))
    else:
        say(render_text(rows))
    if plot_path:
        from tracker_plugin.report.plot_compare import plot_comparison

        left_out = [c.name for c in comparison.runs if c.analysis is None]
        write_plot(plot_path, lambda: plot_comparison(drawn, plot_path, left_out, x=plot_x))
    say_failures([(c.name, c.ref, c.error) for c in comparison.runs if c.analysis is None], len(comparison.runs))
    return 1 if comparison.failed else 0


@cli.command()
@click.argument("sources", nargs=-1)
@analysis_options
@source_options
@tracker_options
@click.option(
    "--every",
    type=NUMBERS["every"],
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
@fanout_options
@plot_option
@series_option
@click.option("--json", "as_json", is_flag=True, help="Print the final summary as JSON.")
def watch(
    sources: tuple[str, ...], every: float, max_cycles: int | None, plot: bool, series: bool, as_json: bool,
    **options: Any,
) -> int:
    """Re-annotate runs every few minutes until they have all finished.

    Each pass reconnects to the tracker, lists the runs again and annotates those that
    moved on since the last pass; a run that finishes gets its final annotation, and the
    command then stops by itself (or after --max-cycles passes). One line per pass goes
    to stderr; the last pass's summary table to stdout. Exit code 1 if the last pass had
    a failed run.
    """
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.jobs.runner import outcome_rows
    from tracker_plugin.jobs.watch import Pass, watch_runs
    from tracker_plugin.report.runs import runs_json, runs_table

    config = make_config(options)
    reading = make_source_options(options)
    last: Pass | None = None
    specs = default_sources(sources, reading)
    with executor_of(options, reading.workers) as executor:  # one cluster for every pass
        for last in watch_runs(specs, reading, config, every=every, max_cycles=max_cycles, executor=executor,
                               plot=plot, series=series):
            say(f"pass {last.number}: {last.summary()}", err=True)
    assert last is not None  # a watch makes at least one pass
    if last.final:
        say("every run has finished and carries its final annotation", err=True)
    else:
        say(f"stopping after {last.number} passes (--max-cycles)", err=True)
    rows = outcome_rows(last.outcomes)
    say(json.dumps(runs_json(rows), indent=2) if as_json else runs_table(rows, in_flags))
    say_failures([(o.run.name, o.run.ref, o.error) for o in last.failed], len(last.outcomes))
    return 1 if last.failed else 0

