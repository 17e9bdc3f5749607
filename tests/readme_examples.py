"""The documentation's examples: run each, compare with tolerance, or write them anew.

The pages are ``README.md`` and every ``docs/*.md``. An example is a ```console (or
```text) fence whose first line is ``$ tracker-plugin ...`` or ``$ python examples/...``
and whose other lines are what the command prints. The tests compare an example's words
exactly and its numbers to a relative tolerance, since the last digits of a fit can differ
from one CPU to another. After a change that moves the numbers, write the examples anew:

    .venv/bin/python tests/readme_examples.py --write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RTOL = 1e-3
# A number as the report prints it: thousands separators, a sign, a decimal part, an exponent.
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BLOCK = re.compile(r"```(?:console|text)\n\$ ((?:tracker-plugin|python examples/)[^\n]*)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Example:
    command: str
    expected: str
    span: tuple[int, int]  # of the printed lines, in the page's text


def pages() -> list[Path]:
    """The pages whose examples are checked: the README, then every docs/*.md."""
    return [README, *sorted(DOCS.glob("*.md"))]


def examples(text: str) -> list[Example]:
    """The console blocks that print something (a bare command is only an illustration)."""
    return [Example(m.group(1), m.group(2), m.span(2)) for m in _BLOCK.finditer(text) if m.group(2).strip()]


def all_examples() -> list[tuple[Path, Example]]:
    """Every page's examples, each with its page."""
    return [(page, example) for page in pages() for example in examples(page.read_text())]


def run(command: str) -> str:
    """What ``command`` prints, run from the repository's root: ``tracker-plugin`` in-process,
    ``python examples/...`` as its own process. Histories an example reads from a tracker are
    cached in a temporary folder, never in the user's cache."""
    with tempfile.TemporaryDirectory() as cache, _env(TRACKER_PLUGIN_CACHE_DIR=cache):
        if command.startswith("python "):  # this checkout's package, whatever the venv has installed
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            done = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True,
                                  text=True, timeout=600, check=False, env=env)
            if done.returncode != 0:
                raise AssertionError(f"{command!r} exited {done.returncode}: {done.stderr[-2000:]}")
            return done.stdout
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
        return f"the text differs:\n--- the docs\n{expected.strip()}\n--- printed\n{actual.strip()}"
    for a, b in zip(NUMBER.findall(expected), NUMBER.findall(actual)):
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        if not math.isclose(x, y, rel_tol=rtol, abs_tol=rtol * 1e-3):
            return f"{a} in the docs, {b} printed (beyond a relative {rtol:g})"
    return None


@contextlib.contextmanager
def _cwd(path: Path):
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _env(**values: str):
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def write() -> int:
    """Run every example and write what it prints into its page."""
    for page in pages():
        text = page.read_text()
        for example in reversed(examples(text)):
            start, end = example.span
            text = text[:start] + run(example.command).rstrip("\n") + "\n" + text[end:]
        page.write_text(text)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the examples' output into their pages")
    args = parser.parse_args(argv)
    if args.write:
        return write()
    failures = [f"{page.relative_to(ROOT)}: {e.command}: {why}" for page, e in all_examples()
                if (why := mismatch(e.expected, run(e.command)))]
    print("\n\n".join(failures) or "every example in the README and docs/ prints what it shows")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's package, whatever the venv has installed
    sys.exit(main(sys.argv[1:]))
