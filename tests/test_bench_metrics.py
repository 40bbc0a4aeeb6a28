"""mk.bench.metrics against hand-computed values."""

import math

import pytest

from mk.bench.metrics import FAST_P, TaskOutcome, compute_metrics, curve_grid, fast_p, fast_p_curve, geomean_floored

OUTCOMES = [
    TaskOutcome("a", compiled=True, correct=True, speedup=2.0),
    TaskOutcome("b", compiled=True, correct=True, speedup=0.5),  # a regression: floored to 1.0 in the geomean
    TaskOutcome("c", compiled=True, correct=True, speedup=1.5),
    TaskOutcome("d", compiled=True, correct=False),
    TaskOutcome("e", compiled=False, correct=False),
]


def test_rates_geomean_with_floors_and_fast_p():
    m = compute_metrics(OUTCOMES)
    assert (m.tasks, m.compiled, m.correct) == (5, 4, 3)
    assert m.compilation_rate == pytest.approx(0.8) and m.correctness_rate == pytest.approx(0.6)
    assert m.speed == "measured" and m.measured == 3
    # correct tasks only: (2.0 * max(0.5, 1) * 1.5) ** (1/3) = 3 ** (1/3)
    assert m.geomean_speedup == pytest.approx(3 ** (1 / 3))
    # all five tasks, the two without a correct kernel at 1.0: 3 ** (1/5)
    assert m.geomean_speedup_all == pytest.approx(3 ** 0.2)
    # strictly greater than p; denominators are all five tasks
    assert m.fast_p == pytest.approx({"fast_0": 0.6, "fast_0.5": 0.4, "fast_1": 0.4, "fast_1.5": 0.2, "fast_2": 0.0})
    assert list(m.fast_p) == [f"fast_{p:g}" for p in FAST_P]


def test_fast_p_curve_steps_where_speedups_are():
    curve = dict(fast_p_curve(OUTCOMES))
    assert curve[0.0] == pytest.approx(0.6)
    assert curve[0.5] == pytest.approx(0.4) and curve[1.5] == pytest.approx(0.2) and curve[2.0] == 0.0
    assert curve[1.75] == pytest.approx(0.2)
    values = [v for _, v in fast_p_curve(OUTCOMES)]
    assert values == sorted(values, reverse=True)  # non-increasing in p
    grid = curve_grid([TaskOutcome("x", True, True, 7.0)])
    assert grid[0] == 0.0 and grid[-1] >= 7.0 and 7.0 in grid
    assert fast_p([], 1.0) == 0.0


def test_geomean_floored():
    assert geomean_floored([]) is None
    assert geomean_floored([0.25, 4.0]) == pytest.approx(2.0)  # sqrt(1 * 4)
    assert geomean_floored([1.21, 1.0]) == pytest.approx(1.1)


def test_unmeasured_speed_shows_no_numbers():
    m = compute_metrics(OUTCOMES[:1] + [TaskOutcome("z", True, True, None)], can_time=False, unmeasured_reason="no TPU here")
    assert m.speed == "unmeasured" and m.speed_note == "no TPU here"
    assert m.geomean_speedup is None and m.geomean_speedup_all is None and m.fast_p_curve == []
    assert all(v is None for v in m.fast_p.values())
    assert m.correct == 2 and m.correctness_rate == 1.0


def test_partial_measurement_counts_unmeasured_as_not_fast():
    m = compute_metrics([TaskOutcome("a", True, True, 3.0), TaskOutcome("b", True, True, None)])
    assert m.speed == "partial" and "1 correct task" in m.speed_note
    assert m.fast_p["fast_0"] == pytest.approx(0.5)
    assert m.geomean_speedup == pytest.approx(3.0)
    assert m.geomean_speedup_all == pytest.approx(math.sqrt(3.0))


def test_no_correct_task_is_measured_zero():
    m = compute_metrics([TaskOutcome("a", False, False), TaskOutcome("b", True, False)])
    assert m.speed == "measured" and m.geomean_speedup is None and m.geomean_speedup_all == 1.0
    assert set(m.fast_p.values()) == {0.0}
    assert m.compilation_rate == 0.5
