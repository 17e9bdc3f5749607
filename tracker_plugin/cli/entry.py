"""Running the command line: exit codes, one-line errors, the console script.

Errors the user can fix (bad input, a missing run, a tracker refusing a request) end in
one line on stderr and exit code 2; ``TRACKER_PLUGIN_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from tracker_plugin.cli.argv import expand_multi_value
from tracker_plugin.cli.commands import cli
from tracker_plugin.cli.output import say
from tracker_plugin.cli.plan_command import plan
from tracker_plugin.errors import ConfigError, TrackerPluginError, one_line

__all__ = ["EXIT_BAD_INPUT", "entry_point", "main"]

EXIT_BAD_INPUT = 2

cli.add_command(plan)  # the plan command, of its own module, on the one group


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code instead of raising SystemExit."""
    args = expand_multi_value(sys.argv[1:] if argv is None else list(argv))
    try:
        result = cli.main(args=args, prog_name="tracker-plugin", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort as exc:
        if isinstance(exc.__cause__, EOFError):
            # Click takes any EOFError for a prompt's end of input; no command prompts, so
            # this is a file that ended early: an error, not an interrupt (130 is SIGINT's).
            say(f"error: a file ended early ({exc.__cause__ or 'end of file'})", err=True)
            return 1
        say("aborted", err=True)
        return 130
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        say(f"error: {exc.format_message()}{hint}", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as exc:  # a config file that cannot be used: it names itself
        say(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except (TrackerPluginError, ConfigError) as exc:
        if os.environ.get("TRACKER_PLUGIN_DEBUG"):
            raise
        say(f"error: {_message(exc)}", err=True)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) else 0


def _message(exc: TrackerPluginError) -> str:
    """The error as the command line says it: the settings it names as flags, the run as given."""
    from tracker_plugin.cli.words import in_flags  # it reads every command's options: only on an error

    return one_line(f"{exc.run}: {in_flags(exc.problem)}" if exc.run else in_flags(str(exc)))


def entry_point() -> None:
    """The console script."""
    sys.exit(main())
