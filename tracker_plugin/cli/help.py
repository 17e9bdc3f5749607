"""``--help`` in groups, the common options first; ``--help-all`` lists every option.

Each command takes some fifty options. ``--help`` shows the ones most runs need, under
the group they belong to (targets, source, columns, forecast, output, tracker), and says
how many more ``--help-all`` shows. Where an option belongs is written once, in
:data:`PLACES`, by its parameter name; a test holds every option of every command to
having a place.
"""

from __future__ import annotations

from typing import Any

import click

__all__ = ["GROUPS", "HELP_SETTINGS", "PLACES", "GroupedCommand", "TrackerGroup", "place_of"]

HELP_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# The groups in the order --help lists them; a command's own options come first.
GROUPS = ("Command", "Targets", "Source", "Columns", "Forecast", "Output", "Tracker", "General")

# parameter name -> (group, shown by the short --help)
PLACES: dict[str, tuple[str, bool]] = {
    # what to look for
    "targets": ("Targets", True),
    "deadline": ("Targets", True),
    "ema_token_window": ("Targets", True),
    "ema_steps": ("Targets", False),
    "interval": ("Targets", False),
    # which runs
    "experiment_ids": ("Source", True),
    "entity": ("Source", True),
    "project": ("Source", True),
    "filter_": ("Source", True),
    "states": ("Source", True),
    "tags": ("Source", False),
    "created_after": ("Source", False),
    # how a run is read
    "loss_col": ("Columns", True),
    "tokens_col": ("Columns", True),
    "batch_size": ("Columns", True),
    "step_col": ("Columns", False),
    "batch_col": ("Columns", False),
    "lr_col": ("Columns", False),
    "time_col": ("Columns", False),
    "seq_len": ("Columns", False),
    "world_size": ("Columns", False),
    "batch_params": ("Columns", False),
    # the forecast
    "model": ("Forecast", True),
    "lr_spec": ("Forecast", True),
    "lr_schedule_file": ("Forecast", True),
    "planned_total": ("Forecast", True),
    "batch_schedule": ("Forecast", True),
    "step_time": ("Forecast", True),
    "throughput": ("Forecast", True),
    "clock": ("Forecast", False),
    "anneal_gain": ("Forecast", False),
    "fit_start_step": ("Forecast", False),
    "fit_last_stage": ("Forecast", False),
    "extrapolation_warn_factor": ("Forecast", False),
    "stability_sweep": ("Forecast", False),
    "sweep_step": ("Forecast", False),
    "sweep_min_window": ("Forecast", False),
    "convergence_tol": ("Forecast", False),
    "count_pauses": ("Forecast", False),
    "siblings": ("Forecast", True),
    # what is printed or drawn
    "as_json": ("Output", True),
    "fmt": ("Output", True),
    "plot_path": ("Output", True),
    "plot_x": ("Output", False),
    "plot": ("Output", False),
    "sort": ("Output", False),
    # the tracker: where it is, how it is read, what is written back
    "tracking_uri": ("Tracker", True),
    "force": ("Tracker", True),
    "dry_run": ("Tracker", True),
    "series": ("Tracker", False),
    "workers": ("Tracker", False),
    "executor": ("Tracker", False),
    "dask_address": ("Tracker", False),
    "cache_dir": ("Tracker", False),
    "no_cache": ("Tracker", False),
    # a command's own
    "fit_fractions": ("Command", True),
    "target_quantiles": ("Command", True),
    "models": ("Command", True),
    "plan": ("Command", False),
    "cross_family": ("Command", True),
    "family_rule": ("Command", False),
    "processes": ("Command", False),
    "cases_cache": ("Command", False),
    "every": ("Command", True),
    "compare": ("Command", True),
    "max_cycles": ("Command", True),
    # help and version
    "help": ("General", True),
    "help_all": ("General", True),
}

_FULL = "tracker_plugin.help_all"  # ctx.meta key: list every option


def place_of(param: click.Parameter) -> tuple[str, bool]:
    """The group an option is listed in, and whether the short --help shows it."""
    return PLACES.get(param.name or "", ("General", True))


def _show_all(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[_FULL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


class GroupedCommand(click.Command):
    """A command whose help lists its options by group, and has ``--help-all``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--help-all"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_show_all,
                help="Show every option and exit.",
            )
        )

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        full = bool(ctx.meta.get(_FULL))
        sections: dict[str, list[tuple[bool, tuple[str, str]]]] = {}
        left_out = 0
        for param in self.get_params(ctx):
            # Click 8.2+ gives arguments a help record too; the usage line already says them.
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is None:
                continue
            group, common = place_of(param)
            if not (full or common):
                left_out += 1
                continue
            sections.setdefault(group, []).append((common, record))
        for group in GROUPS:
            rows = sections.get(group)
            if rows:
                title = f"{self.name.capitalize()} options" if group == "Command" and self.name else f"{group} options"
                with formatter.section(title):
                    # The common ones first; sorted() keeps the order within each kind.
                    formatter.write_dl([record for _, record in sorted(rows, key=lambda row: not row[0])])
        if left_out:
            formatter.write_paragraph()
            formatter.write_text(f"{left_out} more options: see --help-all.")


class TrackerGroup(click.Group):
    """The ``tracker-plugin`` group: its commands list their options in groups."""

    command_class = GroupedCommand
