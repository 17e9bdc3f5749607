"""The ``tracker-plugin`` command: parse the options, call one job, print what it returns.

- :mod:`.argv`: several values after one flag (``--target 3.6 3.3``), as click reads them;
- :mod:`.options`: the options, and the settings and sources they give;
- :mod:`.group`: the command group, which finds the config file in force;
- :mod:`.commands`: the commands, each over one job of :mod:`tracker_plugin.jobs`;
- :mod:`.entry`: :func:`main`, exit codes and one-line errors, and the console script.
"""

from tracker_plugin.cli.argv import expand_multi_value
from tracker_plugin.cli.commands import cli
from tracker_plugin.cli.entry import EXIT_BAD_INPUT, entry_point, main

__all__ = ["EXIT_BAD_INPUT", "cli", "entry_point", "expand_multi_value", "main"]
