from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((DATA / "parity_golden.json").read_text())


# Generated cases per property-based suite (tests/test_hardening.py), reported at the end.
CASES: dict[str, int] = {"analyze": 0, "compare": 0, "frame": 0}


def pytest_terminal_summary(terminalreporter):
    if any(CASES.values()):
        total = sum(CASES.values())
        detail = ", ".join(f"{k} {v}" for k, v in CASES.items())
        terminalreporter.write_line(f"hardening: {total} generated cases ({detail}), none ended in a traceback")
