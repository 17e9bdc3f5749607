"""The lr-annealing law's momentum term, computed drop to drop, equals its definition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracker_plugin.core.clock import DropCells
from tracker_plugin.core.models.annealing import MOMENTUM_DECAY, _anneal

from .conftest import examples

clocks = st.lists(st.floats(0, 20_000, allow_nan=False), min_size=1, max_size=40)
drops = st.lists(st.tuples(st.floats(0, 20_000, allow_nan=False), st.floats(0, 0.2)), max_size=15)


def _by_definition(clock: np.ndarray, cells: DropCells) -> np.ndarray:
    elapsed = clock[:, None] - cells.clock[None, :]
    response = np.where(elapsed > 0, -np.expm1(np.log(MOMENTUM_DECAY) * np.maximum(elapsed, 0.0)), 0.0)
    return response @ cells.size


@settings(max_examples=examples(300), deadline=None)
@given(clocks, drops)
def test_recurrence_equals_the_sum_over_drops(clock, drop_list):
    clock = np.array(clock)
    at = np.array([d[0] for d in drop_list])
    size = np.array([d[1] for d in drop_list])
    cells = DropCells(size, at, at, np.ones(len(at)))
    expected = _by_definition(clock, cells) if len(at) else np.zeros(len(clock))
    np.testing.assert_allclose(_anneal(np.zeros(1), clock, clock, cells), expected, rtol=1e-9, atol=1e-12)


def test_a_clock_at_a_drop_has_not_felt_it_yet():
    cells = DropCells(np.array([0.1, 0.2]), np.array([100.0, 200.0]), np.array([100.0, 200.0]), np.ones(2))
    got = _anneal(np.zeros(1), np.array([100.0, 150.0, 200.0]), np.zeros(3), cells)
    assert got[0] == 0.0
    assert got[1] > 0 and np.isclose(got[2], _by_definition(np.array([200.0]), cells)[0])
