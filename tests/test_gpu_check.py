"""evals/gpu_check.py as a dry run here (no GPU): ci scale, interpret mode, nothing measured."""

from __future__ import annotations

import json

import pytest

from evals import gpu_check
from mk.targets import get_target

pytestmark = pytest.mark.skipif(get_target("gpu").device_present(), reason="a GPU is present: this is the dry-run test")


def test_dry_run_writes_results_that_say_not_measured(tmp_path):
    out = tmp_path / "gpu.json"
    rc = gpu_check.main(["--scale", "ci", "--tasks", "jaxbench:12p_RMSNorm", "jaxbench:no_such_task", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert (data["target"], data["scale"], data["mode"], data["measured"], data["device"]) == ("gpu", "ci", "interpret", False, None)
    rms, missing = data["tasks"]
    assert "no built-in task" in missing["error"]
    rowwise = [c for c in rms["candidates"] if c["template"] == "rowwise"]  # whole rows, then the two-pass variant
    assert len(rowwise) == 2 and all(c["status"] == "correct" for c in rowwise)
    cand = rowwise[0]
    assert cand["status"] == "correct" and cand["speedup"] is None and cand["roofline_fraction"] is None
    assert cand["timing"].startswith("not measured") and cand["hardware"] == "h200" and cand["bound"] == "memory"
    assert rms["best"] == cand["name"] and rms["best_speedup"] is None
    s = data["summary"]
    assert (s["tasks_run"], s["correct"], s["geomean_best_speedup"]) == (1, len([c for c in rms["candidates"] if c["status"] == "correct"]), None)
    assert s["timing"].startswith("not measured") and data["command"].startswith("python -m evals.gpu_check")


def test_full_scale_without_a_gpu_is_refused(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--tasks", "jaxbench:12p_RMSNorm", "--out", str(out)]) == 2
    assert "no gpu device here" in capsys.readouterr().err and not out.exists()


def test_budget_skips_the_remaining_tasks():
    data = gpu_check.run_check(["jaxbench:12p_RMSNorm", "jaxbench:8p_GEMM"], scale="ci", budget_s=-1.0)
    assert all("time budget" in t["skipped"] for t in data["tasks"]) and data["summary"]["tasks_skipped"] == 2


def test_summary_geomean_and_median():
    tasks = [{"task": "a", "best": "x", "best_speedup": 2.0, "candidates": [{"status": "correct", "roofline_fraction": 0.5}]},
             {"task": "b", "best": "y", "best_speedup": 8.0, "candidates": [{"status": "correct", "roofline_fraction": 0.7},
                                                                            {"status": "incorrect", "roofline_fraction": None}]}]
    s = gpu_check.summarize(tasks, measured=True)
    assert s["geomean_best_speedup"] == pytest.approx(4.0) and s["median_roofline_fraction"] == pytest.approx(0.6)
    assert (s["candidates"], s["correct"], s["timing"]) == (3, 2, "measured on the device")
