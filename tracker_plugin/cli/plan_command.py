"""``tracker-plugin plan``: a run before it starts, forecast by its finished siblings' law."""

from __future__ import annotations

import json
from typing import Any

import click

from tracker_plugin.cli.help import GroupedCommand
from tracker_plugin.cli.options import (
    make_settings,
    make_source_options,
    plan_options,
    planned_lrs,
    source_options,
    tracker_options,
)
from tracker_plugin.cli.output import check_plot_path, say, write_plot

__all__ = ["plan"]


@click.command(cls=GroupedCommand)
@click.option("--siblings", "siblings", multiple=True, required=True, metavar="SOURCE",
              help="The finished runs of the planned run's configuration (any run string: CSVs or a folder, "
                   "mlflow:experiment/NAME, wandb:ENTITY/PROJECT, wandb-offline:DIR; repeatable).")
@plan_options
@source_options
@tracker_options
@click.option("--compare", is_flag=True,
              help="Compare the plans given (--lr-spec or --lr-schedule, repeated) on one budget: per target the "
                   "plan that reaches it first, and the plan that ends lowest.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of the report.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a plot of the predicted smoothed loss: PNG, PDF or SVG, as its extension says.")
def plan(siblings: tuple[str, ...], compare: bool, as_json: bool, plot_path: str | None, **options: Any) -> int:
    """Forecast a run that has not started, from the finished runs of its configuration.

    The runs --siblings names are read and the loss law they share is fitted (each sibling
    forecast from the others confirms it); the law on the planned lr and batch gives each
    target's tokens, steps and hours (at the siblings' pace, where they log a clock) with an
    interval and P(reached within plan), and the smoothed loss at the plan's end. Where the
    siblings share no law, it says why and exits 2.

    \b
    Examples:
      tracker-plugin plan --siblings runs/ --lr-spec cosine:warmup=2000,total=24000,final=0.1 \\
          --batch-size 524288 -t 3.3
      tracker-plugin plan --siblings mlflow:experiment/ladder --compare -t 3.3 \\
          --lr-spec cosine:warmup=2000,total=24000 --lr-spec wsd:warmup=2000,total=24000,decay=0.2
    """
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.core.analysis import AnalysisConfig
    from tracker_plugin.jobs.plan import plan_runs
    from tracker_plugin.report.plan_report import compare_json, compare_text, plan_json, plan_text

    plans = planned_lrs(options)
    if len(plans) > 1 and not compare:
        raise click.UsageError("several plans are given: add --compare to compare them, or give one")
    targets = tuple(options.pop("targets"))
    check_plot_path(plot_path)
    settings = make_settings(options)
    batch_schedule = settings.pop("batch_schedule")
    settings.pop("lr_schedule")
    config = AnalysisConfig(targets=targets, **settings)
    reading = make_source_options(options)
    batch = reading.read.batch_size
    if batch is None and batch_schedule is None:
        raise click.UsageError("give the planned run's batch: --batch-size TOKENS or --batch-schedule TOKENS:BATCH ...")
    planned = plan_runs(list(siblings), [schedule for _, schedule in plans], targets, batch=batch,
                        batch_schedule=batch_schedule, config=config, options=reading,
                        runs=[name for name, _ in plans])
    if plot_path:
        from tracker_plugin.report.plan_plot import plot_plans

        write_plot(plot_path, lambda: plot_plans(planned, plot_path))
    if compare:
        say(json.dumps(compare_json(planned), indent=2) if as_json else compare_text(planned, in_flags))
    else:
        say(json.dumps(plan_json(planned[0]), indent=2) if as_json else plan_text(planned[0], in_flags))
    return 0
