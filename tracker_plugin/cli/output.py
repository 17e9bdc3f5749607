"""What the command line prints: every line to stdout or stderr goes through :func:`say`.

One place to print means one place to redact: a tracking URI's password, an API key a
server echoed back, a secret environment variable never reach a terminal, a cron mail or
a CI log (see :mod:`tracker_plugin.redact`).
"""

from __future__ import annotations

import click

from tracker_plugin.redact import redact

__all__ = ["say"]


def say(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print ``text`` (to stderr with ``err``), with every credential in it cut."""
    click.echo(redact(text), err=err, nl=nl)
