"""The config file, found as this ecosystem's tools find theirs.

``tracker-plugin.toml``, or a ``pyproject.toml`` with a ``[tool.tracker-plugin]`` table,
in the working directory or the nearest folder above it that has one (in a folder, the
``tracker-plugin.toml`` wins). Its keys are the options' long names::

    [tool.tracker-plugin]
    target = [3.3, 3.1]
    loss-col = "val_loss"

    [tool.tracker-plugin.annotate]    # one command's own; over the keys above
    workers = 8

(in ``tracker-plugin.toml`` the same keys sit at the top, and ``[annotate]`` holds a
command's own). What it says becomes click's ``default_map``, so click's own order
holds: a flag over an environment variable (``MLFLOW_TRACKING_URI``, ``WANDB_ENTITY``,
...) over the file over the built-in default. Every key and value is checked when the
file is read: an unknown key or a value of the wrong type is one line naming the file,
the key and the problem, and exit code 2.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

import click

from tracker_plugin.cli.numbers import Number

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, from PyPI
    import tomli as tomllib

__all__ = ["FILE_NAME", "ConfigFile", "ConfigFileError", "Setting", "find_config", "in_force", "key_of"]

FILE_NAME = "tracker-plugin.toml"
_PYPROJECT = "pyproject.toml"
_TOOL = "tracker-plugin"  # [tool.tracker-plugin]
_NUMBER_TYPES = (Number, click.types.IntParamType, click.types.FloatParamType)

CommandOptions = dict[str, dict[str, Any]]  # command -> parameter name -> value


class ConfigFileError(click.ClickException):
    """The config file cannot be used: a usage error (exit code 2) naming file, key and problem."""

    exit_code = 2


@dataclass(frozen=True)
class ConfigFile:
    """A config file's settings, checked against the commands' options."""

    path: Path
    table: str  # the table the settings are in: "[tool.tracker-plugin]", or "" at the top
    # command -> parameter name -> value, as click's default_map takes them
    defaults: CommandOptions = field(default_factory=dict)
    # (command, parameter name) -> where the value was set: the file and its table
    origins: dict[tuple[str, str], str] = field(default_factory=dict)


def key_of(param: click.Parameter) -> str:
    """An option's name in a config file: its long name without the dashes (``loss-col``)."""
    return max(param.opts, key=len).lstrip("-")


def find_config(start: Path, commands: Mapping[str, click.Command]) -> ConfigFile | None:
    """The config file nearest ``start`` (the folder or one above it), read and checked."""
    for folder in (start, *start.parents):
        own = folder / FILE_NAME
        if own.is_file():
            return _read(own, _load(own), "", commands)
        pyproject = folder / _PYPROJECT
        if pyproject.is_file():
            tool = _load(pyproject).get("tool", {})
            if isinstance(tool, dict) and _TOOL in tool:
                return _read(pyproject, tool[_TOOL], f"[tool.{_TOOL}]", commands)
    return None


