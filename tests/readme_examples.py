"""The README's console examples: run each, compare with tolerance, or write them anew.

A console block is a ```console fence whose first line is ``$ tracker-plugin ...`` and
whose other lines are what the command prints. The tests compare a block's words exactly
and its numbers to a relative tolerance, since the last digits of a fit can differ from
one CPU to another. After a change that moves the numbers, write the blocks anew:

    .venv/bin/python tests/readme_examples.py --write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RTOL = 1e-3
# A number as the report prints it: thousands separators, a sign, a decimal part, an exponent.
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BLOCK = re.compile(r"```console\n\$ (tracker-plugin [^\n]*)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Example:
    command: str
    expected: str
    span: tuple[int, int]  # of the printed lines, in the README's text


def examples(text: str) -> list[Example]:
    """The console blocks that print something (a bare command is only an illustration)."""
    return [Example(m.group(1), m.group(2), m.span(2)) for m in _BLOCK.finditer(text) if m.group(2).strip()]


def run(command: str) -> str:
    """What ``command`` prints, run in-process from the repository's root."""
    from tracker_plugin.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), _cwd(ROOT):
        code = main(shlex.split(command)[1:])
    if code != 0:
        raise AssertionError(f"{command!r} exited {code}")
    return out.getvalue()


def mismatch(expected: str, actual: str, rtol: float = RTOL) -> str | None:
    """Why ``actual`` is not ``expected`` (words exact, numbers within ``rtol``), or None."""
    want, got = NUMBER.split(expected.strip()), NUMBER.split(actual.strip())
    if want != got:
        return f"the text differs:\n--- README\n{expected.strip()}\n--- printed\n{actual.strip()}"
    for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)):
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        if not math.isclose(x, y, rel_tol=rtol, abs_tol=rtol * 1e-3):
            return f"{a} in the README, {b} printed (beyond a relative {rtol:g})"
    return None


@contextlib.contextmanager
def _cwd(path: Path):
    import os

    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def write() -> int:
    """Run every console example and write what it prints into the README."""
    text = README.read_text()
    for example in reversed(examples(text)):
        start, end = example.span
        text = text[:start] + run(example.command).rstrip("\n") + "\n" + text[end:]
    README.write_text(text)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the examples' output into the README")
    args = parser.parse_args(argv)
    if args.write:
        return write()
    failures = [f"{e.command}: {why}" for e in examples(README.read_text()) if (why := mismatch(e.expected, run(e.command)))]
    print("\n\n".join(failures) or "every README example prints what it shows")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
