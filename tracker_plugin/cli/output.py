"""What the command line prints: every line to stdout or stderr goes through :func:`say`.

One place to print means one place to redact: a tracking URI's password, an API key a
server echoed back, a secret environment variable never reach a terminal, a cron mail or
a CI log (see :mod:`tracker_plugin.redact`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import click

from tracker_plugin.redact import redact

__all__ = ["check_plot_path", "say", "say_failures", "write_plot"]


def say(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print ``text`` (to stderr with ``err``), with every credential in it cut."""
    click.echo(redact(text), err=err, nl=nl)


def say_failures(failures: Sequence[tuple[str, str, str | None]], total: int) -> None:
    """The runs that failed, on stderr: each named, with its one-line reason in the flags'
    words. stdout keeps only the table, so a program can read it; the exit code says 1."""
    from tracker_plugin.cli.words import in_flags
    from tracker_plugin.report.tables import failure_lines

    worded = [(name, ref, in_flags(reason or "no reason given")) for name, ref, reason in failures]
    for line in failure_lines(worded, total):
        say(line, err=True)


def check_plot_path(path: str | None) -> None:
    """Refuse a plot the command could not write, before the analysis runs."""
    if not path:
        return
    from tracker_plugin.report.plot import plot_format

    try:
        plot_format(path)
    except ValueError as exc:
        raise click.UsageError(f"--plot {path}: {exc}") from None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise click.UsageError(f"--plot {path}: no such folder {folder}")


def write_plot(path: str, draw: Callable[[], None]) -> None:
    try:
        draw()
    except OSError as exc:
        raise click.UsageError(f"--plot {path}: cannot write it ({exc.strerror or exc})") from None
