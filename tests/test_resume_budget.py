"""`mk resume` of an auto run stopped by its budget: a new budget, the run's own scale, the frozen suite checked."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mk.store import Store

EXAMPLE = Path(__file__).resolve().parent / "fixtures" / "small" / "softmax.py"  # the example with a small full size

pytestmark = pytest.mark.slow


def _mk(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "mk", *args], capture_output=True, text=True, timeout=timeout)


def test_resume_an_auto_run_with_a_new_budget_at_its_own_scale(tmp_path):
    db, out = str(tmp_path / "db.duckdb"), str(tmp_path / "out")
    first = _mk("optimize", str(EXAMPLE), "--lm", "offline", "--target", "tpu", "--scale", "ci", "--budget-time", "0",
                "--iterations", "1", "--db", db, "--out", out, "--json")
    payload = json.loads(first.stdout.strip().splitlines()[-1])
    assert payload["status"] == "no_correct_candidate" and payload["stop_reason"].startswith("budget spent"), payload
    with Store.open(db) as store:
        config = store.get_run(payload["run_id"])["config"]
    assert config["scales"] == ["ci"] and len(config["suite_hash"]) == 64 and config["locator"]
    again = _mk("resume", payload["run_id"], "--db", db, "--out", out, "--budget-time", "600", "--json")
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["status"] == "correct", (summary, again.stderr[-2000:])
    assert "source changed" not in again.stderr and "frozen suite changed" not in again.stderr
    kernel = Path(summary["kernel_path"]).read_text()
    assert "--scale ci" in kernel and f"frozen suite {config['suite_hash']}" in kernel  # the run's own scale and suite
