"""Bench plots stay readable when every method has one step, and when two methods' curves coincide."""

import matplotlib

matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402

from mk.bench.report import _by_step, line_style, same_as  # noqa: E402


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
    assert ax.get_legend_handles_labels()[1] == ["auto", "search = auto"]
    plt.close(fig)
