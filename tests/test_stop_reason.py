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
