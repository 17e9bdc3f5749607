"""Every numeric option is checked as it is parsed: nan, inf, 0, a negative number or 1e300
where it makes no sense is one line naming the option and its range, and exit code 2,
before any run is read (the SOURCE here does not exist)."""

from __future__ import annotations

import pytest

from tracker_plugin.cli import main
from tracker_plugin.cli.numbers import NUMBERS
from tracker_plugin.report.timing import eta_text, iso_utc

# The command that has each option, and how it is spelled.
FLAGS = {
    "targets": ("analyze", "--target"),
    "planned_total": ("analyze", "--total-steps"),
    "fit_fractions": ("backtest", "--fit-fractions"),
    "target_quantiles": ("backtest", "--target-quantiles"),
    "every": ("watch", "--every"),
}
# Options for which 0 is a meaningful value (the first step, no gain, no minimum window).
ZERO_IS_VALID = {"fit_start_step", "anneal_gain", "sweep_min_window"}
ABSURD = ("nan", "inf", "-inf", "0", "-1", "1e300", "-1e300", "1e999")


def _flag(name: str) -> tuple[str, str]:
    return FLAGS.get(name, ("analyze", "--" + name.replace("_", "-")))


def _cases():
    for name in NUMBERS:
        for value in ABSURD:
            if value == "0" and name in ZERO_IS_VALID:
                continue
            yield pytest.param(name, value, id=f"{name}={value}")


def _run(capsys, command: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    target = () if command == "backtest" or "--target" in args else ("-t", "3.3")
    code = main([command, "no-such-run.csv", *target, *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("name", "value"), list(_cases()))
def test_an_absurd_number_is_one_line_naming_the_option_and_exit_2(capsys, name, value):
    command, flag = _flag(name)
    code, out, err = _run(capsys, command, flag, value)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"'{flag}'" in lines[0] and repr(value) in lines[0], lines[0]
    assert "not a finite number" in lines[0] or "not in the range" in lines[0]


def test_every_numeric_option_of_every_command_is_range_checked():
    from tracker_plugin.cli.commands import cli
    from tracker_plugin.cli.numbers import Number

    unchecked = []
    for command_name, command in cli.commands.items():
        for param in command.params:
            kind = getattr(param.type, "name", "")
            if kind in ("float", "integer", "float range", "integer range") and not isinstance(param.type, Number):
                # click's own bounded ints (--workers 1..64) reject 1e300 and nan as "not a valid integer"
                if kind == "integer range":
                    continue
                unchecked.append(f"{command_name} {param.name}")
    assert unchecked == []


@pytest.mark.parametrize("value", ["+nan", "+inf", "+0", "+-3", "+1e300", "nan", "1e300", "10000-01-01"])
def test_an_absurd_deadline_is_one_line_and_exit_2(capsys, value):
    code, out, err = _run(capsys, "analyze", "--deadline", value)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "'--deadline'" in err


def test_a_good_deadline_passes_the_parse(capsys):
    # Parsing succeeds; the SOURCE is then found missing.
    for value in ("+12", "2026-12-02T14:00", "2026-12-02T14:00Z"):
        code, _, err = _run(capsys, "analyze", "--deadline", value)
        assert code == 2 and "--deadline" not in err and "no-such-run.csv" in err


def test_a_time_past_the_calendar_is_said_not_raised():
    beyond = 1e13  # about the year 318,857
    assert iso_utc(beyond) is None and eta_text(beyond) == "after 9999"
    assert eta_text(1.7e9).startswith("2023-")
