"""The ``tracker-plugin`` group that every command joins, and the config file it finds.

The commands register themselves on :func:`cli` (:mod:`.commands`); what reads every
command's options (:mod:`.words`) reads them here, below the commands that use it.
"""

from __future__ import annotations

from pathlib import Path

import click

from tracker_plugin._version import __version__
from tracker_plugin.cli.config import find_config
from tracker_plugin.cli.help import HELP_SETTINGS, TrackerGroup

__all__ = ["CONFIG_KEY", "cli"]


@click.group(cls=TrackerGroup, context_settings=HELP_SETTINGS)
@click.version_option(__version__, prog_name="tracker-plugin")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """When does a training run reach a target loss?

    Reads a run's loss history from a CSV file, MLflow or Weights & Biases, smooths it
    over a fixed number of tokens, finds where it crossed each target and forecasts when
    it will cross the rest.

    Settings can live in a config file: [tool.tracker-plugin] in pyproject.toml, or a
    tracker-plugin.toml, in this folder or one above it (keys are the options' long
    names); environment variables win over it, and flags over both.
    'tracker-plugin config' shows what is in force.
    """
    found = find_config(Path.cwd(), {name: c for name, c in cli.commands.items() if name != "config"})
    ctx.meta[CONFIG_KEY] = found
    if found is not None:
        ctx.default_map = found.defaults


CONFIG_KEY = "tracker_plugin.config_file"  # ctx.meta key: the config file in force, or None
