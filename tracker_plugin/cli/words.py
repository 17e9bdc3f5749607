"""The settings the core's messages name, said as the flags that set them.

The analysis names a setting by its own name, so that a message reads right wherever the
analysis runs: an ``AnalysisConfig`` field (``fit_start_step``, ``batch_schedule``), a
``Columns`` field (``columns.loss``), ``batch_size`` or ``lr_spec``. The command line prints
the same messages with its flags instead (``--fit-start-step``, ``--loss-col``), so they
still name the flag that fixes the problem. The JSON documents keep the core's words.

A setting is rewritten only as a word of its own: not inside a longer name
(``batch_size_in_tokens``), a path (``runs/batch_size.csv``) or quotes (a column
``'batch_size'``). Settings named by a plain word (``interval``, ``clock``) are left as
they are: the word may be meant as a word.
"""

from __future__ import annotations

import re
from dataclasses import fields
from functools import cache

import click

from tracker_plugin.cli.group import cli
from tracker_plugin.frame.history import Columns

__all__ = ["in_flags", "setting_flags"]

# Settings set by more than the option of the same name.
_SPELLED_OUT = {
    "lr_schedule": "--lr-schedule or --lr-spec",
    # ``throughput`` alone is a plain word; named beside step_time it is the setting.
    "step_time (seconds per step) or throughput": "--step-time (seconds per step) or --throughput",
}
_SNAKE = re.compile(r"^[a-z]+(_[a-z]+)+$")


@cache
def setting_flags() -> dict[str, str]:
    """Each setting's name in the core's words -> the flag (or flags) that set it (the
    options of every command :mod:`.commands` registers on the group)."""
    flags: dict[str, str] = {}
    for command in cli.commands.values():
        for param in command.params:
            if isinstance(param, click.Option) and param.name and _SNAKE.match(param.name):
                flags[param.name] = max(param.opts, key=len)
    for column in fields(Columns):
        flags[f"columns.{column.name}"] = flags[f"{column.name}_col"]
    return flags | _SPELLED_OUT


@cache
def _pattern() -> re.Pattern[str]:
    names = sorted(setting_flags(), key=len, reverse=True)
    # Not after a letter, a dot, a quote, a slash or a dash; not before them or a colon
    # (a run named like a setting, ``batch_size: ...``).
    return re.compile(r"(?<![\w.'\"/-])(" + "|".join(map(re.escape, names)) + r")(?![\w'\"/:-]|\.\w)")


def in_flags(text: str) -> str:
    """``text`` with each setting it names said as its flag.

    >>> in_flags("step assumes the batch stays 524,288; pass batch_schedule")
    'step assumes the batch stays 524,288; pass --batch-schedule'
    """
    return _pattern().sub(lambda match: setting_flags()[match.group(1)], text)
