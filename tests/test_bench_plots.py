"""Bench plots stay readable when every method has one step, and when two methods' curves coincide."""

import matplotlib

matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402

from mk.bench.metrics import FAST_P, TaskOutcome, compute_metrics  # noqa: E402
from mk.bench.report import _by_step, _fast_p, line_style, same_as  # noqa: E402


def test_identical_curves_are_named_and_styled_apart():
    same = same_as({"auto": [0.5, 1.0], "best-of-n": [0.5, 1.0], "search": [0.5, 0.5]})
    assert same == {"best-of-n": "auto"}
    a, b = line_style(0), line_style(1)
    assert a["ls"] != b["ls"] and a["color"] != b["color"] and a["lw"] > b["lw"]


def test_one_step_is_drawn_as_labelled_bars():
    fig, ax = plt.subplots()
    series = {"auto": [{"step": 1, "correct_rate": 0.5}], "best-of-n": [{"step": 1, "correct_rate": 0.5}]}
    _by_step(ax, series, "correct_rate", True, lambda m: m, "{:.0%}")
    assert len(ax.patches) == 2 and [t.get_text() for t in ax.get_xticklabels()] == ["auto", "best-of-n"]
    assert [t.get_text() for t in ax.texts] == ["50%", "50%"]  # values written on the bars
    plt.close(fig)


def test_overlapping_lines_are_shifted_and_the_legend_says_so():
    fig, ax = plt.subplots()
    pts = [{"step": 1, "correct_rate": 0.5}, {"step": 2, "correct_rate": 1.0}]
    _by_step(ax, {"auto": pts, "search": list(pts)}, "correct_rate", False, lambda m: m, "{:.0%}")
    lines = ax.get_lines()
    assert len(lines) == 2 and list(lines[0].get_xdata()) != list(lines[1].get_xdata())  # side by side, not on top
    assert ax.get_legend_handles_labels()[1] == ["auto", "search (same curve as auto)"]
    plt.close(fig)


def _visible_marker(line) -> bool:
    return line.get_marker() not in (None, "", "None", " ") and line.get_markersize() > 0


def test_a_method_with_one_step_beside_others_is_a_marker_not_a_zero_length_line():
    fig, ax = plt.subplots()
    series = {"auto": [{"step": 1, "correct_rate": 0.5}, {"step": 2, "correct_rate": 1.0}],
              "best-of-n": [{"step": 1, "correct_rate": 0.5}]}
    _by_step(ax, series, "correct_rate", False, lambda m: m, "{:.0%}")
    lines = ax.get_lines()
    assert len(lines) == 2 and len(lines[1].get_xdata()) == 1 and all(_visible_marker(ln) for ln in lines)
    assert len({(ln.get_linestyle(), ln.get_marker(), ln.get_color()) for ln in lines}) == 2
    plt.close(fig)


def test_fast_p_curves_that_coincide_are_marked_styled_apart_and_named():
    outcomes = [TaskOutcome("a", True, True, 1.6), TaskOutcome("b", True, False, None)]
    met = compute_metrics(outcomes)
    one_point = compute_metrics(outcomes)
    one_point.fast_p_curve = [(0.0, 0.5)]  # a curve of one point: only its marker shows it
    fig, ax = plt.subplots()
    _fast_p(ax, {"auto": met, "search": compute_metrics(outcomes), "best-of-n": one_point})
    lines = ax.get_lines()[:3]  # then the threshold rules
    assert all(_visible_marker(ln) for ln in lines)
    assert len({ln.get_linestyle() for ln in lines}) == 3 and len({ln.get_marker() for ln in lines}) == 3
    assert len({ln.get_linewidth() for ln in lines}) == 3  # the widest below: a curve on top leaves it visible
    # a marker at every reported threshold the curve passes (and the one-point curve's single point)
    ps = list(lines[0].get_xdata())
    assert [ps[i] for i in lines[0].get_markevery()] == [p for p in FAST_P if p in ps]
    assert lines[2].get_markevery() == [0]
    labels = ax.get_legend().get_texts()
    assert [t.get_text() for t in labels] == ["auto (n=2)", "search (n=2) (same curve as auto)", "best-of-n (n=2)"]
    plt.close(fig)