def _load(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _read(path: Path, settings: Any, table: str, commands: Mapping[str, click.Command]) -> ConfigFile:
    """Every key of ``settings`` placed in the commands that take it, each value checked."""
    where = f"{path} {table}".rstrip()
    if not isinstance(settings, dict):
        raise ConfigFileError(f"{where}: is not a table of settings")
    found = ConfigFile(path, table)
    shared = {k: v for k, v in settings.items() if not isinstance(v, dict)}
    _place(found, where, shared, commands, own=False)
    for name, own in settings.items():
        if not isinstance(own, dict):
            continue
        if name not in commands:
            raise ConfigFileError(
                f"{where}: unknown table '{name}' (a command's own table is one of: {', '.join(sorted(commands))})"
            )
        inner = f"{path} [{f'tool.{_TOOL}.' if table else ''}{name}]"
        _place(found, inner, own, {name: commands[name]}, own=True)
    return found


def _place(
    found: ConfigFile, where: str, settings: Mapping[str, Any], commands: Mapping[str, click.Command], *, own: bool
) -> None:
    """Put each setting into the defaults of every command in ``commands`` that takes it."""
    for key, value in settings.items():
        params = {name: _param(command, key) for name, command in commands.items()}
        taking = {name: param for name, param in params.items() if param is not None}
        if not taking:
            raise ConfigFileError(f"{where}: {_unknown(key, commands, own=own)}")
        for name, param in taking.items():
            try:
                checked = _value(param, value)
            except ValueError as exc:
                raise ConfigFileError(f"{where}: {key}: {exc}") from None
            if checked is None:  # a format flag set to false: nothing to set
                continue
            assert param.name is not None
            # The shared keys are placed first: a command's own table, placed after, wins.
            found.defaults.setdefault(name, {})[param.name] = checked
            found.origins[(name, param.name)] = where


def _param(command: click.Command, key: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value and key_of(param) == key:
            return param
    return None


def _unknown(key: str, commands: Mapping[str, click.Command], *, own: bool) -> str:
    keys = sorted({key_of(p) for c in commands.values() for p in c.params if isinstance(p, click.Option) and p.expose_value})
    close = difflib.get_close_matches(key.replace("_", "-"), keys, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    whose = f"{next(iter(commands))} has no option" if own else "no command has an option"
    return f"unknown key '{key}': {whose} --{key}{hint}"


def _value(param: click.Option, value: Any) -> Any:
    """The value as click's default_map takes it, or ValueError saying what is wrong."""
    if param.is_flag:
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not true or false")
        if isinstance(param.flag_value, str):  # one of several formats (--json, --csv)
            return param.flag_value if value else None
        return value
    if param.multiple:
        return [_scalar(param, item) for item in (value if isinstance(value, list) else [value])]
    if isinstance(value, list):
        raise ValueError(f"{value!r} is a list; --{key_of(param)} takes one value")
    return _scalar(param, value)


def _scalar(param: click.Option, value: Any) -> Any:
    if isinstance(param.type, _NUMBER_TYPES):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a number")
    elif isinstance(value, (datetime, date, time)):
        value = value.isoformat()  # a TOML date for --deadline or --created-after
    elif not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    try:
        param.type.convert(value, param, None)
    except click.BadParameter as exc:
        raise ValueError(exc.message) from None
    return value


@dataclass(frozen=True)
class Setting:
    """One option's value in force, and where it came from."""

    key: str  # the option's long name, as the config file spells it
    value: Any  # None: not set
    origin: str  # the file and table, "env NAME", or "default"


def in_force(ctx: click.Context, found: ConfigFile | None) -> list[Setting]:
    """Each option of ``ctx``'s command as parsed there, with where its value came from.

    ``ctx`` is made with the group's context as its parent (which holds the file's
    defaults) and no arguments, so every value is the file's, the environment's or the
    built-in default.
    """
    settings: dict[str, Setting] = {}
    for param in ctx.command.params:
        if not (isinstance(param, click.Option) and param.expose_value and param.name):
            continue
        value = ctx.params.get(param.name)
        origin = _origin(ctx, param, found)
        if isinstance(param.flag_value, str):  # one of several formats: set if it is the one
            value = value == param.flag_value
            origin = origin if value else "default"
        settings[key_of(param)] = Setting(key_of(param), _plain(value), origin)
    return list(settings.values())


def _origin(ctx: click.Context, param: click.Option, found: ConfigFile | None) -> str:
    assert param.name is not None and ctx.info_name is not None
    source = ctx.get_parameter_source(param.name)
    if source is click.core.ParameterSource.ENVIRONMENT:
        return f"env {param.envvar}"
    if source is click.core.ParameterSource.DEFAULT_MAP and found is not None:
        return found.origins.get((ctx.info_name, param.name), str(found.path))
    return "default"


def _plain(value: Any) -> Any:
    """A value as JSON holds it: a tuple as a list."""
    return list(value) if isinstance(value, tuple) else value
