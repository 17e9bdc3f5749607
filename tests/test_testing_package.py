"""What ``tracker_plugin.testing`` ships: the runs with a known answer, and no test doubles.

The package is built into a wheel from a copy of this checkout (as ``pip install .``
builds it), and the wheel's files are listed: the project's own servers, loggers and
trainers (``tests/doubles``) are not among them. The documented example of
``tracker_plugin.testing`` (docs/python.md) runs and its assertions hold.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tracker_plugin as tp
import tracker_plugin.testing

ROOT = Path(__file__).resolve().parents[1]
DOUBLES = sorted(p.stem for p in (ROOT / "tests" / "doubles").glob("*.py") if p.stem != "__init__")
# What the doubles define, by names nothing else in the package uses.
DEFINED = ("WandbServer", "FakeRun", "MlflowServer", "free_port", "log_csv", "log_frame", "log_run",
           "log_offline_runs", "offline_env", "train_hf", "train_lightning")


def test_the_doubles_are_what_the_tests_use_and_not_in_the_package():
    assert {"wandb_server", "mlflow_server", "mlflow_runs", "wandb_offline_runs", "tiny_trainers"} <= set(DOUBLES)
    doubles = "\n".join((ROOT / "tests" / "doubles" / f"{stem}.py").read_text() for stem in DOUBLES)
    assert all(re.search(rf"^(class|def) {name}\b", doubles, re.M) for name in DEFINED)
    shipped = {p.stem for p in (ROOT / "tracker_plugin" / "testing").glob("*.py")}
    assert shipped == {"__init__", "synthetic"}
    assert "for your own tests" in (tracker_plugin.testing.__doc__ or "").lower()


def test_pip_install_builds_a_wheel_without_any_test_double(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT / "tracker_plugin", source / "tracker_plugin", ignore=shutil.ignore_patterns("__pycache__"))
    # The doubles sit beside the package in the copy too: a packaging rule that took them
    # would show here.
    shutil.copytree(ROOT / "tests", source / "tests", ignore=shutil.ignore_patterns("__pycache__", "data"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "wheel"), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("tracker_plugin-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        code = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    assert "tracker_plugin/testing/synthetic.py" in names and "tracker_plugin/cli/__init__.py" in names
    assert not [n for n in names if n.startswith("tests/")], names
    assert sorted(n for n in names if n.startswith("tracker_plugin/testing/")) == [
        "tracker_plugin/testing/__init__.py", "tracker_plugin/testing/synthetic.py"]
    for name in DEFINED:  # no double is defined anywhere in the package, under any file name
        assert not [n for n, text in code.items() if re.search(rf"^(class|def) {name}\b", text, re.M)], name


def test_the_documented_example_of_runs_with_a_known_answer_holds():
    page = (ROOT / "docs" / "python.md").read_text()
    section = page[page.index("## Runs with a known answer") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/python.md", "exec"), {"tp": tp})
