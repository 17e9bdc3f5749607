"""The exceptions tracker_plugin raises.

Everything the package raises on purpose derives from :class:`TrackerPluginError`, so a
caller can catch one class. The tree::

    TrackerPluginError
    ├── ConfigError            a bad argument or option (also a ValueError)
    ├── DataError              a run's data cannot be analysed: names run, column, problem
    ├── SourceError            a tracker could not be read or written
    │   ├── RunNotFound        no such run, experiment or file
    │   ├── AuthError          the tracker refused the credentials
    │   └── TrackerUnavailable the tracker did not answer (network, server down, 5xx)
    └── MissingDependency      an optional extra is not installed (also an ImportError)

The command line turns any of these into a one-line message and a non-zero exit code.
Every message, and the run it names, is redacted when the error is made
(:func:`tracker_plugin.redact.redact`): no credential in a tracking URI, an echoed
request or a secret environment variable ever reaches one.
"""

from __future__ import annotations

import re

from tracker_plugin.redact import redact

__all__ = [
    "AuthError",
    "ConfigError",
    "DataError",
    "MissingDependency",
    "RunNotFound",
    "SourceError",
    "TrackerPluginError",
    "TrackerUnavailable",
    "one_line",
]


class TrackerPluginError(Exception):
    """Base class of every error the package raises on purpose.

    ``run`` names the run the error is about, when there is one.
    """

    def __init__(self, message: str, *, run: str | None = None) -> None:
        message = redact(message)
        run = redact(run) if run else run
        self.run = run
        self.problem = message
        super().__init__(one_line(f"{run}: {message}" if run else message))


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (a run string holding a newline): an
    error is one line."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ConfigError(TrackerPluginError, ValueError):
    """An argument or option is invalid (a negative window, a target that is not a number)."""


class DataError(TrackerPluginError):
    """A run's data cannot be analysed.

    The message names the run, the column and the problem, for example
    ``runs/a.csv: column 'tokens': decreases at step 1200 (5.2e9 -> 5.1e9)``.
    """

    def __init__(self, problem: str, *, run: str | None = None, column: str | None = None) -> None:
        self.column = column
        message = f"column '{column}': {problem}" if column else problem
        super().__init__(message, run=run)


class SourceError(TrackerPluginError):
    """A tracker could not be read from or written to."""


class RunNotFound(SourceError):
    """The run, experiment, project or file does not exist."""


class AuthError(SourceError):
    """The tracker refused the credentials (HTTP 401/403)."""


class TrackerUnavailable(SourceError):
    """The tracker did not answer: connection refused, timeouts, or server errors after retries."""


class MissingDependency(TrackerPluginError, ImportError):
    """An optional dependency is missing; the message says which extra to install.

    ``reason`` says what is missing when the package is installed but lacks a part (the
    client-only ``mlflow-skinny`` has no SQL stores); the message then names the package
    to install as well as the extra.
    """

    def __init__(self, package: str, extra: str, *, reason: str | None = None, run: str | None = None) -> None:
        install = f"pip install 'tracker_plugin[{extra}]'"
        if reason is None:
            message = f"{package} is not installed; install it with: {install}"
        else:
            message = f"{reason}; install it with: {install} (or: pip install {package})"
        super().__init__(message, run=run)
