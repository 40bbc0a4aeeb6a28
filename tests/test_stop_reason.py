"""The stop reason a run reports is the one that stopped it (a spent budget is not "no rule applies")."""

from pathlib import Path

import pytest

from mk.budget import Budget
from mk.job import optimize_task
from mk.loaders import load_task

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def test_a_spent_budget_is_the_reported_stop_reason(tmp_path):
    full = load_task(EXAMPLES / "softmax.py")
    task = full.with_scales({"ci": full.scale("ci")})
    report = optimize_task(task, target="tpu", lm="offline", db=tmp_path / "db.duckdb", out=tmp_path / "out",
                           budget=Budget(max_wall_s=0.0), tune=False)
    assert report.stop_reason.startswith("budget spent") and "wall-time budget" in report.stop_reason, report.stop_reason
    assert "no rule applies" not in report.stop_reason


def test_a_search_stops_on_its_budget_and_says_so(tmp_path):
    full = load_task(EXAMPLES / "softmax.py")
    task = full.with_scales({"ci": full.scale("ci")})
    report = optimize_task(task, target="tpu", lm="offline", mode="search", db=tmp_path / "db.duckdb", out=tmp_path / "out",
                           budget=Budget(max_wall_s=0.0), tune=False, search={"workers": "inline"})
    assert report.stop_reason.startswith("budget spent: wall-time budget") and "stopped at 0 nodes" in report.stop_reason


def test_a_search_node_past_its_deadline_stops_between_phases():
    import time

    from mk.harness.suite import build_suite
    from mk.programs.auto import Plan
    from mk.programs.search_workers import NodeJob, run_node

    full = load_task(EXAMPLES / "softmax.py")
    task = full.with_scales({"ci": full.scale("ci")})
    job = NodeJob(key="n0", suite=build_suite(task), target="tpu", author="offline", first_plan=Plan("p", "a plan", None),
                  task=task, deadline=time.time() - 1)
    result = run_node(job)
    assert result.stop_reason.startswith("budget spent") and "wall-time" in result.stop_reason, result.stop_reason


def test_a_python_function_run_out_of_budget_names_mk_resume_with_a_budget(tmp_path):
    """mk.optimize's run: the command that continues it is mk.resume with a Budget, never `mk resume ... --budget-time`
    (which cannot load a Python function)."""
    import mk

    def double(x):
        return x * 2.0

    fast = mk.optimize(double, [((8, 128), "float32")], target="cpu", lm="offline", budget=Budget(max_wall_s=0.0),
                       tune=False, db=tmp_path / "db.duckdb", out=tmp_path / "out")
    reason = fast.report.stop_reason
    assert reason.startswith("budget spent: wall-time budget"), reason
    assert f"continue with a new budget: mk.resume({fast.report.run_id!r}" in reason
    assert "budget=mk.budget.Budget(max_wall_s=...)" in reason and "--budget-time" not in reason
