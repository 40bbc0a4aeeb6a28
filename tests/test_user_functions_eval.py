"""evals/user_functions.py: rows from parallel runs merge under a lock, the table counts each target's correct
kernels against the goal, and a function with no kernel gets one line."""

from __future__ import annotations

from types import SimpleNamespace

from evals import user_functions as uf
from tests.user_functions.heldout import FUNCTIONS


def test_the_held_out_set_is_what_the_eval_runs():
    assert len(FUNCTIONS) >= 20 and len({f.name for f in FUNCTIONS}) == len(FUNCTIONS)
    assert [f.name for f in uf._functions()] == [f.name for f in FUNCTIONS]


def test_parallel_runs_merge_and_the_table_counts_each_target(tmp_path):
    path = tmp_path / "user_functions.json"
    run = {"date": "d", "commit": "c", "command": "x", "targets": ["tpu"], "functions": 2, "seconds": 1.0}
    uf._merge(path, [{"function": "a", "target": "tpu", "status": "correct", "family": "rowwise-tpu", "why": "",
                      "seconds": 3.0}], [run])
    held = uf._merge(path, [{"function": "b", "target": "gpu", "status": "no_correct_candidate", "family": "",
                             "why": "nothing proposed; attention: no softmax", "seconds": 1.0}], [dict(run, targets=["gpu"])])
    held = uf._merge(path, [{"function": "a", "target": "tpu", "status": "incorrect", "family": "", "why": "case 1",
                             "seconds": 2.0}], [run])  # a later run of the same function replaces its row
    text = uf.render(held, ["a", "b"])
    assert "**tpu**: 0 of 1" in text and "**gpu**: 0 of 1" in text and "goal is 80%" in text
    assert "- a (tpu): case 1" in text and "- b (gpu): nothing proposed; attention: no softmax" in text
    assert len(held["runs"]) == 3 and len(held["rows"]) == 2


def test_why_is_one_line_naming_what_was_tried_or_the_nearest_families():
    tried = SimpleNamespace(iterations=[{"proposal": "flash", "status": "incorrect", "reason": "case 6\n  off by 2"}],
                            declined={}, stop_reason="")
    assert uf._why(tried) == "flash: incorrect: case 6 off by 2"
    none = SimpleNamespace(iterations=[], declined={"attention": "no   softmax\n over keys", "conv": "no conv"},
                           stop_reason="no rule applies")
    assert uf._why(none) == "nothing proposed; attention: no softmax over keys"


def test_a_pure_jax_rewrite_is_shown_but_is_not_a_kernel(tmp_path):
    run = {"date": "d", "commit": "c", "command": "x", "targets": ["tpu"], "functions": 2, "seconds": 1.0}
    held = uf._merge(tmp_path / "u.json", [
        {"function": "a", "target": "tpu", "status": "correct", "family": "rewrite-jax", "why": "", "seconds": 1.0},
        {"function": "b", "target": "tpu", "status": "correct", "family": "rowwise-tpu", "why": "", "seconds": 1.0}],
        [run])
    text = uf.render(held, ["a", "b"])
    assert "**tpu**: 1 of 2 functions got a Pallas kernel" in text and "1 more got a pure-JAX rewrite" in text
    assert "`correct` rewrite-jax, no kernel" in text and "- a (tpu): a pure-JAX rewrite" in text


def test_the_second_and_third_sets_are_their_own_files():
    from tests.user_functions.heldout2 import FUNCTIONS as SECOND
    from tests.user_functions.heldout3 import FUNCTIONS as THIRD

    assert [f.name for f in uf._functions("2")] == [f.name for f in SECOND]
    assert [f.name for f in uf._functions("3")] == [f.name for f in THIRD] and len(THIRD) == 24
    names = [{f.name for f in s} for s in (FUNCTIONS, SECOND, THIRD)]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    assert len({uf.SETS[k][1] for k in "123"}) == 3
