"""The command line as typed, made into what click reads: several values after one flag."""

from __future__ import annotations

from collections.abc import Sequence

from tracker_plugin.cli.options import MODELS

__all__ = ["expand_multi_value"]

# Options that take several values after one flag, as the original script's argparse
# ``nargs="+"`` did: ``--target 3.6 3.3``. Each maps to a test for its values.
_MULTI_VALUE = {
    "--target": "number",
    "-t": "number",
    "--batch-schedule": "pair",
    "--fit-fractions": "number",
    "--target-quantiles": "number",
    "--models": "model",
}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_pair(text: str) -> bool:
    return ":" in text and not text.startswith("-")


def _is_model(text: str) -> bool:
    return text in MODELS


_LOOKS_RIGHT = {"number": _is_number, "pair": _is_pair, "model": _is_model}


def expand_multi_value(argv: Sequence[str]) -> list[str]:
    """Rewrite ``--target 3.6 3.3`` as ``--target 3.6 --target 3.3`` for click.

    Values are taken while they look like values of that option, so a run name after
    the targets stays a run name.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        out.append(arg)
        i += 1
        kind = _MULTI_VALUE.get(arg)
        if kind is None or i >= len(argv):
            continue
        out.append(argv[i])  # the first value always belongs to the option
        i += 1
        looks_right = _LOOKS_RIGHT[kind]
        while i < len(argv) and looks_right(argv[i]):
            out += [arg, argv[i]]
            i += 1
    return out
